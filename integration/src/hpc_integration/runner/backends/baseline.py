"""The framework-default path without our kernels: torch RMSNorm (QK-Norm), RoPE and KV-cache write,
torch SDPA decode attention over the request's gathered pages (the whole page-table width, masked to
each request's length, FP8 pages dequantised to BF16 first), an FP32 torch matmul router, and the MoE
of baseline_moe.py. BF16 activations. FlashInfer is not used: its decode plan runs on the host per
step (it cannot be recorded in the step's graph) and the H200 machine's FlashInfer has no JIT
sources to build its kernels."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from .base import Backend
from .baseline_moe import BaselineMoE, pick_impl

FP8 = torch.float8_e4m3fn


def head_rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dim in float32, cast back, times the weight (as transformers does)."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_neox(x: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor) -> torch.Tensor:
    """x [T, H, D] rotated by the float32 cos / sin rows of `positions` (pairs i, i + D / 2)."""
    half = x.shape[-1] // 2
    cs = cos_sin[positions.long()].float()
    cos, sin = cs[:, None, :half], cs[:, None, half:]
    a, b = x[..., :half].float(), x[..., half:].float()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)


def sdpa_decode(q, k_cache, v_cache, page_table, kv_lens, scale: float, sm_scale: float) -> torch.Tensor:
    """q [B, Hq, D] over the pages of page_table [B, P] (cache [pages, page_size, Hkv, D]) masked to
    kv_lens: the query heads of one KV head are SDPA's query rows, so K / V are not repeated."""
    B, Hq, D = q.shape
    ps, Hkv = k_cache.shape[1], k_cache.shape[2]
    L = page_table.shape[1] * ps
    idx = page_table.long()

    def gather(cache):
        x = cache[idx].view(B, L, Hkv, D)
        x = x.to(torch.bfloat16) * scale if cache.dtype == FP8 else x.to(q.dtype)
        return x.permute(0, 2, 1, 3)

    mask = (torch.arange(L, device=q.device)[None, :] < kv_lens[:, None].long())[:, None, None, :]
    o = F.scaled_dot_product_attention(q.view(B, Hkv, Hq // Hkv, D), gather(k_cache), gather(v_cache),
                                       attn_mask=mask, scale=sm_scale)
    return o.reshape(B, Hq, D)


class BaselineBackend(Backend):
    name = "baseline"
    act_dtype = torch.bfloat16

    def setup(self, rt) -> None:
        self.moe_impl = pick_impl(rt.device, rt.par.world)
        self.impl = {"attention": "torch_sdpa", "router": "torch_fp32_matmul", "moe": self.moe_impl}

    def prepare_layer(self, rt, shard, moe_ckpt):
        dev = rt.device
        moe = BaselineMoE(self.moe_impl, moe_ckpt, rt.opts.moe_quant, rt.loc.expert_start, dev)
        self.impl["moe"] = moe.impl
        return SimpleNamespace(q_norm=shard.q_norm.to(dev, torch.bfloat16), k_norm=shard.k_norm.to(dev, torch.bfloat16),
                               gate=shard.gate.to(dev, torch.float32), moe=moe)

    def prologue(self, rt, i, layer, qkv, positions, slots):
        Hq, Hkv, D = rt.loc.num_qo_heads, rt.loc.num_kv_heads, rt.cfg.head_dim
        x = qkv.view(qkv.shape[0], Hq + 2 * Hkv, D)
        eps = rt.cfg.rms_norm_eps
        q = rope_neox(head_rms_norm(x[:, :Hq], layer.q_norm, eps), positions, rt.cos_sin)
        k = rope_neox(head_rms_norm(x[:, Hq:Hq + Hkv], layer.k_norm, eps), positions, rt.cos_sin)
        rt.cache.write(i, slots, k, x[:, Hq + Hkv:])
        return q

    def decode(self, rt, i, q, st):
        kc, vc = rt.cache.layer(i)
        return sdpa_decode(q, kc, vc, st.page_table, st.kv_lens, rt.cache.scale, rt.cfg.head_dim ** -0.5)

    def router(self, rt, layer, x):
        return x.float() @ layer.gate.T

    def moe(self, rt, layer, x, ids, weights):
        return layer.moe(x, ids, weights)
