"""Launch the wide96 plans with the x tile read from shared memory per product (SS) and from
registers (RS) once each inside a profiler range, for ncu (HISTORY.md, fourth session):

    ncu --clock-control none --profile-from-start off --set full python3 packages/hpc-router-gemm/scripts/profile_rs.py

(tools/gpu_check.sh does this with HPC_NCU_SCRIPTS=<this file>.)
"""

import torch

from hpc_router_gemm import RouterWeight, _ext
from hpc_router_gemm.heuristics import Plan
from hpc_router_gemm.router_gemm import launch

_ext.load()  # build before anything is profiled
CASES = {
    (4096, 192, 4096): (Plan("wide96", 2), Plan("wide96rs", 2)),
    (3072, 384, 1024): (Plan("wide96_wsp", 4), Plan("wide96rs_wsp", 4)),
}
for (K, N, M), plans in CASES.items():
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    rw = RouterWeight(torch.randn(N, K, device="cuda") * 0.02)
    out = torch.empty(M, N, device="cuda")
    for plan in plans:  # first launches (module load, workspace) outside the profiled range
        launch(x, rw, out, plan)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for plan in plans:
        launch(x, rw, out, plan)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
