"""The hpc-ops kernels: qk_norm_rope_store (QK-Norm, RoPE, paged KV write) and decode (planned once per
step, inside the step's CUDA graph), router_gemm on the FP32 router weight, fused_moe on weights
prepared once at load time. Workspaces are allocated once in `setup`, so a step allocates nothing
the kernels need and can be captured."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from ... import support
from .base import Backend

FP8 = torch.float8_e4m3fn


def kernel_reasons(rt) -> list[str]:
    """Why the kernels cannot serve this runner's configuration (empty: they can)."""
    cfg, loc, opts = rt.cfg, rt.loc, rt.opts
    inter = loc.moe_intermediate_size
    if rt.par.moe_tp_size > 1:  # a TP slice off the kernels' 64-row tile is zero-padded onto it (sharding.py)
        inter = -(-inter // 64) * 64
    reasons = [support.device_reason(rt.device),
               support.attention_reason(head_dim=cfg.head_dim, num_qo_heads=loc.num_qo_heads,
                                        num_kv_heads=loc.num_kv_heads, page_size=opts.page_size,
                                        kv_dtype=opts.kv_torch_dtype),
               support.moe_reason(hidden_size=cfg.hidden_size, intermediate_size=inter, top_k=cfg.top_k,
                                  quant=opts.moe_quant),
               support.router_reason(num_experts=cfg.num_experts, hidden_size=cfg.hidden_size,
                                     weight_dtype=torch.float32)]
    return [r for r in reasons if r]


class OursBackend(Backend):
    name = "ours"
    act_dtype = torch.bfloat16

    def setup(self, rt) -> None:
        import hpc_attention
        bad = kernel_reasons(rt)
        if bad:
            raise ValueError("runner backend 'ours': " + "; ".join(bad))
        loc, opts = rt.loc, rt.opts
        self.fp8_kv = opts.kv_torch_dtype == FP8
        self.kv_scale = rt.cache.scale
        self.attn_ws = hpc_attention.DecodeWorkspace(opts.max_batch, loc.num_kv_heads, loc.num_qo_heads,
                                                     opts.max_kv_len, rt.device)
        self.moe_ws = None  # made with the first layer: a padded TP shard's intermediate size decides it
        self.plan = None
        self.impl = {"attention": "hpc_attention", "router": "hpc_router_gemm", "moe": f"hpc_moe_{opts.moe_quant}"}

    def prepare_layer(self, rt, shard, moe_ckpt):
        from hpc_moe import MoEWeights, MoEWorkspace
        from hpc_router_gemm import RouterWeight

        dev = rt.device
        ckpt = {k: v.to(dev) for k, v in moe_ckpt.items()}
        inter = ckpt["w2"].shape[2]
        if self.moe_ws is None:
            self.moe_ws = MoEWorkspace(rt.opts.max_batch, rt.cfg.top_k, rt.cfg.hidden_size, inter, dev,
                                       fp8=rt.opts.moe_quant != "bf16")
        return SimpleNamespace(
            q_norm=shard.q_norm.to(dev, torch.float32), k_norm=shard.k_norm.to(dev, torch.float32),
            router=RouterWeight(shard.gate.to(dev, torch.float32).contiguous()),
            moe=MoEWeights.prepare(**ckpt, quant=rt.opts.moe_quant, ep_rank=rt.par.ep_rank, ep_size=rt.par.ep_size,
                                   num_experts=rt.cfg.num_experts))

    def begin_decode(self, rt, st) -> None:
        import hpc_attention

        self.plan = hpc_attention.plan_decode(st.kv_lens, rt.loc.num_kv_heads, rt.loc.num_qo_heads,
                                              workspace=self.attn_ws, kv_dtype=rt.opts.kv_torch_dtype,
                                              page_table=st.page_table, page_size=rt.opts.page_size, validate=False)

    def prologue(self, rt, i, layer, qkv, positions, slots):
        import hpc_attention

        kc, vc = rt.cache.layer(i)
        scale = self.kv_scale if self.fp8_kv else None
        q, _ = hpc_attention.qk_norm_rope_store(
            qkv, positions, rt.cos_sin, kc, vc, slots, num_qo_heads=rt.loc.num_qo_heads,
            num_kv_heads=rt.loc.num_kv_heads, q_norm_weight=layer.q_norm, k_norm_weight=layer.k_norm,
            eps=rt.cfg.rms_norm_eps, rope_style="neox", k_scale=scale, v_scale=scale, validate=False)
        return q

    def decode(self, rt, i, q, st):
        import hpc_attention

        kc, vc = rt.cache.layer(i)
        return hpc_attention.decode(q, kc, vc, st.page_table, st.kv_lens, self.plan, k_scale=self.kv_scale,
                                    v_scale=self.kv_scale, new_tokens=1)

    def router(self, rt, layer, x):
        from hpc_router_gemm import router_gemm

        return router_gemm(x.contiguous(), layer.router)

    def moe(self, rt, layer, x, ids, weights):
        from hpc_moe import fused_moe

        ws = self.moe_ws if x.shape[0] <= rt.opts.max_batch else None  # prefill: the cached workspace
        return fused_moe(x.contiguous(), layer.moe, ids.contiguous(), weights.contiguous(), workspace=ws)
