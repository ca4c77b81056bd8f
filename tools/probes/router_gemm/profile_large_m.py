"""Launch the large-M router GEMM plans (cluster split-K against the cluster-free workspace
split-K) and TF32 cuBLAS once each inside a profiler range, for ncu (see the package DESIGN.md):

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section WarpStateStats python3 tools/probes/router_gemm/profile_large_m.py
"""

from _profile import profile_plans

from hpc_router_gemm.heuristics import Plan

CASES = {
    (6144, 768, 512): (Plan("wide96_wsp", 4), Plan("wide96_wspm", 4)),
    (3072, 384, 1024): (Plan("wide96_wsp", 4), Plan("wide96_wspm", 4)),
    (4096, 192, 4096): (Plan("wide96", 2), Plan("wide96_wspm", 2), Plan("wide96_wspm", 1)),
}
profile_plans(CASES, cublas='tf32')
