"""A torch MoE as a benchmark baseline (hpc_moe.bench and hpc_integration's runner): the routing sorted in
torch (stable sort by local expert, offsets by scatter-add, no host sync) around grouped GEMMs
(torch._grouped_mm), and the top-k weighted sum back to token order."""

from __future__ import annotations

import torch


def sort_pairs(ids: torch.Tensor, num_local: int, expert_start: int = 0):
    """The (token, k) pairs of ids [T, k] in local-expert order: (order, offs, tok, local) with `order` the
    pairs' permutation, `offs` [num_local] int32 the grouped GEMM's end offsets, `tok` each sorted pair's
    token and `local` [T*k] whether a pair's expert is local (-1 and other ranks' ids sort to the end)."""
    k = ids.shape[1]
    flat = ids.reshape(-1).long() - expert_start
    local = (flat >= 0) & (flat < num_local)
    key = torch.where(local, flat, num_local)
    order = torch.sort(key, stable=True).indices
    counts = torch.zeros(num_local + 1, dtype=torch.int64, device=ids.device).scatter_add_(0, key, torch.ones_like(key))
    offs = torch.cumsum(counts[:num_local], 0).to(torch.int32)
    return order, offs, order // k, local


def combine_pairs(y: torch.Tensor, order, tok, local, weights: torch.Tensor, num_tokens: int) -> torch.Tensor:
    """sum_j weights[t, j] * y[pair (t, j)] per token, BF16 [T, H], from y [T*k, H] in sorted order. Rows past
    offs[-1] (pairs routed elsewhere) are not written by the grouped GEMM: masked, not weighted."""
    w = torch.where(local[order], weights.reshape(-1)[order], 0.0)
    y = torch.where(local[order][:, None], y.float() * w[:, None], 0.0)
    return torch.zeros(num_tokens, y.shape[1], device=y.device).index_add_(0, tok, y).to(torch.bfloat16)


def grouped_mm_moe(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
                   expert_start: int = 0) -> torch.Tensor:
    """BF16 MoE of x [T, H] over the local experts w13 [E, 2I, H] (gate then up), w2 [E, H, I]."""
    E, inter = w13.shape[0], w2.shape[2]
    order, offs, tok, local = sort_pairs(ids, E, expert_start)
    h = torch._grouped_mm(x[tok], w13.transpose(-2, -1), offs=offs)
    act = (torch.nn.functional.silu(h[:, :inter].float()) * h[:, inter:].float()).to(torch.bfloat16)
    y = torch._grouped_mm(act, w2.transpose(-2, -1), offs=offs)
    return combine_pairs(y, order, tok, local, weights, x.shape[0])
