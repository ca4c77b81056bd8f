# Source from the repo root of a checkout that is not pip-installed (the device machine):
#   source tools/dev_env.sh && hpc-bench --quick --out OUT/report
# Puts every package's src/ on PYTHONPATH, registers their entry points (hpc_ops.jit, hpc_ops.reference,
# hpc_ops.bench, console scripts) with tools/dev_entry_points.py, and puts the hpc-bench launcher on PATH.
HPC_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$HPC_ROOT/packages/hpc-common/src:$HPC_ROOT/packages/hpc-attention/src:$HPC_ROOT/packages/hpc-router-gemm/src:$HPC_ROOT/packages/hpc-moe/src:$HPC_ROOT/integration/src${PYTHONPATH:+:$PYTHONPATH}"
HPC_EP_DIR=$(mktemp -d /tmp/hpc_entry_points.XXXXXX)
python3 "$HPC_ROOT/tools/dev_entry_points.py" "$HPC_EP_DIR" >/dev/null
export PYTHONPATH="$HPC_EP_DIR:$PYTHONPATH"
export PATH="$HPC_EP_DIR/bin:$PATH"
# The device copy has no .git; tools/gpu_commit.txt (written by the caller) names the commit.
export HPC_GIT_COMMIT=${HPC_GIT_COMMIT:-$(cat "$HPC_ROOT/tools/gpu_commit.txt" 2>/dev/null || git -C "$HPC_ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export HPC_JIT_CACHE_DIR=${HPC_JIT_CACHE_DIR:-/tmp/hpc_jit}
export PYTHONUNBUFFERED=1
