# One device call of the large-M work (HISTORY.md "Large M, third session"): build, the
# workspace/multicast tests, the sweep of the large-M cases, ncu of a few plans, the older
# router tests with the time left. Usage on the device: bash <this> (OUT set by the tool).
set -u
export PYTHONPATH=$PWD/packages/hpc-common/src:$PWD/packages/hpc-router-gemm/src PYTHONUNBUFFERED=1 HPC_JIT_CACHE_DIR=/tmp/hpc_jit
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv > $OUT/gpu.txt
t0=$(date +%s)
timeout 90 python3 -c "from hpc_router_gemm import _ext; _ext.load()" > $OUT/build.log 2>&1; echo "build rc=$? $(( $(date +%s)-t0 ))s"
timeout 60 python3 -m pytest -m gpu -q -x -p no:cacheprovider tests/router_gemm/test_router_gemm_splitk_ws.py > $OUT/tests_ws.log 2>&1; rc=$?
echo "ws tests rc=$rc $(( $(date +%s)-t0 ))s"; tail -3 $OUT/tests_ws.log
skip=""; [ $rc -ne 0 ] && skip="--skip-paths wsm,wspm"
timeout 80 python3 benchmarks/bench_router_gemm.py --out-dir $OUT/results $skip --shapes longcat_chat:256/512/1024/4096,longcat_lite:512/1024/2048,generic:1024/2048/4096 > $OUT/bench.log 2>&1; echo "bench rc=$? $(( $(date +%s)-t0 ))s"
[ $rc -eq 0 ] && timeout 25 ncu --clock-control none --profile-from-start off --section SpeedOfLight --section ComputeWorkloadAnalysis python3 packages/hpc-router-gemm/scripts/profile_large_m.py > $OUT/ncu.log 2>&1; echo "ncu rc=$? $(( $(date +%s)-t0 ))s"
left=$(( 190 - ($(date +%s)-t0) ))
[ $left -gt 10 ] && timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider tests/router_gemm/test_router_gemm.py tests/router_gemm/test_router_gemm_props.py > $OUT/tests_old.log 2>&1; echo "old tests rc=$? $(( $(date +%s)-t0 ))s"; tail -3 $OUT/tests_old.log
