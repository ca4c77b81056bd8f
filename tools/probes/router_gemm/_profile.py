"""The body every profile_*.py script shares: launch a table of router GEMM plans once each
inside a CUDA profiler range, for `ncu --profile-from-start off` (tools/gpu_check.sh runs a
script under ncu with HPC_NCU_SCRIPTS=<file>). The scripts only name their plans."""

import torch

from hpc_router_gemm import RouterWeight, _ext
from hpc_router_gemm.router_gemm import launch


def profile_plans(cases: dict, cublas: str | None = None) -> None:
    """cases: {(K, N, M): plans}. Per case, on random x (BF16) and W (0.02 N(0, 1)): every plan,
    and with cublas="fp32" / "tf32" also torch.mm on the FP32 cast of x, run once outside the
    range (module load, workspace) and once inside it."""
    _ext.load()  # build before anything is profiled
    allow_tf32 = torch.backends.cuda.matmul.allow_tf32
    for (K, N, M), plans in cases.items():
        x = torch.randn(M, K, device="cuda").to(torch.bfloat16)
        rw = RouterWeight(torch.randn(N, K, device="cuda") * 0.02)
        out = torch.empty(M, N, device="cuda")
        xf = x.float()
        torch.backends.cuda.matmul.allow_tf32 = cublas == "tf32"

        def run():
            for plan in plans:
                launch(x, rw, out, plan)
            if cublas is not None:
                torch.mm(xf, rw.weight.T)

        run()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        run()
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
    torch.backends.cuda.matmul.allow_tf32 = allow_tf32
