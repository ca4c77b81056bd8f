"""Pure-torch reference of the fused MoE (runs on CPU, float64 by default).

out[t] = sum_j weights[t, j] * W2[e] @ (silu(W13[e, :I] @ x[t]) * (W13[e, I:] @ x[t])),
e = topk_ids[t, j], over the experts this EP rank owns (global id in
[expert_offset, expert_offset + E_local)); experts of other ranks contribute nothing.
"""

from __future__ import annotations

import torch


def fused_moe_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                        topk_weights: torch.Tensor, *, expert_offset: int = 0,
                        shared_output: torch.Tensor | None = None,
                        dtype: torch.dtype = torch.float64) -> torch.Tensor:
    T, H = x.shape
    E_local, two_i, H2 = w13.shape
    if H2 != H or two_i % 2 or w2.shape != (E_local, H, two_i // 2):
        raise ValueError(f"fused_moe_reference: inconsistent shapes x{tuple(x.shape)} w13{tuple(w13.shape)} "
                         f"w2{tuple(w2.shape)}")
    inter = two_i // 2
    xf = x.to(dtype)
    out = torch.zeros(T, H, dtype=dtype, device=x.device)
    local = topk_ids.long() - expert_offset
    for e in range(E_local):
        tok, slot = (local == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = xf[tok] @ w13[e].to(dtype).T
        act = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = act @ w2[e].to(dtype).T
        out.index_add_(0, tok, y * topk_weights[tok, slot].to(dtype)[:, None])
    if shared_output is not None:
        out += shared_output.to(dtype)
    return out


def cpu_demo() -> str:
    """Small-shape run for the main job's report on machines without a Hopper GPU."""
    g = torch.Generator().manual_seed(0)
    T, H, inter, E, k = 4, 256, 64, 8, 2
    x = torch.randn(T, H, generator=g, dtype=torch.bfloat16)
    w13 = torch.randn(E, 2 * inter, H, generator=g) * 0.05
    w2 = torch.randn(E, H, inter, generator=g) * 0.05
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    wts = torch.softmax(torch.randn(T, k, generator=g), -1)
    out = fused_moe_reference(x, w13, w2, ids, wts)
    return (f"fused MoE reference T={T} H={H} I={inter} E={E} top-{k}: out[0,:4] = "
            f"{[round(v, 5) for v in out[0, :4].tolist()]}, |out| = {out.norm().item():.4f}")
