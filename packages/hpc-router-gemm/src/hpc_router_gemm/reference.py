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
