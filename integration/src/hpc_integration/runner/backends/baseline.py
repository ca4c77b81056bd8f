"""The framework-default path without our kernels, BF16 activations. What runs is chosen in `setup`
and named in `impl` (the e2e rows' `baseline_impl`):

- decode attention (`attention=`): "auto" (default) takes SGLang's Triton decode attention over the
  paged cache (baseline_sglang.py: what SGLang's `triton` backend runs, FP8 KV read as FP8 the way
  SGLang 0.5.17 does) when SGLang imports on a CUDA device and a small probe matches torch SDPA,
  else "torch_sdpa": SDPA over the request's gathered pages (the whole page-table width, masked to
  each request's length, FP8 pages dequantised to BF16 first). Either can be asked for by name.
- prologue (`prologue=`): "auto" takes SGLang's QK-Norm and RoPE kernels where they import and
  match the torch ones on a probe, else "torch" (RMSNorm and neox RoPE in float32); "sglang" insists
  on SGLang's; the KV write is torch indexing in all.
- router: an FP32 torch matmul; MoE: baseline_moe.py.

FlashInfer is not used: its decode plan runs on the host per step (it cannot be recorded in the
step's graph) and the H200 machine's FlashInfer has no JIT sources to build its kernels. A fallback
that "auto" took for a reason other than "not importable" is named in `impl["fallback"]`."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F

from .base import Backend
from .baseline_moe import BaselineMoE, pick_impl
from .baseline_sglang import SGLangTritonDecode, pick_prologue

FP8 = torch.float8_e4m3fn
ATTENTIONS = ("auto", "sglang_triton_decode", "torch_sdpa")
PROLOGUE_CHOICES = ("auto", "sglang", "torch")


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


def attention_probe_error(dec: SGLangTritonDecode, cache, num_qo_heads: int, sm_scale: float) -> float:
    """max |SGLang decode - torch SDPA| / max |SDPA| on two requests over four scrambled pages of
    cache's page size, dtype and scale (lengths one page + 3 and 5 tokens): a wrong index or layout
    gives O(1), BF16 / FP8 rounding a few per cent."""
    ps, Hkv, D = cache.page_size, cache.k.shape[-2], cache.k.shape[-1]
    dev = cache.device
    g = torch.Generator(device=dev).manual_seed(0)
    kc, vc = (cache.encode(torch.randn(4, ps, Hkv, D, generator=g, device=dev)) for _ in range(2))
    table = torch.tensor([[2, 0], [3, 1]], dtype=torch.int32, device=dev)
    lens = torch.tensor([ps + 3, 5], dtype=torch.int32, device=dev)
    q = torch.randn(2, num_qo_heads, D, generator=g, device=dev).to(torch.bfloat16)
    dec.plan(table, lens)
    got = dec(q, kc, vc, sm_scale, cache.scale).float()
    ref = sdpa_decode(q, kc, vc, table, lens, cache.scale, sm_scale).float()
    return ((got - ref).abs().max() / ref.abs().max()).item()


def prologue_probe_bad(run, num_qo_heads: int, num_kv_heads: int, head_dim: int, eps: float,
                       cos_sin: torch.Tensor) -> bool:
    """Whether `run` (q, k views of a qkv row block, norm weights, eps, positions, cos_sin -> q, k)
    differs from the torch prologue by more than BF16 rounding on three tokens at scattered positions."""
    dev = cos_sin.device
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(3, num_qo_heads + 2 * num_kv_heads, head_dim, generator=g, device=dev).to(torch.bfloat16)
    qw = (1 + 0.1 * torch.randn(head_dim, generator=g, device=dev)).to(torch.bfloat16)
    kw = (1 + 0.1 * torch.randn(head_dim, generator=g, device=dev)).to(torch.bfloat16)
    pos = torch.tensor([0, 5, cos_sin.shape[0] - 1], dtype=torch.int32, device=dev)
    Hq, Hkv = num_qo_heads, num_kv_heads
    want = [rope_neox(head_rms_norm(x[:, a:b], w, eps), pos, cos_sin).float()
            for (a, b), w in (((0, Hq), qw), ((Hq, Hq + Hkv), kw))]
    y = x.clone()
    got = run(y[:, :Hq], y[:, Hq:Hq + Hkv], qw, kw, eps, pos, cos_sin)
    return any(((g_.float() - w_).abs().max() > 0.02 * w_.abs().max() + 1e-2).item() for g_, w_ in zip(got, want))


class BaselineBackend(Backend):
    name = "baseline"
    act_dtype = torch.bfloat16

    def __init__(self, attention: str = "auto", prologue: str = "auto"):
        if attention not in ATTENTIONS:
            raise ValueError(f"BaselineBackend: attention must be one of {ATTENTIONS}, got {attention!r}")
        if prologue not in PROLOGUE_CHOICES:
            raise ValueError(f"BaselineBackend: prologue must be one of {PROLOGUE_CHOICES}, got {prologue!r}")
        self.attention, self.prologue_choice = attention, prologue

    def _pick_attention(self, rt) -> tuple[str, SGLangTritonDecode | None, str]:
        """(name, SGLang decode or None, fallback note) for this runner."""
        if self.attention == "torch_sdpa":
            return "torch_sdpa", None, ""
        loc, ps = rt.loc, rt.cache.page_size
        try:
            dec = SGLangTritonDecode(rt.cache.max_batch, rt.cache.pages_per_request, ps, loc.num_qo_heads,
                                     loc.num_kv_heads, rt.cfg.head_dim, rt.device)
            probe = SGLangTritonDecode(2, 2, ps, loc.num_qo_heads, loc.num_kv_heads, rt.cfg.head_dim, rt.device)
            err = attention_probe_error(probe, rt.cache, loc.num_qo_heads, rt.cfg.head_dim ** -0.5)
        except Exception as e:  # noqa: BLE001 - no SGLang, no GPU, or its kernels do not build here
            if self.attention != "auto":
                raise ValueError(f"BaselineBackend: attention={self.attention!r} cannot run here: "
                                 f"{type(e).__name__}: {e}") from e
            return "torch_sdpa", None, ""
        tol = 0.1 if rt.cache.dtype == FP8 else 0.03
        if not err <= tol:
            if self.attention != "auto":
                raise ValueError(f"BaselineBackend: attention={self.attention!r} differs from torch SDPA by "
                                 f"{err:.3g} of max |out| on the probe (tolerance {tol})")
            return "torch_sdpa", None, "sglang_triton_decode_mismatch"
        return "sglang_triton_decode", dec, ""

    def setup(self, rt) -> None:
        self.moe_impl = pick_impl(rt.device, rt.par.world)
        attn, self.sgl_decode, attn_note = self._pick_attention(rt)
        self.prologue_run, pro_note = None, ""
        prologue = "torch"
        if self.prologue_choice != "torch":
            loc, D = rt.loc, rt.cfg.head_dim
            prologue, self.prologue_run, pro_note = pick_prologue(
                rt.device, D, torch.bfloat16,
                lambda run: prologue_probe_bad(run, loc.num_qo_heads, loc.num_kv_heads, D, rt.cfg.rms_norm_eps,
                                               rt.cos_sin))
            if self.prologue_choice == "sglang" and self.prologue_run is None:
                raise ValueError(f"BaselineBackend: prologue='sglang' cannot run here ({pro_note or 'not on CUDA'})")
        self.impl = {"attention": attn, "prologue": prologue, "router": "torch_fp32_matmul", "moe": self.moe_impl}
        notes = "+".join(n for n in (attn_note, pro_note) if n)
        if notes:
            self.impl["fallback"] = notes

    def prepare_layer(self, rt, shard, moe_ckpt):
        dev = rt.device
        moe = BaselineMoE(self.moe_impl, moe_ckpt, rt.opts.moe_quant, rt.loc.expert_start, dev)
        self.impl["moe"] = moe.impl
        return SimpleNamespace(q_norm=shard.q_norm.to(dev, torch.bfloat16), k_norm=shard.k_norm.to(dev, torch.bfloat16),
                               gate=shard.gate.to(dev, torch.float32), moe=moe)

    def begin_decode(self, rt, st) -> None:
        if self.sgl_decode is not None:  # SGLang's per-step metadata: token indices and split counts
            self.sgl_decode.plan(st.page_table, st.kv_lens)

    def prologue(self, rt, i, layer, qkv, positions, slots):
        Hq, Hkv, D = rt.loc.num_qo_heads, rt.loc.num_kv_heads, rt.cfg.head_dim
        x = qkv.view(qkv.shape[0], Hq + 2 * Hkv, D)
        eps = rt.cfg.rms_norm_eps
        if self.prologue_run is not None:  # SGLang's kernels, in place on the qkv rows as SGLang runs them
            q, k = self.prologue_run(x[:, :Hq], x[:, Hq:Hq + Hkv], layer.q_norm, layer.k_norm, eps, positions,
                                     rt.cos_sin)
        else:
            q = rope_neox(head_rms_norm(x[:, :Hq], layer.q_norm, eps), positions, rt.cos_sin)
            k = rope_neox(head_rms_norm(x[:, Hq:Hq + Hkv], layer.k_norm, eps), positions, rt.cos_sin)
        rt.cache.write(i, slots, k, x[:, Hq + Hkv:])
        return q

    def decode(self, rt, i, q, st):
        kc, vc = rt.cache.layer(i)
        if self.sgl_decode is not None:
            return self.sgl_decode(q, kc, vc, rt.cfg.head_dim ** -0.5, rt.cache.scale)
        return sdpa_decode(q, kc, vc, st.page_table, st.kv_lens, rt.cache.scale, rt.cfg.head_dim ** -0.5)

    def router(self, rt, layer, x):
        return x.float() @ layer.gate.T

    def moe(self, rt, layer, x, ids, weights):
        return layer.moe(x, ids, weights)
