"""Launch the wide96 plans with the x tile read from shared memory per product (SS) and from
registers (RS) once each inside a profiler range, for ncu:

    ncu --clock-control none --profile-from-start off --set full python3 tools/probes/router_gemm/profile_rs.py

(tools/gpu_check.sh does this with HPC_NCU_SCRIPTS=<this file>.)
"""

from _profile import profile_plans

from hpc_router_gemm.heuristics import Plan

CASES = {
    (4096, 192, 4096): (Plan("wide96", 2), Plan("wide96rs", 2)),
    (3072, 384, 1024): (Plan("wide96_wsp", 4), Plan("wide96rs_wsp", 4)),
}
profile_plans(CASES)
