"""hpc-attention: paged-KV decode attention with dynamic persistent scheduling for Hopper.

    ws = hpc_attention.DecodeWorkspace(max_batch, Hkv, Hq, max_kv_len)   # once
    plan = hpc_attention.plan_decode(kv_lens, Hkv, Hq, workspace=ws)       # once per step
    out = hpc_attention.decode(q, k_cache, v_cache, page_table, kv_lens, plan)  # per layer

The fused prologue, per layer before decode (QK-Norm, RoPE, FP8 Q, paged KV write):
    q, q_scale = hpc_attention.qk_norm_rope_store(qkv, positions, cos_sin_cache, k_cache, v_cache,
                                                  slot_mapping, num_qo_heads=Hq, num_kv_heads=Hkv)
"""

from ._version import __version__
from .decode import DecodeOptions, DecodePlan, DecodeWorkspace, decode, plan_decode
from .prologue import qk_norm_rope_store

__all__ = ["DecodeOptions", "DecodePlan", "DecodeWorkspace", "__version__", "decode", "plan_decode",
           "qk_norm_rope_store"]
