"""One rank's slices of the full weights, the way SGLang and vLLM shard a Qwen3-MoE layer.

- Attention, TP: rank r holds query heads [r Hq/tp, (r+1) Hq/tp) (rows of wq, columns of wo) and KV
  heads [r Hkv/tp, ...), or, with fewer KV heads than ranks, KV head r // (tp / Hkv) replicated.
- MoE: the full layer is put in its weight format first (BF16, or FP8 with 128 x 128 block scales
  over the whole tensors, as a checkpoint holds it), then cut by hpc_moe.sharding.shard_moe_weights:
  TP (ep_size 1) keeps every expert's intermediate slice [r I/tp, (r+1) I/tp), EP keeps the expert
  range [r E/ep, (r+1) E/ep) with global ids. Slices off the 128-row block grid are zero-padded onto
  it (exact), or, where the checkpoint's own up rows start inside a block (I % 128 != 0, e.g. Hy3 at
  I = 192), re-quantised on the rank's grid (hpc_moe.sharding's "requantize").
- Norms, router, embedding and lm_head: replicated.
"""

from __future__ import annotations

from dataclasses import replace

from .config import ModelConfig, ParallelConfig, local_shapes
from .weights import LayerWeights, moe_checkpoint


def shard_layer(lw: LayerWeights, cfg: ModelConfig, par: ParallelConfig) -> LayerWeights:
    """This rank's attention slices of a layer (the other fields as they are)."""
    if par.tp_size == 1:
        return lw
    loc = local_shapes(cfg, par)
    D = cfg.head_dim
    q_lo = par.tp_rank * loc.num_qo_heads * D
    if cfg.num_kv_heads >= par.tp_size:
        kv_head = par.tp_rank * loc.num_kv_heads
    else:
        kv_head = par.tp_rank // (par.tp_size // cfg.num_kv_heads)
    kv_lo, kv_n = kv_head * D, loc.num_kv_heads * D
    return replace(lw, wq=lw.wq[q_lo:q_lo + loc.num_qo_heads * D].contiguous(),
                   wk=lw.wk[kv_lo:kv_lo + kv_n].contiguous(), wv=lw.wv[kv_lo:kv_lo + kv_n].contiguous(),
                   wo=lw.wo[:, q_lo:q_lo + loc.num_qo_heads * D].contiguous())


def rank_moe_checkpoint(lw: LayerWeights, quant: str, par: ParallelConfig) -> dict:
    """This rank's MoE tensors in the layout MoEWeights.prepare takes (w13, w2 and the block scales)."""
    full = moe_checkpoint(lw.w13, lw.w2, quant)
    if par.moe_tp_size == 1 and par.ep_size == 1:
        return full
    from hpc_moe.sharding import shard_moe_weights

    kw = dict(w13_scale=full.get("w13_scale"), w2_scale=full.get("w2_scale"), tp_rank=par.moe_tp_rank,
              tp_size=par.moe_tp_size, ep_rank=par.ep_rank, ep_size=par.ep_size)
    try:
        sh = shard_moe_weights(full["w13"], full["w2"], quant, unaligned="pad", **kw)
    except ValueError:  # fp8_block with I % 128 != 0: no zero padding realigns the up rows
        sh = shard_moe_weights(full["w13"], full["w2"], quant, unaligned="requantize", **kw)
    out = {"w13": sh.w13, "w2": sh.w2}
    if sh.w13_scale is not None:
        out.update(w13_scale=sh.w13_scale, w2_scale=sh.w2_scale)
    return out
