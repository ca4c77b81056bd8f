"""First-contact check of the router GEMM kernels on a GPU, run before the test suite.

For every path and split count it prints the max error against FP64 on random inputs and a
layout probe: with x[m, k] = (k == m) the output is out[m, n] = W[n, m], and W[n, k] encodes
(n, k), so a wrong swizzle, descriptor or fragment mapping shows as the (n, k) that landed
where. Each case synchronises, so a fault names the case that caused it.

    python tools/probes/router_gemm/smoke.py
"""

from __future__ import annotations

import sys
import traceback

import torch

from hpc_router_gemm import RouterWeight
from hpc_router_gemm.heuristics import Plan
from hpc_router_gemm.reference import router_gemm_reference
from hpc_router_gemm.router_gemm import launch


def probe(plan: Plan, M: int, N: int, K: int) -> str:
    dev = "cuda"
    x = torch.zeros(M, K, device=dev)
    idx = torch.arange(min(M, K), device=dev)
    x[idx, idx] = 1.0
    x = x.to(torch.bfloat16)
    n = torch.arange(N, device=dev, dtype=torch.float64)[:, None]
    k = torch.arange(K, device=dev, dtype=torch.float64)[None, :]
    code = n * K + k
    w = (code / (N * K)).float()  # the split keeps ~16 bits: enough to decode (n, k)
    rw = RouterWeight(w)
    out = torch.full((M, N), float("nan"), device=dev)
    launch(x, rw, out, plan)
    torch.cuda.synchronize()
    got = (out.double() * N * K).round()
    want = code[:, :M].T.expand(M, N) if M <= K else None
    bad = (got != want).nonzero()[:6].tolist()
    if not bad:
        return "layout ok"
    parts = []
    for m_, n_ in bad:
        g = got[m_, n_].item()
        parts.append(f"out[{m_},{n_}] holds W[{int(g) // K},{int(g) % K}]" if g == g else f"out[{m_},{n_}]=nan")
    return f"{int((got != want).sum())} wrong; " + "; ".join(parts)


def main() -> int:
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(0)
    K, N = 4096, 192
    w = torch.randn(N, K, device="cuda", generator=gen) * 0.02
    rw = RouterWeight(w)
    failures = 0
    plans = [Plan("fp32", s) for s in (1, 8)] + [Plan(p, s) for p in ("narrow", "wide", "wide96") for s in (1, 2, 8)]
    for plan in plans:
        for M in (1, 100):
            try:
                x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
                out = torch.full((M, N), float("nan"), device="cuda")
                launch(x, rw, out, plan)
                torch.cuda.synchronize()
                err = (out.double() - router_gemm_reference(x, w)).abs().max().item()
                lay = probe(plan, 64 if M == 1 else 128, 192, 128)
                ok = err <= 1e-4 and lay == "layout ok"
                failures += not ok
                print(f"{plan.path:6s} S={plan.splits} M={M:4d}: max|err| {err:.3e}  {lay}", flush=True)
            except Exception:
                failures += 1
                print(f"{plan.path:6s} S={plan.splits} M={M:4d}: EXCEPTION", flush=True)
                traceback.print_exc()
                return 1
    print(f"smoke: {failures} failing cases", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
