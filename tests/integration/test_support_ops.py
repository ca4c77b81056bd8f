"""hpc_integration's framework-independent parts, in the project venv (no framework installed):
the support checks and their messages, and the operator calls' reference paths on the CPU."""

from __future__ import annotations

import math

import pytest
import torch
from hpc_integration import ops, support


def test_enabled_ops_parses_and_rejects_typos(monkeypatch):
    monkeypatch.delenv(support.ENV_OPS, raising=False)
    assert support.enabled_ops() == frozenset(support.OPS)
    monkeypatch.setenv(support.ENV_OPS, " attention, Router ")
    assert support.enabled_ops() == {"attention", "router"}
    monkeypatch.setenv(support.ENV_OPS, "none")
    assert support.enabled_ops() == frozenset()
    monkeypatch.setenv(support.ENV_OPS, "attention,moee")
    with pytest.raises(ValueError, match="moee"):
        support.enabled_ops()


def test_device_reason_names_the_gpu_requirement():
    assert "SM90" in support.device_reason("cpu")


@pytest.mark.parametrize("kw, words", [
    (dict(head_dim=64), "head_dim=128"),
    (dict(num_qo_heads=64, num_kv_heads=2), "GQA group 32"),
    (dict(num_qo_heads=6, num_kv_heads=4), "not a multiple"),
    (dict(page_size=48), "page size 48"),
    (dict(kv_dtype=torch.float16), "KV cache dtype float16"),
    (dict(sliding_window=4096), "sliding window"),
    (dict(logit_cap=30.0), "soft cap"),
])
def test_attention_reason_names_the_setting(kw, words):
    base = dict(head_dim=128, num_qo_heads=8, num_kv_heads=1, page_size=64, kv_dtype=torch.bfloat16)
    assert support.attention_reason(**base) is None
    assert support.attention_reason(**{**base, "kv_dtype": torch.float8_e4m3fn, "page_size": 1}) is None
    reason = support.attention_reason(**{**base, **kw})
    assert reason is not None and words in reason


@pytest.mark.parametrize("kw, words", [
    (dict(quant="w4a16"), "quantisation 'w4a16'"),
    (dict(activation="gelu"), "activation 'gelu'"),
    (dict(hidden_size=2000), "hidden size 2000"),
    (dict(intermediate_size=96), "tensor-parallel size"),
    (dict(top_k=17), "top-k 17"),
    (dict(has_bias=True), "biases"),
])
def test_moe_reason_names_the_setting(kw, words):
    base = dict(hidden_size=4096, intermediate_size=192, top_k=8)
    assert support.moe_reason(**base) is None
    assert support.moe_reason(**base, quant="fp8_block") is None
    reason = support.moe_reason(**{**base, **kw})
    assert reason is not None and words in reason


@pytest.mark.parametrize("kw, words", [
    (dict(block_shape=[64, 64]), "block size [64, 64]"),
    (dict(block_shape=(128, 64)), "block size [128, 64]"),
    (dict(weight_dtype=torch.float8_e5m2), "float8_e5m2"),
    (dict(scale_dtype=torch.bfloat16), "scales of dtype bfloat16"),
])
def test_fp8_moe_reason_names_the_setting(kw, words):
    assert support.fp8_moe_reason() is None  # per-tensor scales
    assert support.fp8_moe_reason(block_shape=[128, 128]) is None
    reason = support.fp8_moe_reason(**kw)
    assert reason is not None and words in reason, reason


def test_router_reason():
    assert support.router_reason(num_experts=192, hidden_size=4096, weight_dtype=torch.float32) is None
    assert "FP32" in support.router_reason(num_experts=192, hidden_size=4096, weight_dtype=torch.bfloat16)
    assert "multiples of 64" in support.router_reason(num_experts=8, hidden_size=4096, weight_dtype=torch.float32)


def test_say_logs_once(caplog):
    with caplog.at_level("WARNING", logger="hpc_integration"):
        support.say("unit-test message 1")
        support.say("unit-test message 1")
    assert [r.getMessage() for r in caplog.records].count("hpc-integration: unit-test message 1") == 1


def _paged(lens, page, hkv, d, g, dtype=torch.bfloat16):
    pages_per = max(1, max(-(-n // page) for n in lens))
    n_pages = len(lens) * pages_per + 3
    k = torch.randn(n_pages, page, hkv, d, generator=g).to(dtype)
    v = torch.randn(n_pages, page, hkv, d, generator=g).to(dtype)
    pt = torch.randperm(n_pages, generator=g)[:len(lens) * pages_per].int().view(len(lens), pages_per)
    return k, v, pt


@pytest.mark.parametrize("page", [1, 16, 64])
def test_decode_state_reference_on_cpu(page):
    g = torch.Generator().manual_seed(page)
    lens = [1, 70, 129, 5]
    k, v, pt = _paged(lens, page, 2, 128, g)
    q = torch.randn(len(lens), 8, 128, generator=g).to(torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    st = ops.DecodeState(8, 2, 8, 256, torch.device("cpu"), torch.bfloat16)
    assert st.workspace is None  # no kernels on the CPU
    st.plan(kv_lens)
    out = torch.full_like(q, float("nan"))
    st.decode(q, k, v, pt, kv_lens, sm_scale=128 ** -0.5, out=out)
    from hpc_attention.reference import decode_reference

    ref = decode_reference(q, k, v, pt, kv_lens, sm_scale=128 ** -0.5)
    torch.testing.assert_close(out.double(), ref, atol=1e-2, rtol=1e-2)


def test_paged_prefill_reference_matches_dense_causal():
    g = torch.Generator().manual_seed(3)
    page, hkv, hq, d = 16, 2, 4, 128
    kv_lens, q_lens = [20, 7, 33], [5, 7, 1]
    k, v, pt = _paged(kv_lens, page, hkv, d, g, torch.float32)
    q = torch.randn(sum(q_lens), hq, d, generator=g)
    out = ops.paged_prefill_reference(q, k, v, pt, kv_lens, q_lens, sm_scale=0.1)
    start = 0
    for b, (L, n) in enumerate(zip(kv_lens, q_lens)):
        rows = torch.cat([k[p] for p in pt[b].tolist()])[:L], torch.cat([v[p] for p in pt[b].tolist()])[:L]
        for i in range(n):
            pos = L - n + i
            kk = rows[0][:pos + 1].repeat_interleave(hq // hkv, dim=1)  # [pos+1, hq, d]
            vv = rows[1][:pos + 1].repeat_interleave(hq // hkv, dim=1)
            s = torch.einsum("hd,lhd->hl", q[start + i], kk) * 0.1
            ref = torch.einsum("hl,lhd->hd", torch.softmax(s, -1), vv)
            torch.testing.assert_close(out[start + i], ref, atol=1e-5, rtol=1e-5)
        start += n


def test_fused_moe_reference_path_on_cpu():
    g = torch.Generator().manual_seed(1)
    T, H, inter, E, k = 5, 256, 64, 8, 2
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    w13 = (torch.randn(E, 2 * inter, H, generator=g) * 0.05).to(torch.bfloat16)
    w2 = (torch.randn(E, H, inter, generator=g) * 0.05).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    wts = torch.softmax(torch.randn(T, k, generator=g), -1)
    before = ops.CALLS.get("moe.reference", 0)
    out = ops.fused_moe(x, ops.prepare_experts(w13, w2), ids, wts)
    from hpc_moe.reference import fused_moe_reference

    ref = fused_moe_reference(x, w13, w2, ids, wts)
    assert out.dtype == torch.bfloat16 and ops.CALLS["moe.reference"] == before + 1
    cos = torch.nn.functional.cosine_similarity(out.double().flatten(), ref.flatten(), dim=0).item()
    assert cos > 0.9999 and math.isfinite(out.float().abs().max().item())


def test_router_state_reference_on_cpu():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(64, 128, generator=g) * 0.02
    x = torch.randn(3, 128, generator=g).to(torch.bfloat16)
    st = ops.RouterState(w)
    assert st.prepared is None
    got = st(x)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), x.double() @ w.double().T, atol=1e-5, rtol=1e-5)
