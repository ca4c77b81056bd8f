"""The MoE reference against a per-token loop written independently (CPU)."""

import torch

from hpc_moe.reference import fused_moe_reference


def _loop(x, w13, w2, ids, wts, offset):
    out = torch.zeros(x.shape, dtype=torch.float64)
    inter = w2.shape[2]
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j]) - offset
            if not 0 <= e < w13.shape[0]:
                continue
            h = w13[e].double() @ x[t].double()
            a = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out[t] += float(wts[t, j]) * (w2[e].double() @ a)
    return out


def test_reference_matches_loop_with_ep_offset():
    g = torch.Generator().manual_seed(3)
    T, H, inter, E_local, E, k = 5, 32, 16, 4, 12, 3
    x = torch.randn(T, H, generator=g)
    w13 = torch.randn(E_local, 2 * inter, H, generator=g) * 0.1
    w2 = torch.randn(E_local, H, inter, generator=g) * 0.1
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    wts = torch.rand(T, k, generator=g)
    got = fused_moe_reference(x, w13, w2, ids, wts, expert_offset=4)
    want = _loop(x, w13, w2, ids, wts, 4)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert got.abs().sum() > 0
