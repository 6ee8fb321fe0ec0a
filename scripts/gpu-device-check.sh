#!/usr/bin/env bash
# Prepared check for a machine with a real NVIDIA GPU and driver. Builds
# nodeproof and runs, writing everything to $OUT (default ./gpu-check-out):
#   - `nodeproof gpu` (NVML; text and JSON) with the default config,
#   - the same with the CUDA probe enabled ([gpu.cuda]: cuInit, a context and
#     a 1 MiB allocation per GPU), kept and released between cycles, timed,
#   - NVML's GPU fabric info and NVLink state (in the JSON: gpus[].fabric,
#     gpus[].nvlinks), next to `nvidia-smi -q -d FABRIC` and `nvidia-smi nvlink -s`,
#   - `nvidia-smi -q -x`, and a field-by-field comparison of the two
#     (scripts/gpu-compare.py, written to $OUT/comparison.txt).
# The kubelet's pod-resources socket is normally absent on such a machine
# (no kubelet): the script records whether it exists and says that the
# advertised-vs-healthy and pod-attribution checks were not exercised.
# Run from the repository root. Exit status: 0 when every step ran, 1 when
# the build failed; a failing nodeproof verdict is data, not a script failure.
set -u
set -o pipefail

OUT=${OUT:-./gpu-check-out}
mkdir -p "$OUT"
log() { printf '%s\n' "$*" | tee -a "$OUT/summary.txt"; }
: >"$OUT/summary.txt"

{
  uname -a
  ls -l /dev/nvidia* 2>&1
  ldconfig -p | grep -E 'libnvidia-ml|libcuda' 2>&1
  cat /proc/driver/nvidia/version 2>&1
  lsmod | grep -E '^nvidia' 2>&1
  systemctl is-active nvidia-fabricmanager 2>&1
  systemctl is-active nvidia-persistenced 2>&1
} >"$OUT/host.txt" 2>&1

socket=/var/lib/kubelet/pod-resources/kubelet.sock
if [ -S "$socket" ]; then
  log "pod-resources: $socket exists (a kubelet runs here); this script does not query it"
else
  log "pod-resources: $socket absent (no kubelet on this machine): advertised-vs-healthy and pod attribution not exercised"
fi

if ! NODEPROOF_BPF_STUB=1 cargo build --release -p nodeproof >"$OUT/build.log" 2>&1; then
  log "build failed"
  tail -20 "$OUT/build.log"
  exit 1
fi
bin=target/release/nodeproof

# One config per mode; everything else is the shipped default.
write_config() { # $1=file $2=cuda enabled $3=release
  cat >"$1" <<CONFIG
[gpu]
release-between-cycles = $3
[gpu.cuda]
enabled = $2
CONFIG
}

run_mode() { # $1=name $2=cuda enabled $3=release
  local name=$1 cfg="$OUT/config-$1.toml" start end rc
  write_config "$cfg" "$2" "$3"
  start=$(date +%s%N)
  "$bin" --config "$cfg" gpu -o json >"$OUT/nodeproof-gpu-$name.json" 2>"$OUT/nodeproof-gpu-$name.stderr"
  rc=$?
  end=$(date +%s%N)
  log "nodeproof gpu ($name): exit $rc, $(((end - start) / 1000000)) ms wall (process start, dlopen, init, one cycle)"
  "$bin" --config "$cfg" gpu >"$OUT/nodeproof-gpu-$name.txt" 2>&1
  if command -v /usr/bin/time >/dev/null 2>&1; then
    /usr/bin/time -v "$bin" --config "$cfg" gpu -o json >/dev/null 2>"$OUT/nodeproof-gpu-$name.time" || true
    grep -E 'Maximum resident|Elapsed' "$OUT/nodeproof-gpu-$name.time" | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt"
  fi
}

run_mode nvml false false
run_mode cuda true false
run_mode cuda-released true true

nvidia-smi -q -x >"$OUT/nvidia-smi.xml" 2>&1
log "nvidia-smi -q -x: exit $?"
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
nvidia-smi -q -d FABRIC >"$OUT/nvidia-smi-fabric.txt" 2>&1 || true
nvidia-smi nvlink -s >"$OUT/nvidia-smi-nvlink.txt" 2>&1 || true
nvidia-smi topo -m >"$OUT/nvidia-smi-topo.txt" 2>&1 || true

if command -v python3 >/dev/null 2>&1; then
  python3 scripts/gpu-compare.py "$OUT/nodeproof-gpu-cuda.json" "$OUT/nvidia-smi.xml" >"$OUT/comparison.txt" 2>&1
  log "comparison (nodeproof with CUDA vs nvidia-smi): exit $?, $(grep -c ' DIFF ' "$OUT/comparison.txt") differing fields"
else
  log "python3 missing: comparison not written"
fi
cat "$OUT/nodeproof-gpu-cuda.txt"
cat "$OUT/summary.txt"
