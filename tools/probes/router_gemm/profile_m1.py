"""Launch each small-M router GEMM plan once per listed shape (M=1), plus FP32 cuBLAS, inside a
profiler range, for `ncu --profile-from-start off` to profile: what bounds the fp32 split-K
path, its L2-prefetch variant and the two gemv paths (see the package DESIGN.md).

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        python3 tools/probes/router_gemm/profile_m1.py
"""

from _profile import profile_plans

from hpc_router_gemm.heuristics import Plan

CASES = {
    (6144, 768, 1): (Plan("fp32", 2), Plan("fp32pf", 2), Plan("gemv", 1), Plan("gemvr", 1)),
    (4096, 192, 1): (Plan("fp32", 8), Plan("fp32pf", 8), Plan("gemv", 2), Plan("gemvr", 2)),
}
profile_plans(CASES, cublas='fp32')
