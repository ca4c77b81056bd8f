"""hpc-attention: paged-KV decode attention with dynamic persistent scheduling for Hopper.

    ws = hpc_attention.DecodeWorkspace(max_batch, Hkv, Hq, max_kv_len)   # once
    plan = hpc_attention.plan_decode(kv_lens, Hkv, Hq, workspace=ws)       # once per step
    out = hpc_attention.decode(q, k_cache, v_cache, page_table, kv_lens, plan)  # per layer
"""

from ._version import __version__
from .decode import DecodeOptions, DecodePlan, DecodeWorkspace, decode, plan_decode

__all__ = ["DecodeOptions", "DecodePlan", "DecodeWorkspace", "__version__", "decode", "plan_decode"]
