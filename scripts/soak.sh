#!/usr/bin/env bash
# The fault and soak harness (agent/tests/soak.rs) against the real binary:
# nodeproof.service under systemd as PID 1 in systemd-nspawn, reporting to
# the test API server run as a process of its own (agent/examples/apiserver.rs).
#
#   scripts/soak.sh faults [A,B]  every fault once (or only A and B), invariants after each, a table (as CI runs it)
#   scripts/soak.sh [MINUTES]     the soak: denials, profile churn and GPU flaps for MINUTES
#                                 (default 30), the agent's RSS and open fds every 10 s
#
# Needs root, debootstrap and systemd-container (`cargo xtask setup`); the
# container's root filesystem is built once under target/nspawn/. Run from
# anywhere; output goes to stderr (the table, the figures, every sample).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-30}" in
  faults)
    NODEPROOF_FAULTS="${2:-${NODEPROOF_FAULTS:-}}" exec cargo test -p nodeproof --test soak -- --nocapture --exact faults_each_once ;;
  *[!0-9]*)
    echo "usage: $0 faults | $0 [MINUTES]" >&2; exit 64 ;;
  *)
    NODEPROOF_SOAK_MINUTES="${1:-30}" exec cargo test -p nodeproof --test soak -- --nocapture --ignored --exact soak ;;
esac
