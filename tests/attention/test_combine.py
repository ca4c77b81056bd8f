"""The split-softmax algebra of the combine kernel against a one-pass softmax (CPU)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hpc_attention.reference import combine_partials, merge_split_item, partial_attention


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), L=st.integers(1, 700), G=st.sampled_from([1, 2, 4, 8, 16]),
       parts=st.integers(1, 12), scale=st.sampled_from([0.0883, 1.0, 8.0]))
def test_combine_equals_one_pass_softmax(seed, L, G, parts, scale):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(G, 128, generator=gen, dtype=torch.float64)
    k = torch.randn(L, 128, generator=gen, dtype=torch.float64)
    v = torch.randn(L, 128, generator=gen, dtype=torch.float64)
    cuts = sorted(torch.randperm(L - 1, generator=gen)[: min(parts, L) - 1].add(1).tolist()) if L > 1 else []
    bounds = [0, *cuts, L]
    os, ls = zip(*(partial_attention(q, k[a:b], v[a:b], scale) for a, b in zip(bounds, bounds[1:])))
    got = combine_partials(torch.stack(os), torch.stack(ls))
    ref = torch.softmax(q @ k.T * scale, dim=-1) @ v
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


def test_lse_is_log2_sum_exp():
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(n, 128, generator=gen, dtype=torch.float64) for n in (3, 50, 50))
    _, lse = partial_attention(q, k, v, 0.1)
    expect = torch.logsumexp(q @ k.T * 0.1, dim=-1) / math.log(2)
    torch.testing.assert_close(lse, expect, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("shift", [0.0, 300.0, -300.0])
def test_combine_is_shift_invariant_and_stable(shift):
    """Large log-sum-exps (long contexts, big logits) do not overflow the merge."""
    gen = torch.Generator().manual_seed(1)
    o = torch.randn(5, 4, 128, generator=gen, dtype=torch.float64)
    lse = torch.randn(5, 4, generator=gen, dtype=torch.float64) * 10
    a = combine_partials(o, lse)
    b = combine_partials(o, lse + shift)
    assert torch.isfinite(b).all()
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_single_part_is_identity():
    o = torch.randn(1, 2, 128, dtype=torch.float64)
    torch.testing.assert_close(combine_partials(o, torch.tensor([[3.0, -7.0]], dtype=torch.float64)), o[0])


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), P=st.sampled_from([2, 7, 8, 9, 16, 17, 24, 64, 65, 67, 131]),
       G=st.sampled_from([1, 8]), spread=st.sampled_from([0.0, 5.0, 200.0]))
def test_kernel_merge_order_equals_exact_combine(seed, P, G, spread):
    """The kernels' merge (one level up to 24 parts, or 16 in the earlier form, 8 residue groups beyond, in
    batches of 9 or 8 parts, 12 for one level above 16) is the exact split-softmax combine, including
    log-sum-exps far apart (parts that underflow)."""
    gen = torch.Generator().manual_seed(seed)
    o = torch.randn(P, G, 128, generator=gen, dtype=torch.float64)
    lse = torch.randn(P, G, generator=gen, dtype=torch.float64) * spread
    for batch in (9, 8):
        for warp_parts in (24, 16):
            torch.testing.assert_close(merge_split_item(o, lse, warp_parts=warp_parts, batch=batch, group_batch=batch),
                                       combine_partials(o, lse), rtol=1e-12, atol=1e-12)
