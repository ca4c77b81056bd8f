"""Shared builders of the sharding tests: a full MoE layer of one format with random values, and
the MoE of one rank's shard (hpc_moe.reference, float64)."""

from __future__ import annotations

import torch
from hpc_common.fp8 import reference as fp8_ref

from hpc_moe.reference import expand_block_scale, fused_moe_reference_quant
from hpc_moe.sharding import shard_moe_weights


def full_layer(quant: str, E: int, H: int, inter: int, seed: int, *, gate_up_scales: bool = False,
               static_a1: bool = False) -> dict:
    """The whole layer in the layout MoEWeights.prepare takes (keyword arguments of shard_moe_weights).
    Block scales span 2^-12..2^-7, so blocks of different source scales really differ."""
    g = torch.Generator().manual_seed(seed)
    w13 = torch.randn(E, 2 * inter, H, generator=g) * 0.05
    w2 = torch.randn(E, H, inter, generator=g) * 0.05
    if quant == "bf16":
        return dict(w13=w13.to(torch.bfloat16), w2=w2.to(torch.bfloat16), quant=quant)
    if quant == "fp8_tensor":
        cols = 2 if gate_up_scales else 1
        s13 = (w13.abs().reshape(E, cols, -1).amax(dim=2) / 448) * (1 + torch.rand(E, cols, generator=g))
        s13 = s13.reshape(E, cols) if gate_up_scales else s13.reshape(E)
        s2 = w2.abs().amax(dim=(1, 2)) / 448 * (1 + torch.rand(E, generator=g))
        rows = s13.reshape(E, -1).repeat_interleave(2 * inter // s13.reshape(E, -1).shape[1], dim=1)
        q13 = fp8_ref.quantize_with_scale(w13, rows[:, :, None])
        q2 = fp8_ref.quantize_with_scale(w2, s2[:, None, None])
        a1 = 0.02 if static_a1 else None
        return dict(w13=q13, w2=q2, quant=quant, w13_scale=s13.float(), w2_scale=s2.float(), a1_scale=a1)
    nb13, nb2, kb = -(-2 * inter // 128), -(-inter // 128), H // 128
    s13 = torch.exp2(torch.randint(-12, -7, (E, nb13, kb), generator=g).float()) * \
        (1 + torch.rand(E, nb13, kb, generator=g))
    s2 = torch.exp2(torch.randint(-12, -7, (E, kb, nb2), generator=g).float()) * \
        (1 + torch.rand(E, kb, nb2, generator=g))
    q13 = fp8_ref.quantize_with_scale(w13, expand_block_scale(s13, 2 * inter, H))
    q2 = fp8_ref.quantize_with_scale(w2, expand_block_scale(s2, H, inter))
    return dict(w13=q13, w2=q2, quant=quant, w13_scale=s13, w2_scale=s2)


def routing(T: int, E: int, k: int, H: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(hidden BF16 [T, H], topk_ids [T, k] global ids with some -1, topk_weights [T, k])."""
    g = torch.Generator().manual_seed(seed + 1)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    ids[torch.rand(T, k, generator=g) < 0.1] = -1
    wts = torch.softmax(torch.randn(T, k, generator=g), dim=-1)
    return x, ids, wts


def layer_reference(layer: dict, x, ids, wts, expert_offset: int = 0) -> torch.Tensor:
    """The float64 MoE of a layer (or shard) given as shard_moe_weights / prepare keyword arguments."""
    return fused_moe_reference_quant(x, layer["w13"], layer["w2"], ids, wts, quant=layer["quant"],
                                     w13_scale=layer.get("w13_scale"), w2_scale=layer.get("w2_scale"),
                                     a1_scale=layer.get("a1_scale"), expert_offset=expert_offset)


def shard_reference(layer: dict, x, ids, wts, *, tp_rank: int, tp_size: int, ep_rank: int, ep_size: int,
                    unaligned: str = "error") -> torch.Tensor:
    """One rank's partial MoE output: its shard through the reference, at its experts' global ids."""
    shard = shard_moe_weights(**layer, tp_rank=tp_rank, tp_size=tp_size, ep_rank=ep_rank, ep_size=ep_size,
                              unaligned=unaligned)
    e_local = layer["w13"].shape[0] // ep_size
    return layer_reference(shard.prepare_kwargs(), x, ids, wts, expert_offset=ep_rank * e_local)


def sum_over_ranks(layer: dict, x, ids, wts, tp_size: int, ep_size: int, unaligned: str = "error") -> torch.Tensor:
    return sum(shard_reference(layer, x, ids, wts, tp_rank=t, tp_size=tp_size, ep_rank=e, ep_size=ep_size,
                               unaligned=unaligned)
               for t in range(tp_size) for e in range(ep_size))


def assert_close_to(got: torch.Tensor, want: torch.Tensor, rel: float = 1e-12) -> None:
    """float64 sums in another order: equal up to a few ulps of the output's scale."""
    scale = want.abs().max().item() or 1.0
    err = (got - want).abs().max().item()
    assert err <= rel * scale, f"max abs error {err:.3e} > {rel:.0e} x max |want| = {rel * scale:.3e}"
