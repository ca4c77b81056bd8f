"""Pure-torch references of the router GEMM (run on the CPU or the GPU, in float64)."""

from __future__ import annotations

import torch

# W ~= W_hi + W_lo / LO_SCALE; a power of two, so the scaling is exact in any float format.
LO_SCALE = 256.0


def split_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """W_hi = bf16(W), W_lo = bf16((W - W_hi) * 256), both rounded to nearest even.

    W - W_hi is exact in FP32 (it keeps the mantissa bits below BF16's 8) and so is the
    product by 256, so the only roundings are the two conversions (unit roundoff 2^-8 each):
    |W - W_hi - W_lo/256| <= 2^-8 |W - W_hi| <= 2^-16 |W| for normal values.
    """
    w = weight.to(torch.float32)
    w_hi = w.to(torch.bfloat16)
    w_lo = ((w - w_hi.to(torch.float32)) * LO_SCALE).to(torch.bfloat16)
    return w_hi, w_lo


def router_gemm_reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """scores = x @ W^T in float64 (the exact answer for BF16 x and FP32 W, up to float64)."""
    return x.to(torch.float64) @ weight.to(torch.float64).T


def split_product_reference(x: torch.Tensor, w_hi: torch.Tensor, w_lo: torch.Tensor) -> torch.Tensor:
    """x @ (W_hi + W_lo / 256)^T in float64: what the tensor-core path computes, without its
    FP32 accumulation error."""
    w = w_hi.to(torch.float64) + w_lo.to(torch.float64) / LO_SCALE
    return x.to(torch.float64) @ w.T


def topk_experts(scores: torch.Tensor, k: int = 8) -> torch.Tensor:
    """The set of the k highest-scoring experts of each token, as sorted indices [M, k]."""
    return torch.topk(scores, k, dim=-1).indices.sort(dim=-1).values


def topk_gap(scores: torch.Tensor, k: int = 8) -> torch.Tensor:
    """Per token, the k-th minus the (k+1)-th highest score: a top-k set can only change
    under an error of at least half of this gap."""
    top = torch.topk(scores, k + 1, dim=-1).values
    return top[:, k - 1] - top[:, k]


def cpu_demo() -> str:
    """Small-shape run for the main job's report on machines without an SM90 GPU: the error of
    the two-product split and of plain BF16 weights against FP64, and top-8 agreement."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 4096, generator=g).to(torch.bfloat16)
    w = torch.randn(192, 4096, generator=g) * 0.02
    exact = router_gemm_reference(x, w)
    split = split_product_reference(x, *split_weight(w))
    bf16 = x.to(torch.float64) @ w.to(torch.bfloat16).to(torch.float64).T
    top = topk_experts(exact)
    lines = []
    for name, s in (("two-product split (ours)", split), ("BF16 weights", bf16)):
        agree = (topk_experts(s) == top).all(dim=-1).float().mean().item()
        lines.append(f"{name:26s} max |err| {(s - exact).abs().max().item():.2e}, "
                     f"top-8 equal for {100 * agree:.1f}% of 256 tokens (K=4096, N=192)")
    return "\n".join(lines)
