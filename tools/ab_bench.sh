#!/usr/bin/env bash
# A/B of one benchmark in one device call: the same script run against an earlier tree's packages
# (A) and this tree's (B), alternating A B A, so machine-to-machine spread does not enter the
# comparison. Prepare A here with tools/ab_prepare.sh REV (writes ab_old/, git-ignored, named in
# the device tool's `carry`), then on the device:
#   bash tools/ab_bench.sh OUT_DIR bench_decode_attention.py --heads 8/1 --kv fp8 --no-diag
# Writes OUT_DIR/{A1,B,A2}/<gpu>/<op>.json and OUT_DIR/ab.log (the benchmark's console output), and packs
# the three runs' results into OUT_DIR/ab_results.tgz (the device tool does not return files that deep).
set -uo pipefail
OUT=${1:?usage: ab_bench.sh OUT_DIR BENCH_SCRIPT [args...]}
SCRIPT=${2:?usage: ab_bench.sh OUT_DIR BENCH_SCRIPT [args...]}
shift 2
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ -d ab_old/packages ] || { echo "ab_old/packages missing: run tools/ab_prepare.sh REV first"; exit 2; }
paths() {  # PYTHONPATH of the packages under $1
  local p=""
  for pkg in hpc-common hpc-attention hpc-router-gemm hpc-moe; do p="$p:$1/packages/$pkg/src"; done
  echo "${p#:}:$1/integration/src"
}
export PYTHONUNBUFFERED=1 HPC_JIT_CACHE_DIR=${HPC_JIT_CACHE_DIR:-/tmp/hpc_jit}
mkdir -p "$OUT"
# Each run's results name its tree (the device copy's .git, if any, is not this checkout's):
# A = ab_old/REV, B = tools/gpu_commit.txt (carry it) with "+wip" for uncommitted changes.
B_REV="$(cat tools/gpu_commit.txt 2>/dev/null || echo unknown)+wip"
for run in A1 B A2; do
  src="$ROOT"; rev="$B_REV"
  if [ "$run" != B ]; then src="$ROOT/ab_old"; rev="$(cat ab_old/REV)"; fi
  echo "== $run ($src, $rev)" | tee -a "$OUT/ab.log"
  HPC_GIT_COMMIT="$rev" PYTHONPATH="$(paths "$src")" python3 "benchmarks/$SCRIPT" --out-dir "$OUT/$run" "$@" 2>&1 | tee -a "$OUT/ab.log" | tail -3
done
tar czf "$OUT/ab_results.tgz" -C "$OUT" A1 B A2 2>/dev/null || echo "ab_bench: some runs wrote no results"
