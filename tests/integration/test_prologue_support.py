"""The framework-independent parts of the fused prologue in the adapters (project venv): the switch,
the layer check's messages, and ops.qk_norm_rope_store's reference path on the CPU against an
independent float64 formula."""

from __future__ import annotations

import pytest
import torch
from hpc_integration import ops, support

BASE = dict(head_dim=128, rotary_dim=128, cos_sin_shape=(4096, 128), max_positions=4096, q_norm_eps=1e-6,
            k_norm_eps=1e-6, norm_dtypes=(torch.bfloat16, torch.bfloat16), act_dtype=torch.bfloat16,
            kv_dtype=torch.bfloat16)


def test_switch(monkeypatch):
    monkeypatch.delenv(support.ENV_SGLANG_PROLOGUE, raising=False)
    assert support.prologue_enabled()
    monkeypatch.setenv(support.ENV_SGLANG_PROLOGUE, "0")
    assert not support.prologue_enabled()
    monkeypatch.setenv(support.ENV_SGLANG_PROLOGUE, "off")
    with pytest.raises(ValueError, match="HPC_SGLANG_PROLOGUE='off'"):
        support.prologue_enabled()


@pytest.mark.parametrize("kw, words", [
    (dict(head_dim=64, rotary_dim=64, cos_sin_shape=(4096, 64)), "head_dim=128"),
    (dict(rotary_dim=63, cos_sin_shape=(4096, 63)), "rotary dim 63"),
    (dict(cos_sin_shape=(4096, 64)), "cos/sin cache of shape [4096, 64]"),
    (dict(max_positions=8192), "--context-length"),
    (dict(k_norm_eps=1e-5), "one eps"),
    (dict(norm_dtypes=(torch.bfloat16, torch.float32)), "norm weights"),
    (dict(act_dtype=torch.float16), "activations float16"),
    (dict(kv_dtype=torch.float16), "KV cache dtype float16"),
])
def test_prologue_reason_names_the_setting(kw, words):
    assert support.prologue_reason(**BASE) is None
    assert support.prologue_reason(**{**BASE, "rotary_dim": 64, "cos_sin_shape": (4096, 64)}) is None  # partial
    assert support.prologue_reason(**{**BASE, "kv_dtype": torch.float8_e4m3fn}) is None
    reason = support.prologue_reason(**{**BASE, **kw})
    assert reason is not None and words in reason


def _rope_neox(x, pos, base=10000.0):
    """x [T, H, 128] float64 rotated by the angle p * base^(-2j / 128), pairs (j, j + 64)."""
    j = torch.arange(64, dtype=torch.float64)
    ang = pos.double()[:, None, None] * base ** (-2 * j / 128)
    a, b = x[..., :64], x[..., 64:]
    return torch.cat([a * ang.cos() - b * ang.sin(), b * ang.cos() + a * ang.sin()], dim=-1)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_qk_norm_rope_store_reference_path(kv_dtype):
    g = torch.Generator().manual_seed(11)
    T, hq, hkv, page, pages = 5, 8, 2, 16, 6
    qkv = torch.randn(T, (hq + 2 * hkv) * 128, generator=g).to(torch.bfloat16)
    pos = torch.tensor([0, 7, 300, 31, 1023])
    slots = torch.tensor([3, 17, -1, 40, 95])  # -1: a padding token, writes nothing
    from hpc_attention.reference import rope_cos_sin_cache

    cache = rope_cos_sin_cache(1024, 128)
    kc = torch.randn(pages, page, hkv, 128, generator=g).to(kv_dtype)
    vc = torch.randn(pages, page, hkv, 128, generator=g).to(kv_dtype)
    k0, v0 = kc.clone(), vc.clone()
    wq, wk = (1 + 0.2 * torch.randn(128, generator=g)).to(torch.bfloat16), torch.ones(128, dtype=torch.bfloat16)
    scale = 0.5 if kv_dtype == torch.float8_e4m3fn else None
    before = ops.CALLS.get("prologue.reference", 0)
    q = ops.qk_norm_rope_store(qkv, pos, cache, kc, vc, slots, num_qo_heads=hq, num_kv_heads=hkv,
                               q_norm_weight=wq, k_norm_weight=wk, eps=1e-6, rope_style="neox", rotary_dim=128,
                               k_scale=scale, v_scale=scale)
    assert ops.CALLS["prologue.reference"] == before + 1 and q.shape == (T, hq, 128) and q.dtype == torch.bfloat16
    x = qkv.double().view(T, hq + 2 * hkv, 128)

    def norm(h, w):
        return h * torch.rsqrt(h.square().mean(-1, keepdim=True) + 1e-6) * w.double()

    q_ref = _rope_neox(norm(x[:, :hq], wq), pos)
    k_ref = _rope_neox(norm(x[:, hq:hq + hkv], wk), pos)
    torch.testing.assert_close(q.double(), q_ref, atol=0.02, rtol=0.01)
    s = scale or 1.0
    written = torch.zeros(pages * page, dtype=torch.bool)
    for t, slot in enumerate(slots.tolist()):
        if slot < 0:
            continue
        written[slot] = True
        p, o = divmod(slot, page)
        tol = dict(atol=0.07 * s * 4, rtol=0.07) if scale else dict(atol=0.02, rtol=0.01)
        torch.testing.assert_close(kc[p, o].double() * s, k_ref[t], **tol)
        torch.testing.assert_close(vc[p, o].double() * s, x[t, hq + hkv:], **tol)
    u8 = (lambda t: t.view(torch.uint8)) if scale else (lambda t: t)
    assert torch.equal(u8(kc).view(pages * page, -1)[~written], u8(k0).view(pages * page, -1)[~written])
    assert torch.equal(u8(vc).view(pages * page, -1)[~written], u8(v0).view(pages * page, -1)[~written])
