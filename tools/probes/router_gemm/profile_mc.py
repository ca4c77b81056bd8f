"""Launch the K=4096 N=192 M=4096 plans with and without the weight multicast (2-CTA clusters
of neighbouring M tiles) once each inside a profiler range, for ncu:

    ncu --clock-control none --profile-from-start off --set full python3 tools/probes/router_gemm/profile_mc.py

(tools/gpu_check.sh does this with HPC_NCU_SCRIPTS=<this file>.)
"""

from _profile import profile_plans

from hpc_router_gemm.heuristics import Plan

CASES = {(4096, 192, 4096): (Plan("wide96", 2), Plan("wide96_wspm", 2), Plan("widers_wsp", 4), Plan("widers_wspm", 4))}
profile_plans(CASES)
