"""The operators' pure-torch references (hpc_attention / hpc_router_gemm / hpc_moe reference.py), in
float32 activations with float64 inside the references that offer it; runs on any device, eager only
(the references read lengths on the host)."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from .base import Backend

FP8 = torch.float8_e4m3fn


class ReferenceBackend(Backend):
    name = "reference"
    act_dtype = torch.float32
    graphs = False

    def setup(self, rt) -> None:
        from hpc_attention.heuristics import HEAD_DIM

        if rt.cfg.head_dim != HEAD_DIM:
            raise ValueError(f"runner backend 'reference': head_dim must be {HEAD_DIM} (the prologue reference's), "
                             f"got {rt.cfg.head_dim}")
        self.kv_scale = rt.cache.scale if rt.cache.dtype == FP8 else None
        self.impl = {"attention": "hpc_attention.reference", "router": "hpc_router_gemm.reference",
                     "moe": f"hpc_moe.reference_{rt.opts.moe_quant}"}

    def prepare_layer(self, rt, shard, moe_ckpt):
        dev = rt.device
        return SimpleNamespace(q_norm=shard.q_norm.to(dev, torch.float32), k_norm=shard.k_norm.to(dev, torch.float32),
                               gate=shard.gate.to(dev, torch.float32), ckpt={k: v.to(dev) for k, v in moe_ckpt.items()})

    def prologue(self, rt, i, layer, qkv, positions, slots):
        from hpc_attention.reference import qk_norm_rope_store_reference

        kc, vc = rt.cache.layer(i)
        q, _ = qk_norm_rope_store_reference(
            qkv, positions, rt.cos_sin, kc, vc, slots, num_qo_heads=rt.loc.num_qo_heads,
            num_kv_heads=rt.loc.num_kv_heads, q_norm_weight=layer.q_norm, k_norm_weight=layer.k_norm,
            eps=rt.cfg.rms_norm_eps, rope_style="neox", q_out_dtype=torch.float32, k_scale=self.kv_scale,
            v_scale=self.kv_scale)
        return q

    def decode(self, rt, i, q, st):
        from hpc_attention.reference import decode_reference

        kc, vc = rt.cache.layer(i)
        s = rt.cache.scale
        return decode_reference(q, kc, vc, st.page_table, st.kv_lens, sm_scale=rt.cfg.head_dim ** -0.5, k_scale=s,
                                v_scale=s, dtype=torch.float32)

    def router(self, rt, layer, x):
        from hpc_router_gemm.reference import router_gemm_reference

        return router_gemm_reference(x, layer.gate).to(torch.float32)

    def moe(self, rt, layer, x, ids, weights):
        from hpc_moe.reference import fused_moe_reference_quant

        c = layer.ckpt
        return fused_moe_reference_quant(x, c["w13"], c["w2"], ids, weights, quant=rt.opts.moe_quant,
                                         w13_scale=c.get("w13_scale"), w2_scale=c.get("w2_scale"),
                                         expert_offset=rt.loc.expert_start, dtype=torch.float32)
