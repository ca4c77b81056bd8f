"""Property: for drawn shapes, formats and TP x EP splits, the shards' MoE summed over all ranks is
the full layer's MoE (float64 references), or the helper refuses with the error it documents."""

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from _sharding_cases import assert_close_to, full_layer, layer_reference, routing, sum_over_ranks

@settings(max_examples=40, deadline=None)
@given(quant=st.sampled_from(["bf16", "fp8_tensor", "fp8_block"]),
       tp_size=st.sampled_from([1, 2, 3]), ep_size=st.sampled_from([1, 2]),
       tiles=st.integers(1, 3), e_local=st.integers(1, 3), kb=st.integers(1, 2),
       T=st.integers(1, 6), k=st.integers(1, 3), unaligned=st.sampled_from(["error", "pad"]),
       seed=st.integers(0, 2**16))
# the 128 grid: 64-row slices (tiles=1) off it at tp 2 / 3, and Hy3 TP8's 192-row ranks (tiles=3)
@example(quant="fp8_block", tp_size=2, ep_size=1, tiles=3, e_local=2, kb=1, T=4, k=2, unaligned="pad", seed=1)
@example(quant="fp8_block", tp_size=3, ep_size=2, tiles=1, e_local=1, kb=2, T=3, k=2, unaligned="pad", seed=2)
@example(quant="fp8_block", tp_size=2, ep_size=1, tiles=3, e_local=2, kb=1, T=4, k=2, unaligned="error", seed=3)
def test_sum_over_ranks_is_the_full_moe(quant, tp_size, ep_size, tiles, e_local, kb, T, k, unaligned, seed):
    E, H, size = e_local * ep_size, 128 * kb, 64 * tiles
    inter = size * tp_size
    layer = full_layer(quant, E, H, inter, seed, gate_up_scales=seed % 2 == 1)
    x, ids, wts = routing(T, E, min(k, E), H, seed)
    want = layer_reference(layer, x, ids, wts)
    off_grid = quant == "fp8_block" and tp_size > 1 and size % 128 != 0
    if off_grid and unaligned == "error":
        with pytest.raises(ValueError, match=r"unaligned='pad'"):
            sum_over_ranks(layer, x, ids, wts, tp_size, ep_size, unaligned)
        return
    try:
        got = sum_over_ranks(layer, x, ids, wts, tp_size, ep_size, unaligned)
    except ValueError as e:
        # padding cannot realign up rows that start mid-block in the checkpoint itself
        assert off_grid and inter % 128 and "I % 128 != 0" in str(e), str(e)
        return
    assert_close_to(got, want)
