"""hpc-bench suite of the router GEMM (entry point `hpc_ops.bench: router_gemm`): the cases of
hpc_router_gemm.bench, and without a GPU the split-weight product checked against float64."""

from __future__ import annotations

import torch
from hpc_common.bench.layouts import Layout
from hpc_common.bench.suite import BenchCase, BenchSuite, check_row

QUICK = {"generic": (1, 16, 64, 256, 1024, 4096)}  # the README's sweep


class RouterGemmSuite(BenchSuite):
    op = "router_gemm"
    title = "Router GEMM (hpc_router_gemm)"
    order, aliases = 30, ("router",)
    layouts = (
        Layout("Router GEMM, FP32 out", case=("M",), split=("shape", "K", "N"), show=("max_abs_err", "top8_agree"),
               error="max_abs_err", precision="provider"),
    )

    def __init__(self):
        self._gen = None

    def cases(self, quick: bool) -> list[BenchCase]:
        from . import bench

        out = []
        for name, (K, N, ms) in bench.SHAPES.items():
            for M in (QUICK.get(name, ()) if quick else ms):
                out.append(BenchCase(f"router {name} K={K} N={N} M={M}", self._runner(name, K, N, M, quick),
                                     est_s=1.5))
        return out

    def _runner(self, name, K, N, M, quick):
        def run() -> list[dict]:
            from hpc_common.bench.results import Rows
            from hpc_common.bench.timing import METHODS

            from . import bench

            if self._gen is None:
                self._gen = torch.Generator(device="cuda").manual_seed(0)
            rows = Rows()
            bench.bench_shape(rows, name, K, N, [M], METHODS, 50 if quick else 100, self._gen)
            return rows.rows

        return run

    def cpu_check(self) -> list[dict]:
        from .reference import router_gemm_reference, split_product_reference, split_weight, topk_experts

        g = torch.Generator().manual_seed(0)
        rows = []
        for M, K, N in ((1, 512, 64), (37, 1024, 192)):
            x = torch.randn(M, K, generator=g).to(torch.bfloat16)
            w = torch.randn(N, K, generator=g) * 0.02
            exact = router_gemm_reference(x, w)
            hi, lo = split_weight(w)
            shape = f"M={M} K={K} N={N}"
            # What the tensor cores compute: two float32-accumulated BF16 products, lo scaled by 1/256.
            fp32 = x.float() @ hi.float().T + (x.float() @ lo.float().T) / 256
            rows.append(check_row("float32 split product vs float64 x @ W^T", (fp32.double() - exact).abs().max().item(),
                                  1e-4, shape=shape))
            rows.append(check_row("float64 split product vs float64 x @ W^T",
                                  (split_product_reference(x, hi, lo) - exact).abs().max().item(), 1e-4, shape=shape))
            changed = (topk_experts(fp32.double()) != topk_experts(exact)).any(dim=1).double().mean().item()
            rows.append(check_row("share of tokens whose top-8 changes (float32 split)", changed, 0.0, shape=shape))
        return rows


SUITE = RouterGemmSuite()
