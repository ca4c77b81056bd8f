"""Launch the large-M router GEMM plans (cluster split-K against the cluster-free workspace
split-K) and TF32 cuBLAS once each inside a profiler range, for ncu (see NOTES.md):

    ncu --clock-control none --profile-from-start off --section SpeedOfLight \\
        --section WarpStateStats python3 packages/hpc-router-gemm/scripts/profile_large_m.py
"""

import torch

from hpc_router_gemm import RouterWeight, _ext
from hpc_router_gemm.heuristics import Plan
from hpc_router_gemm.router_gemm import launch

_ext.load()  # build before anything is profiled
CASES = {
    (6144, 768, 512): (Plan("wide96_wsp", 4), Plan("wide96_wspm", 4)),
    (3072, 384, 1024): (Plan("wide96_wsp", 4), Plan("wide96_wspm", 4)),
    (4096, 192, 4096): (Plan("wide96", 2), Plan("wide96_wspm", 2), Plan("wide96_wspm", 1)),
}
for (K, N, M), plans in CASES.items():
    x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
    rw = RouterWeight(torch.randn(N, K, device="cuda") * 0.02)
    out = torch.empty(M, N, device="cuda")
    xf = x.float()
    torch.backends.cuda.matmul.allow_tf32 = True
    for plan in plans:  # first launches (module load, workspace) outside the profiled range
        launch(x, rw, out, plan)
    torch.mm(xf, rw.weight.T)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for plan in plans:
        launch(x, rw, out, plan)
    torch.mm(xf, rw.weight.T)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    torch.backends.cuda.matmul.allow_tf32 = False
