#!/usr/bin/env bash
# README command 1: set up and run the main job, a report of what this machine can run.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/tools/setup_env.sh"
cd "$ROOT"
exec "$HPC_VENV_PY" -m hpc_common.report "$@"
