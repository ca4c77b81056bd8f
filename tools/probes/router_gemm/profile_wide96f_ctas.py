"""The M = 4096 plan (wide96f, 2-CTA cluster split) at 16, 64 and 128 CTAs with the same work
per CTA (M = 512, 2048, 4096 at K=4096 N=192), once each inside a profiler range, for ncu with
source-level stall sampling (DESIGN.md "What is left" 1: where do the consumers wait as the grid
grows?):

    ncu --clock-control none --profile-from-start off --section SpeedOfLight --section WarpStateStats \\
        --section SourceCounters --section MemoryWorkloadAnalysis -o rep \\
        python3 tools/probes/router_gemm/profile_wide96f_ctas.py
"""

from _profile import profile_plans

from hpc_router_gemm.heuristics import Plan

CASES = {(4096, 192, m): (Plan("wide96f", 2),) for m in (512, 2048, 4096)}
profile_plans(CASES)
