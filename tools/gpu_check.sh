#!/usr/bin/env bash
# One call on an H200: build every kernel, run the GPU test suite, the compute-sanitizer step, the benchmarks.
# Usage (on the device machine, from the repo root): bash tools/gpu_check.sh OUT_DIR [pytest -k expr] [bench glob]
# Writes (packed into OUT_DIR/gpu_check.tgz) OUT_DIR/prebuild.log, OUT_DIR/gpu_tests.log (+ junit xml), OUT_DIR/bench.log,
# OUT_DIR/smi.log (clocks, power and temperature every 200 ms during the benchmarks) and
# benchmark JSON/Markdown under OUT_DIR/results/<gpu>/.
# Sanitizer step (HPC_SANITIZE=1, or "only": nothing but prebuild and this step): tools/sanitize_ops.py (every
# production kernel once on small shapes) under `compute-sanitizer --tool memcheck`, `racecheck` and `synccheck`,
# one run each (racecheck: one process per op group at once, the router at its smallest M), logs
# OUT_DIR/sanitizer_<tool>.log and one line per tool: "sanitizer <tool>: PASS|FAIL ...".
# HPC_SANITIZE_TOOLS="memcheck racecheck" picks tools, HPC_SANITIZE_GROUPS="decode moe" racecheck's op groups. The same: HPC_GPU_TESTS=none HPC_BENCH_GLOB=none HPC_SANITIZE=1.
# Targeted runs (save device time): HPC_GPU_TESTS="tests/router_gemm" limits the test paths, HPC_PYTEST_ARGS adds
# pytest flags (e.g. "-n 8" with pytest-xdist, after the prebuild),
# ("none" skips the tests), HPC_BENCH_GLOB (or the third argument; "none" skips the benchmarks),
# HPC_SKIP_PREBUILD=1 lets each test JIT-build only what it imports,
# HPC_SKIP_TIMING_CHECK=1 skips tools/timing_check.py, HPC_BENCH_ARGS adds flags to every
# benchmark, HPC_BENCH_ARGS_<name> to bench_<name>.py only (e.g. HPC_BENCH_ARGS_fp8_quant=--no-ref).
# HPC_DEADLINE_S=N: every step gets a timeout so the whole script ends within N seconds and the
# archive is always written (steps that would start with < 15 s left are skipped).
# HPC_NCU_SCRIPTS="a.py b.py": after the benchmarks, `ncu --set full` of each (profiler range),
# details page written to OUT/ncu_<script name>.txt (HPC_NCU_SOURCE=1: and the source page with per-instruction
# stall samples as OUT/ncu_<script name>_source.csv).
set -uo pipefail
OUT=${1:?usage: gpu_check.sh OUT_DIR [pytest-k] [bench-glob]}
KEXPR=${2:-}
BENCH_GLOB=${3:-${HPC_BENCH_GLOB:-bench_*.py}}
SANITIZE=${HPC_SANITIZE:-0}
if [ "$SANITIZE" = only ]; then HPC_GPU_TESTS=none; BENCH_GLOB=none; HPC_SKIP_TIMING_CHECK=1; fi
[ "$BENCH_GLOB" = none ] && HPC_SKIP_TIMING_CHECK=1
mkdir -p "$OUT/results"
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PYTHONPATH="$ROOT/packages/hpc-common/src:$ROOT/packages/hpc-attention/src:$ROOT/packages/hpc-router-gemm/src:$ROOT/packages/hpc-moe/src:$ROOT/integration/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
# No pip install here: the packages' entry points (hpc_ops.jit, hpc_ops.reference, through which
# hpc-common finds its dependents) are registered as .dist-info folders on PYTHONPATH instead.
EP_DIR=$(mktemp -d /tmp/hpc_entry_points.XXXXXX)
python3 tools/dev_entry_points.py "$EP_DIR" >/dev/null
export PYTHONPATH="$EP_DIR:$PYTHONPATH"
# The device copy has no .git; tools/gpu_commit.txt (written by the caller) names the commit.
export HPC_GIT_COMMIT=${HPC_GIT_COMMIT:-$(cat tools/gpu_commit.txt 2>/dev/null || git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)}
export HPC_JIT_CACHE_DIR=${HPC_JIT_CACHE_DIR:-/tmp/hpc_jit}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
DEADLINE=$(( $(date +%s) + ${HPC_DEADLINE_S:-1000000} - 10 ))  # 10 s kept for the archive
# step CMD...: run with the time left as timeout; skipped (rc 124) with < 15 s left.
step() {
  local left=$(( DEADLINE - $(date +%s) ))
  if [ "$left" -lt 15 ]; then echo "skipped (deadline): $*"; return 124; fi
  timeout "$left" "$@"
}

if [ "${HPC_SKIP_PREBUILD:-0}" != 1 ]; then
  echo "== prebuild (parallel nvcc)"
  t0=$(date +%s)
  step python3 -m hpc_common.jit.prebuild 2>&1 | tee "$OUT/prebuild.log"
  echo "prebuild took $(( $(date +%s) - t0 ))s"
fi

TESTS=${HPC_GPU_TESTS:-tests}
TEST_RC=0
if [ "$TESTS" != none ]; then
  echo "== GPU tests ($TESTS)"
  KARGS=()
  [ -n "$KEXPR" ] && KARGS=(-k "$KEXPR")
  # shellcheck disable=SC2086  # TESTS may name several paths
  step python3 -m pytest -m gpu -q -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml" "${KARGS[@]}" ${HPC_PYTEST_ARGS:-} $TESTS 2>&1 \
    | tee "$OUT/gpu_tests.log" | tail -40
  TEST_RC=${PIPESTATUS[0]}
fi

SANITIZE_RC=0
if [ "$SANITIZE" != 0 ]; then
  echo "== compute-sanitizer (tools/sanitize_ops.py)"
  SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  # sanitize LOG ARGS...: one compute-sanitizer run of tools/sanitize_ops.py; exit code of the run.
  sanitize() {
    local log=$1 tool=$2; shift 2
    # torch's own kernels (at::native) are left out: only ours are instrumented, which keeps each run short.
    step "$SAN" --tool "$tool" --error-exitcode 9 --print-limit 50 --kernel-name-exclude kns=at::native \
      python3 tools/sanitize_ops.py --require-all "$@" > "$log" 2>&1
    local rc=$?
    if [ "$rc" != 0 ] && ! grep -q "^sanitize_ops:" "$log" && grep -qi "kernel-name-exclude" "$log"; then
      # an older compute-sanitizer without the filter: every kernel instrumented (slower, same checks)
      step "$SAN" --tool "$tool" --error-exitcode 9 --print-limit 50 python3 tools/sanitize_ops.py --require-all "$@" \
        > "$log" 2>&1
      rc=$?
    fi
    return $rc
  }
  for tool in ${HPC_SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
    log="$OUT/sanitizer_$tool.log"
    t0=$(date +%s)
    if [ "$tool" = racecheck ]; then
      # racecheck runs 10-100x slower than memcheck: one process per op group, all at once (independent
      # launches; the GPU is shared), with the router's paths at their smallest M (--light).
      groups=${HPC_SANITIZE_GROUPS:-fp8 router decode prologue moe}
      for g in $groups; do
        ( sanitize "$OUT/sanitizer_racecheck_$g.log" racecheck --only "$g" --light; echo $? > "$OUT/.racecheck_$g.rc" ) &
      done
      wait
      rc=0; errors=""; ran="per group in the log"
      for g in $groups; do
        r=$(cat "$OUT/.racecheck_$g.rc"); rm -f "$OUT/.racecheck_$g.rc"
        [ "$r" != 0 ] && rc=$r
        h=$(grep -Eo "RACECHECK SUMMARY: [0-9]+ hazard" "$OUT/sanitizer_racecheck_$g.log" | grep -Eo "[0-9]+" | tail -1)
        errors="$errors$g exit $r ${h:-no summary} hazards; "
        { echo "#### racecheck --only $g: exit $r"; cat "$OUT/sanitizer_racecheck_$g.log"; } >> "$log"
        rm -f "$OUT/sanitizer_racecheck_$g.log"
      done
    else
      sanitize "$log" "$tool"
      rc=$?
      errors=$(grep -Eo "ERROR SUMMARY: [0-9]+ error" "$log" | tail -1)
      ran=$(grep -E "^sanitize_ops:" "$log" | tail -1)
    fi
    if [ "$rc" = 0 ]; then verdict=PASS; else verdict=FAIL; SANITIZE_RC=1; fi
    echo "sanitizer $tool: $verdict (exit $rc, $(( $(date +%s) - t0 ))s; ${errors:-no summary}; ${ran:-driver did not finish}) -> $(basename "$log")" \
      | tee -a "$OUT/sanitizer_summary.log"
  done
fi

if [ "${HPC_SKIP_TIMING_CHECK:-0}" != 1 ]; then
  echo "== timing harness check"
  step python3 tools/timing_check.py 2>&1 | tee "$OUT/timing_check.log"
fi

if [ "$BENCH_GLOB" != none ]; then
echo "== benchmarks ($BENCH_GLOB)"
# SM / memory clocks, power and temperature every 200 ms while the benchmarks run (OUT/smi.log):
# the 64/8 FP8 decode timeline read a 1.76 GHz SM clock with the math on against 1.98 without,
# so a number that moves between runs can be checked against throttling.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu \
  --format=csv -lms 200 > "$OUT/smi.log" 2>&1 &
SMI_PID=$!
for b in benchmarks/$BENCH_GLOB; do
  [ -f "$b" ] || continue
  name=$(basename "$b" .py)
  own_var="HPC_BENCH_ARGS_${name#bench_}"
  echo "-- $b"
  # shellcheck disable=SC2086  # extra benchmark flags, e.g. HPC_BENCH_ARGS=--quick
  step python3 "$b" --out-dir "$OUT/results" ${HPC_BENCH_ARGS:-} ${!own_var:-} 2>&1 | tee -a "$OUT/bench.log" | tail -30
done
kill "$SMI_PID" 2>/dev/null || true
fi
for script in ${HPC_NCU_SCRIPTS:-}; do
  echo "-- ncu $script"
  tag=$(basename "$script" .py)
  step ncu --clock-control none --profile-from-start off --set full -o "$OUT/ncu_$tag" python3 "$script" \
    > "$OUT/ncu_$tag.log" 2>&1 && ncu --import "$OUT/ncu_$tag.ncu-rep" --page details > "$OUT/ncu_$tag.txt" 2>&1
  # HPC_NCU_SOURCE=1: also the per-instruction stall sampling (tools/ncu_source_summary.py reads it).
  if [ "${HPC_NCU_SOURCE:-0}" = 1 ] && [ -f "$OUT/ncu_$tag.ncu-rep" ]; then
    ncu --import "$OUT/ncu_$tag.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu_${tag}_source.csv" 2>&1
  fi
  rm -f "$OUT/ncu_$tag.ncu-rep"
done
echo "GPU tests exit code: $TEST_RC"
[ "$SANITIZE" != 0 ] && echo "sanitizer exit code: $SANITIZE_RC" && cat "$OUT/sanitizer_summary.log"
# The device tool returns at most 8 files: pack everything into one archive.
tar -C "$OUT" -czf /tmp/gpu_check.tgz --exclude=gpu_check.tgz . && mv /tmp/gpu_check.tgz "$OUT/gpu_check.tgz"
find "$OUT" -mindepth 1 ! -name gpu_check.tgz ! -name gpu_tests.log ! -name 'sanitizer_*.log' -delete 2>/dev/null || true
[ "$TEST_RC" = 0 ] && exit "$SANITIZE_RC"
exit $TEST_RC
