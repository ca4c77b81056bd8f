#!/usr/bin/env bash
# One call on an H200: build every kernel, run the GPU test suite, run the benchmarks.
# Usage (on the device machine, from the repo root): bash tools/gpu_check.sh OUT_DIR [pytest -k expr] [bench glob]
# Writes (packed into OUT_DIR/gpu_check.tgz) OUT_DIR/prebuild.log, OUT_DIR/gpu_tests.log (+ junit xml), OUT_DIR/bench.log and
# benchmark JSON/Markdown under OUT_DIR/results/<gpu>/.
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR [pytest-k] [bench-glob]}
KEXPR=${2:-}
BENCH_GLOB=${3:-bench_*.py}
mkdir -p "$OUT/results"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT/packages/hpc-common/src:$ROOT/packages/hpc-attention/src:$ROOT/packages/hpc-router-gemm/src:$ROOT/packages/hpc-moe/src:$ROOT/integration/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# The device copy has no .git; tools/gpu_commit.txt (written by the caller) names the commit.
export HPC_GIT_COMMIT=${HPC_GIT_COMMIT:-$(cat tools/gpu_commit.txt 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export HPC_JIT_CACHE_DIR=${HPC_JIT_CACHE_DIR:-/tmp/hpc_jit}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"

if [ "${HPC_SKIP_PREBUILD:-0}" != 1 ]; then
  echo "== prebuild (parallel nvcc)"
  t0=$(date +%s)
  python3 -m hpc_common.jit.prebuild 2>&1 | tee "$OUT/prebuild.log"
  echo "prebuild took $(( $(date +%s) - t0 ))s"
fi

TESTS=${HPC_GPU_TESTS:-tests}
TEST_RC=0
if [ "$TESTS" != none ]; then
  echo "== GPU tests ($TESTS)"
  KARGS=()
  [ -n "$KEXPR" ] && KARGS=(-k "$KEXPR")
  # shellcheck disable=SC2086  # TESTS may name several paths
  python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml" "${KARGS[@]}" $TESTS 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -40
  TEST_RC=${PIPESTATUS[0]}
fi

if [ "${HPC_SKIP_TIMING_CHECK:-0}" != 1 ]; then
  echo "== timing harness check"
  python3 tools/timing_check.py 2>&1 | tee "$OUT/timing_check.log"
fi

echo "== benchmarks ($BENCH_GLOB)"
for b in benchmarks/$BENCH_GLOB; do
  [ -f "$b" ] || continue
  echo "-- $b"
  # shellcheck disable=SC2086  # extra benchmark flags, e.g. HPC_BENCH_ARGS=--quick
  python3 "$b" --out-dir "$OUT/results" ${HPC_BENCH_ARGS:-} 2>&1 | tee -a "$OUT/bench.log" | tail -30
done
echo "GPU tests exit code: $TEST_RC"
# The device tool returns at most 8 files: pack everything into one archive.
tar -C "$OUT" -czf /tmp/gpu_check.tgz --exclude=gpu_check.tgz . && mv /tmp/gpu_check.tgz "$OUT/gpu_check.tgz"
find "$OUT" -mindepth 1 ! -name gpu_check.tgz ! -name gpu_tests.log -delete 2>/dev/null || true
exit $TEST_RC
