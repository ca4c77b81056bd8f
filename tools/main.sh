#!/usr/bin/env bash
# README command 1, the main job: set up .venv, then `hpc-bench` (machine, kernel build, every installed
# operator's benchmark on this GPU with its baselines, or the references' CPU checks without one) into a
# report folder (default ./hpc-bench-report; arguments go to hpc-bench, e.g. --quick, --ops, --out).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/tools/setup_env.sh"
cd "$ROOT"
exec "$HPC_VENV_PY" -m hpc_common.bench.cli "$@"
