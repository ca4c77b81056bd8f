"""Launch the M=1 router GEMM of each listed shape, ours and FP32 cuBLAS, a few times each, for
`ncu` to profile (see NOTES.md: what bounds the small-M FP32 path).

    ncu --clock-control none --metrics <...> python3 packages/hpc-router-gemm/scripts/profile_m1.py
"""

import torch

from hpc_router_gemm import RouterWeight, router_gemm

for K, N in ((6144, 768), (4096, 192)):
    x = torch.randn(1, K, device="cuda").to(torch.bfloat16)
    w = torch.randn(N, K, device="cuda") * 0.02
    rw = RouterWeight(w)
    xf = x.float()
    for _ in range(3):
        router_gemm(x, rw)
        torch.mm(xf, w.T)
    torch.cuda.synchronize()
