"""hpc_moe.shard_moe_weights on the CPU: the sum over ranks of the shards' MoE equals the full MoE
(float64 references; FP8 formats against the full layer's dequantised weights), the shards hold
the right bytes, the 128-grid cases (error / pad / requantize), and the argument errors."""

import pytest
import torch

from _sharding_cases import assert_close_to, full_layer, layer_reference, routing, sum_over_ranks
from hpc_moe import MoEShard, MoEWeights, shard_moe_weights
from hpc_moe.reference import dequantize_w2, dequantize_w13, reference_from_prepared

QUANTS = ["bf16", "fp8_tensor", "fp8_block"]


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.dtype == torch.bfloat16 else torch.uint8)


@pytest.mark.parametrize("quant", QUANTS)
@pytest.mark.parametrize("tp_size,ep_size", [(2, 1), (1, 2), (4, 1), (1, 4), (2, 2)])
def test_sum_over_ranks_is_the_full_moe(quant, tp_size, ep_size):
    E, H, inter = 8, 256, 512  # I / 4 = 128: on the block grid at every TP size here
    layer = full_layer(quant, E, H, inter, seed=tp_size * 10 + ep_size, gate_up_scales=True)
    x, ids, wts = routing(T=7, E=E, k=3, H=H, seed=3)
    assert_close_to(sum_over_ranks(layer, x, ids, wts, tp_size, ep_size), layer_reference(layer, x, ids, wts))


def test_fp8_tensor_static_activation_scale_is_replicated():
    layer = full_layer("fp8_tensor", 4, 128, 256, seed=5, static_a1=True)
    x, ids, wts = routing(T=5, E=4, k=2, H=128, seed=5)
    shard = shard_moe_weights(**layer, tp_rank=1, tp_size=2)
    assert shard.a1_scale == layer["a1_scale"]
    assert_close_to(sum_over_ranks(layer, x, ids, wts, 2, 1), layer_reference(layer, x, ids, wts))


@pytest.mark.parametrize("quant", QUANTS)
def test_tp_shard_holds_the_slice_bytes(quant):
    E, H, inter, tp = 4, 256, 512, 2
    layer = full_layer(quant, E, H, inter, seed=7)
    w13, w2 = layer["w13"], layer["w2"]
    for r in range(tp):
        s = shard_moe_weights(**layer, tp_rank=r, tp_size=tp)
        lo, hi = r * inter // tp, (r + 1) * inter // tp
        assert (s.intermediate_start, s.intermediate_size, s.pad_front, s.pad_back) == (lo, hi - lo, 0, 0)
        assert torch.equal(_bytes(s.w13), _bytes(torch.cat([w13[:, lo:hi], w13[:, inter + lo:inter + hi]], dim=1)))
        assert torch.equal(_bytes(s.w2), _bytes(w2[:, :, lo:hi].contiguous()))
        assert s.w2.is_contiguous() and s.w13.is_contiguous()
        if quant == "fp8_tensor":
            assert torch.equal(s.w13_scale, layer["w13_scale"]) and torch.equal(s.w2_scale, layer["w2_scale"])
        if quant == "fp8_block":
            b0, b1 = lo // 128, hi // 128
            want13 = torch.cat([layer["w13_scale"][:, b0:b1], layer["w13_scale"][:, (inter + lo) // 128:
                                                                                  (inter + hi) // 128]], dim=1)
            assert torch.equal(s.w13_scale, want13)
            assert torch.equal(s.w2_scale, layer["w2_scale"][:, :, b0:b1])


@pytest.mark.parametrize("quant", QUANTS)
def test_ep_shard_is_a_view_of_its_experts(quant):
    E, H, inter, ep = 6, 128, 192, 3
    layer = full_layer(quant, E, H, inter, seed=11)
    for r in range(ep):
        s = shard_moe_weights(**layer, ep_rank=r, ep_size=ep)
        experts = slice(2 * r, 2 * r + 2)
        for got, full in ((s.w13, layer["w13"]), (s.w2, layer["w2"]), (s.w13_scale, layer.get("w13_scale")),
                          (s.w2_scale, layer.get("w2_scale"))):
            if full is None:
                assert got is None
                continue
            assert got.untyped_storage().data_ptr() == full.untyped_storage().data_ptr()  # a view, no copy
            assert torch.equal(_bytes(got) if got.dtype != torch.float32 else got,
                               _bytes(full[experts]) if full.dtype != torch.float32 else full[experts])
        assert (s.ep_rank, s.ep_size, s.num_experts) == (r, ep, E)
        kw = s.prepare_kwargs()
        assert (kw["ep_rank"], kw["ep_size"], kw["num_experts"]) == (r, ep, E)


@pytest.mark.parametrize("quant", QUANTS)
def test_prepare_of_a_shard_computes_the_shard(quant):
    E, H, inter = 4, 256, 256
    layer = full_layer(quant, E, H, inter, seed=13)
    x, ids, wts = routing(T=6, E=E, k=2, H=H, seed=13)
    total = 0
    for t in range(2):
        for e in range(2):
            shard = shard_moe_weights(**layer, tp_rank=t, tp_size=2, ep_rank=e, ep_size=2)
            weights = shard.prepare()
            assert isinstance(shard, MoEShard) and isinstance(weights, MoEWeights)
            assert weights.expert_start == 2 * e and weights.intermediate_size == 128
            total = total + reference_from_prepared(weights, x, ids, wts)
    assert_close_to(total, layer_reference(layer, x, ids, wts))


# --- fp8_block slices off the 128 grid (Hy3-FP8 at TP8: I = 1536 / 8 = 192 per rank) ---

def test_off_grid_block_slice_is_refused_by_default():
    layer = full_layer("fp8_block", 2, 128, 384, seed=17)
    with pytest.raises(ValueError, match=r"tp_size = 2.*rows \[192, 384\).*unaligned='pad'"):
        shard_moe_weights(**layer, tp_rank=1, tp_size=2)
    with pytest.raises(ValueError, match=r"tp_size = 2.*rows \[0, 192\)"):
        shard_moe_weights(**layer, tp_rank=0, tp_size=2)  # gate tail and up head would share a block


def test_hy3_tp8_ranks_padded_onto_the_grid():
    # Hy3 TP8's geometry (I = 1536, 192 rows per rank) with a small H and two experts.
    E, H, inter, tp = 2, 128, 1536, 8
    layer = full_layer("fp8_block", E, H, inter, seed=19)
    x, ids, wts = routing(T=4, E=E, k=2, H=H, seed=19)
    total = 0
    for r in range(tp):
        s = shard_moe_weights(**layer, tp_rank=r, tp_size=tp, unaligned="pad")
        lo = 192 * r
        assert s.intermediate_size == 256 and s.pad_front == lo % 128 and s.pad_front + s.pad_back == 64
        real = slice(s.pad_front, s.pad_front + 192)
        assert torch.equal(_bytes(s.w13[:, real]), _bytes(layer["w13"][:, lo:lo + 192]))
        assert torch.equal(_bytes(s.w13[:, 256:][:, real]), _bytes(layer["w13"][:, inter + lo:inter + lo + 192]))
        assert torch.equal(_bytes(s.w2[:, :, real]), _bytes(layer["w2"][:, :, lo:lo + 192]))
        pad = torch.ones(256, dtype=torch.bool)
        pad[real] = False
        assert not _bytes(s.w13[:, :256][:, pad]).any() and not _bytes(s.w13[:, 256:][:, pad]).any()
        assert not _bytes(s.w2[:, :, pad]).any()
        # each shard block keeps the scale of the source block its rows lie in
        first = (lo - s.pad_front) // 128
        assert torch.equal(s.w13_scale[:, :2], layer["w13_scale"][:, first:first + 2])
        assert torch.equal(s.w13_scale[:, 2:], layer["w13_scale"][:, inter // 128 + first:inter // 128 + first + 2])
        assert torch.equal(s.w2_scale, layer["w2_scale"][:, :, first:first + 2])
        assert s.requantized_blocks == 0
        total = total + reference_from_prepared(s.prepare(), x, ids, wts)
    assert_close_to(total, layer_reference(layer, x, ids, wts))


def test_pad_cannot_realign_a_checkpoint_whose_up_rows_start_mid_block():
    # I = 576, I % 128 = 64: up row 0 is fused row 576, mid-block; rank 0's up rows 0..191 span fused
    # blocks 4 and 5 at local up rows 0..63 and 64..191, which no padding of the slice separates
    layer = full_layer("fp8_block", 2, 128, 576, seed=23)
    with pytest.raises(ValueError, match=r"tp_size = 3.*I % 128 != 0"):
        shard_moe_weights(**layer, tp_rank=0, tp_size=3, unaligned="pad")


def test_requantize_keeps_the_rank_size_and_bounds_the_error():
    E, H, inter, tp = 3, 256, 384, 2
    layer = full_layer("fp8_block", E, H, inter, seed=29)
    x, ids, wts = routing(T=6, E=E, k=2, H=H, seed=29)
    w13_full = dequantize_w13(layer["w13"], layer["w13_scale"], "fp8_block")
    w2_full = dequantize_w2(layer["w2"], layer["w2_scale"], "fp8_block")
    for r in range(tp):
        s = shard_moe_weights(**layer, tp_rank=r, tp_size=tp, unaligned="requantize")
        lo, hi = 192 * r, 192 * (r + 1)
        assert s.intermediate_size == 192 and s.w13.shape == (E, 384, H) and s.w13_scale.shape == (E, 3, 2)
        assert s.requantized_blocks > 0
        got13 = dequantize_w13(s.w13, s.w13_scale, "fp8_block")
        got2 = dequantize_w2(s.w2, s.w2_scale, "fp8_block")
        want13 = torch.cat([w13_full[:, lo:hi], w13_full[:, inter + lo:inter + hi]], dim=1)
        want2 = w2_full[:, :, lo:hi]
        # w2 as [E, I, H] so that both have the sharded dimension first and block scales [E, I/128, H/128]
        for got, want, scale in ((got13, want13, s.w13_scale),
                                 (got2.transpose(1, 2), want2.transpose(1, 2), s.w2_scale.transpose(1, 2))):
            step = scale.double().repeat_interleave(128, 1)[:, :got.shape[1]].repeat_interleave(128, 2)
            # half an e4m3 step: 2^-4 relative for normals, 2^-10 of the scale below 2^-6 (subnormals)
            bound = torch.maximum(want.abs() * 2.0 ** -4, step * 2.0 ** -10) * (1 + 1e-6)
            assert bool(((got - want).abs() <= bound).all())
        # blocks whose rows come from one source block kept their bytes: w13's first gate block (rank 0)
        # or last up block (rank 1); the others were re-quantised
        if r == 0:
            assert torch.equal(_bytes(s.w13[:, :128]), _bytes(layer["w13"][:, :128]))
        else:
            assert torch.equal(_bytes(s.w13[:, 256:]), _bytes(layer["w13"][:, 640:768]))
    approx = sum_over_ranks(layer, x, ids, wts, tp, 1, unaligned="requantize")
    exact = layer_reference(layer, x, ids, wts)
    assert (approx - exact).norm() <= 2.0 ** -4 * exact.norm()


def test_requantize_is_exact_where_the_source_scales_agree():
    layer = full_layer("fp8_block", 2, 128, 384, seed=31)
    layer["w13_scale"] = torch.full_like(layer["w13_scale"], 2.0 ** -9)
    layer["w2_scale"] = torch.full_like(layer["w2_scale"], 2.0 ** -9)
    x, ids, wts = routing(T=5, E=2, k=2, H=128, seed=31)
    for r in range(2):
        assert shard_moe_weights(**layer, tp_rank=r, tp_size=2, unaligned="requantize").requantized_blocks == 0
    assert_close_to(sum_over_ranks(layer, x, ids, wts, 2, 1, unaligned="requantize"),
                    layer_reference(layer, x, ids, wts))


def test_pad_makes_whole_tiles_for_any_format():
    layer = full_layer("bf16", 2, 128, 192, seed=37)  # I / 2 = 96: not whole 64-row tiles
    x, ids, wts = routing(T=4, E=2, k=2, H=128, seed=37)
    with pytest.raises(ValueError, match=r"I / tp_size = 192 / 2 = 96 is not a multiple of 64"):
        shard_moe_weights(**layer, tp_rank=0, tp_size=2)
    s = shard_moe_weights(**layer, tp_rank=1, tp_size=2, unaligned="pad")
    assert (s.intermediate_size, s.pad_front, s.pad_back) == (128, 0, 32)
    assert_close_to(sum_over_ranks(layer, x, ids, wts, 2, 1, unaligned="pad"), layer_reference(layer, x, ids, wts))


def test_sharding_on_the_grid_ignores_the_unaligned_mode():
    layer = full_layer("fp8_block", 2, 128, 512, seed=41)
    shards = [shard_moe_weights(**layer, tp_rank=1, tp_size=2, unaligned=m) for m in ("error", "pad", "requantize")]
    for s in shards[1:]:
        assert torch.equal(_bytes(s.w13), _bytes(shards[0].w13)) and torch.equal(s.w2_scale, shards[0].w2_scale)
        assert s.intermediate_size == 256 and s.requantized_blocks == 0


# --- argument errors ---

@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(tp_rank=2, tp_size=2), ValueError, r"tp_rank must satisfy 0 <= tp_rank < tp_size = 2, got 2"),
    (dict(tp_rank=-1, tp_size=2), ValueError, r"tp_rank must satisfy"),
    (dict(tp_size=0), ValueError, r"tp_size must be >= 1, got 0"),
    (dict(ep_rank=3, ep_size=2), ValueError, r"ep_rank must satisfy 0 <= ep_rank < ep_size = 2, got 3"),
    (dict(ep_size=3), ValueError, r"ep_size \(3\) must divide the number of experts w13.shape\[0\] = 4"),
    (dict(tp_size=3), ValueError, r"tp_size \(3\) must divide the intermediate size I = w2.shape\[2\] = 256"),
    (dict(tp_size=8), ValueError, r"I / tp_size = 256 / 8 = 32 is not a multiple of 64"),
    (dict(tp_size=2.0), TypeError, r"tp_size must be an int, got float"),
    (dict(ep_rank=True), TypeError, r"ep_rank must be an int, got bool"),
    (dict(unaligned="round"), ValueError, r"unaligned must be one of 'error', 'pad', 'requantize', got 'round'"),
])
def test_bad_ranks_and_sizes_are_named(kwargs, exc, match):
    layer = full_layer("bf16", 4, 128, 256, seed=43)
    with pytest.raises(exc, match=match):
        shard_moe_weights(**layer, **kwargs)


def test_bad_tensors_are_named():
    layer = full_layer("fp8_block", 2, 128, 256, seed=47)
    with pytest.raises(ValueError, match=r"shard_moe_weights: w13_scale must have shape \[2, 4, 1\]"):
        shard_moe_weights(**{**layer, "w13_scale": layer["w13_scale"][:, :2]}, tp_size=2)
    with pytest.raises(TypeError, match=r"shard_moe_weights: w13 must be float8_e4m3fn"):
        shard_moe_weights(**{**layer, "w13": layer["w13"].float()}, tp_size=2)
    with pytest.raises(ValueError, match=r"shard_moe_weights: quant must be one of"):
        shard_moe_weights(**{**layer, "quant": "int4"})
