#!/usr/bin/env bash
# Prepared check for a machine with a real NVIDIA GPU and driver: builds
# nodeproof, runs `nodeproof gpu -o json` and `nvidia-smi -q -x`, and writes
# both (plus the text view and exit codes) to $OUT for comparison with what
# the fake-NVML tests assume. Run from the repository root; OUT defaults to ./gpu-check-out.
set -u
OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT"
{
  uname -a
  ls -l /dev/nvidia* 2>&1
  ldconfig -p | grep -i nvidia-ml
  cat /proc/driver/nvidia/version 2>&1
} >"$OUT/host.txt" 2>&1
NODEPROOF_BPF_STUB=1 cargo build --release -p nodeproof >"$OUT/build.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/build.log"; exit 1; }
bin=target/release/nodeproof
start=$(date +%s%N)
$bin gpu -o json >"$OUT/nodeproof-gpu.json" 2>"$OUT/nodeproof-gpu.stderr"; echo "exit $?" >"$OUT/nodeproof-gpu.rc"
echo "elapsed_ms $(( ($(date +%s%N) - start) / 1000000 ))" >>"$OUT/nodeproof-gpu.rc"
$bin gpu >"$OUT/nodeproof-gpu.txt" 2>&1; echo "exit $?" >>"$OUT/nodeproof-gpu.rc"
/usr/bin/time -v $bin gpu -o json >/dev/null 2>"$OUT/nodeproof-gpu.time" || true
nvidia-smi -q -x >"$OUT/nvidia-smi.xml" 2>&1; echo "exit $?" >"$OUT/nvidia-smi.rc"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
cat "$OUT/nodeproof-gpu.txt" "$OUT/nodeproof-gpu.rc"
