#!/usr/bin/env bash
# Create (or reuse) the virtual environment both README commands use and install every
# package of the monorepo into it, editable (hpc-common with its [bench] extra: hpc-bench's rich and matplotlib).
# Sourced by tools/main.sh and tools/test.sh.
# On a machine without an NVIDIA driver it takes torch's CPU build (torch==2.13.0, which
# lies on disk on our CPU machines) so nothing downloads a multi-GB CUDA build.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${HPC_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    "${PIP[@]}" torch
  else
    "${PIP[@]}" "torch==2.13.0"
  fi
fi
"${PIP[@]}" -e "$ROOT/packages/hpc-common[bench]" -e "$ROOT/packages/hpc-router-gemm" \
  -e "$ROOT/packages/hpc-attention" -e "$ROOT/packages/hpc-moe" -e "$ROOT/integration" \
  "pytest>=8" "hypothesis>=6.100" "hatch>=1.12"
# transformers: the runner tests compare against its Qwen3MoeForCausalLM (hpc-integration[runner]).
"${PIP[@]}" "transformers>=4.51"
export PATH="$VENV/bin:$PATH"
export HPC_VENV_PY="$VENV/bin/python"
