"""GPU tests of the fused attention prologue (qk_norm_rope_store, marker gpu): the kernel against the
float64 reference on fixed cases, NaN-poisoned caches keep every slot not in slot_mapping, strided views,
FP8 Q into decode, determinism, graph replay, PDL on = off, and prologue -> decode(new_tokens=1).
The case builder and the reference check are test_prologue.py's."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import reference as ref
from hpc_common import pdl_enabled

from .test_prologue import D, FP8, _run, check_against_reference, make_inputs

GPU_CASES = [  # T, Hq, Hkv, rotary_dim, style, norm, kv, q dtype
    (1, 8, 1, 128, "neox", True, torch.bfloat16, torch.bfloat16),
    (3, 64, 8, 64, "gptj", True, FP8, FP8),
    (64, 32, 4, 128, "gptj", False, torch.bfloat16, FP8),
    (257, 16, 16, 64, "neox", True, FP8, torch.bfloat16),
    (2048, 40, 8, 128, "neox", False, FP8, FP8),
    (113, 8, 1, 96, "neox", True, torch.bfloat16, torch.bfloat16),
    (239, 12, 3, 100, "gptj", True, FP8, FP8),
    # Hq + 2 Hkv odd: a team's two rows (a V row, then the next token's first q row) straddle tokens
    (77, 5, 1, 128, "neox", True, FP8, FP8),
    (33, 1, 1, 64, "gptj", True, torch.bfloat16, torch.bfloat16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("T,hq,hkv,rd,style,norm,kv,qd", GPU_CASES)
def test_kernel_matches_reference(T, hq, hkv, rd, style, norm, kv, qd):
    a = make_inputs(T, hq, hkv, rotary_dim=rd, kv=kv, norm=norm, pad_every=5, seed=T, device="cuda",
                    idx_dtype=torch.int32 if T % 2 else torch.int64,
                    cs_dtype=torch.bfloat16 if T % 3 == 0 else torch.float32)
    a["k_cache"].view(torch.uint8).fill_(0xFF)  # NaN in BF16 and E4M3
    a["v_cache"].view(torch.uint8).fill_(0xFF)
    scales = dict(k_scale=0.04, v_scale=torch.tensor([0.03], device="cuda")) if kv == FP8 else {}
    q, qs = _run(a, hq, hkv, eps=1e-5, rope_style=style, q_out_dtype=qd, **scales)
    torch.cuda.synchronize()
    check_against_reference(a, q, qs, hq, hkv, q_dtype=qd, kv_dtype=kv, k_scale=0.04 if kv == FP8 else None,
                            v_scale=0.03 if kv == FP8 else None, eps=1e-5, rope_style=style)


@pytest.mark.gpu
def test_poisoned_outputs_are_overwritten_and_strided_views_work():
    """out_q / out_q_scale given as NaN-filled strided views; qkv a column slice of a wider projection; the
    caches views of one [2, pages, page, Hkv, 128] buffer (the vLLM layout)."""
    T, hq, hkv = 37, 16, 2
    a = make_inputs(T, hq, hkv, kv=FP8, device="cuda", rotary_dim=64)
    wide = torch.zeros(T, (hq + 2 * hkv) * D + 256, dtype=torch.bfloat16, device="cuda")
    wide[:, :(hq + 2 * hkv) * D] = a["qkv"]
    a["qkv"] = wide[:, :(hq + 2 * hkv) * D]
    kv = torch.full((2, *a["k_cache"].shape), float("nan"), device="cuda").to(FP8)
    a["k_cache"], a["v_cache"] = kv[0], kv[1]
    out_q = torch.full((T, hq + 1, D), float("nan"), device="cuda").to(FP8)[:, 1:]
    out_qs = torch.full((hq, T), float("nan"), device="cuda").t()
    q, qs = _run(a, hq, hkv, q_out_dtype=FP8, k_scale=0.05, v_scale=0.05, out_q=out_q, out_q_scale=out_qs)
    assert q.data_ptr() == out_q.data_ptr() and qs.data_ptr() == out_qs.data_ptr()
    check_against_reference(a, q, qs, hq, hkv, q_dtype=FP8, kv_dtype=FP8, k_scale=0.05, v_scale=0.05)


def _fp8_decode_case(T, hq, hkv, kv, page=64, ctx=300, seed=0):
    """A decode step: T requests of `ctx` old tokens (random KV) plus the new token that the prologue writes,
    caches of dtype `kv`."""
    g = torch.Generator().manual_seed(seed)
    pages_per = -(-(ctx + 1) // page)
    a = make_inputs(T, hq, hkv, kv=kv, num_pages=T * pages_per, page=page, seed=seed, device="cuda")
    pt = torch.randperm(T * pages_per, generator=g).int().view(T, pages_per)
    lens = torch.full((T,), ctx + 1, dtype=torch.int32)
    slots = pt[:, ctx // page].long() * page + ctx % page
    a["slot_mapping"] = slots.cuda()
    a["positions"] = torch.full((T,), ctx, dtype=torch.int64, device="cuda")
    old = torch.randn(*a["k_cache"].shape, generator=g) * 0.5
    return a, pt.cuda(), lens.cuda(), old


def _fill_old_kv(a, old, kv, scale):
    a["k_cache"].copy_((old / scale).to(kv))
    a["v_cache"].copy_((old.flip(0) / scale).to(kv))


def _rel(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.double().cpu() - y).norm() / y.norm())


@pytest.mark.gpu
@pytest.mark.parametrize("kv", [torch.bfloat16, FP8])
@pytest.mark.parametrize("hq,hkv", [(8, 1), (64, 8)])
def test_fp8_q_into_decode_matches_bf16_q(kv, hq, hkv):
    """FP8 Q and its scales handed to decode unchanged: decode's error against float64 attention on the
    dequantised inputs stays within the brief's FP8 rule (<= 0.005 relative), and the output stays close to
    the BF16-Q path on the same caches (the difference is Q's E4M3 rounding alone)."""
    T = 16
    a, pt, lens, old = _fp8_decode_case(T, hq, hkv, kv)
    scale = 0.02 if kv == FP8 else 1.0
    sc = dict(k_scale=scale, v_scale=scale) if kv == FP8 else {}
    plan = ha.plan_decode(lens, hkv, hq, max_kv_len=int(lens.max()), kv_dtype=kv)
    outs = {}
    for qd in (torch.bfloat16, FP8):
        _fill_old_kv(a, old, kv, scale)
        q, qs = _run(a, hq, hkv, eps=1e-5, q_out_dtype=qd, **sc)
        out = ha.decode(q, a["k_cache"], a["v_cache"], pt, lens, plan, q_scale=qs, **sc)
        want = ref.decode_reference(q.cpu(), a["k_cache"].cpu(), a["v_cache"].cpu(), pt.cpu(), lens.cpu(),
                                    sm_scale=D ** -0.5, q_scale=qs.cpu() if qs is not None else None, **sc)
        assert _rel(out, want) <= 0.005, qd
        outs[qd] = out
    assert _rel(outs[FP8], outs[torch.bfloat16].double().cpu()) <= 0.03


def _graph_case(kv=FP8, qd=FP8, T=64, hq=32, hkv=4):
    a = make_inputs(T, hq, hkv, kv=kv, device="cuda", pad_every=7, seed=3)
    kw = dict(eps=1e-6, q_out_dtype=qd, validate=False)
    if kv == FP8:
        kw.update(k_scale=torch.tensor([0.03], device="cuda"), v_scale=0.05)
    return a, kw


def _snapshot(a, q, qs):
    """The bytes of every output (NaN-poisoned slots compare equal as bytes, not as floats)."""
    return [t.contiguous().view(torch.uint8).clone()
            for t in (q, a["k_cache"], a["v_cache"]) + ((qs,) if qs is not None else ())]


@pytest.mark.gpu
@pytest.mark.parametrize("kv,qd", [(FP8, FP8), (torch.bfloat16, torch.bfloat16)])
def test_deterministic_graph_and_pdl(kv, qd):
    a, kw = _graph_case(kv, qd)
    hq, hkv = 32, 4
    q, qs = _run(a, hq, hkv, **kw)
    first = _snapshot(a, q, qs)
    for _ in range(3):
        q2, qs2 = _run(a, hq, hkv, out_q=q, out_q_scale=qs, **kw)
        for x, y in zip(first, _snapshot(a, q2, qs2)):
            assert torch.equal(x, y)
    for pdl in (False, True):
        with pdl_enabled(pdl):
            q3, qs3 = _run(a, hq, hkv, **kw)
        for x, y in zip(first, _snapshot(a, q3, qs3)):
            assert torch.equal(x, y)
    # graph replay with new inputs equals eager on them
    out_q = torch.empty_like(q)
    out_qs = torch.empty_like(qs) if qs is not None else None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _run(a, hq, hkv, out_q=out_q, out_q_scale=out_qs, **kw)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _run(a, hq, hkv, out_q=out_q, out_q_scale=out_qs, **kw)
    fresh = make_inputs(64, hq, hkv, kv=kv, device="cuda", pad_every=3, seed=11)
    for name in ("qkv", "positions", "slot_mapping"):
        a[name].copy_(fresh[name])
    a["k_cache"].view(torch.uint8).fill_(0xFF)
    a["v_cache"].view(torch.uint8).fill_(0xFF)
    graph.replay()
    torch.cuda.synchronize()
    replayed = _snapshot(a, out_q, out_qs)
    a["k_cache"].view(torch.uint8).fill_(0xFF)
    a["v_cache"].view(torch.uint8).fill_(0xFF)
    q4, qs4 = _run(a, hq, hkv, **kw)
    for x, y in zip(replayed, _snapshot(a, q4, qs4)):
        assert torch.equal(x, y)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", [torch.bfloat16, FP8])
def test_prologue_then_decode_new_tokens_chained_by_pdl(kv):
    """prologue -> decode(new_tokens=1) in one CUDA graph with PDL on equals the same step with PDL off (the
    decode reads the older KV before its wait, the new token's after it)."""
    T, hq, hkv = 32, 8, 1
    a, pt, lens, old = _fp8_decode_case(T, hq, hkv, kv, ctx=1000, seed=5)
    scales = dict(k_scale=0.02, v_scale=0.02) if kv == FP8 else {}
    ws = ha.DecodeWorkspace(T, hkv, hq, 1001, "cuda")
    results = []
    for pdl in (False, True):
        _fill_old_kv(a, old, kv, 0.02 if kv == FP8 else 1.0)
        with pdl_enabled(pdl):
            plan = ha.plan_decode(lens, hkv, hq, workspace=ws, kv_dtype=kv)
            q, qs = _run(a, hq, hkv, q_out_dtype=FP8, validate=False, **scales)
            ha.decode(q, a["k_cache"], a["v_cache"], pt, lens, plan, q_scale=qs, **scales)  # clears fresh_plan
            out = torch.empty(T, hq, D, dtype=torch.bfloat16, device="cuda")
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                with torch.cuda.graph(graph, stream=s):
                    _run(a, hq, hkv, q_out_dtype=FP8, out_q=q, out_q_scale=qs, validate=False, **scales)
                    ha.decode(q, a["k_cache"], a["v_cache"], pt, lens, plan, q_scale=qs, out=out, new_tokens=1,
                              **scales)
            torch.cuda.current_stream().wait_stream(s)
            for _ in range(3):
                graph.replay()
            torch.cuda.synchronize()
            results.append(out.clone())
    assert torch.equal(results[0], results[1])
    want = ref.decode_reference(q.cpu(), a["k_cache"].cpu(), a["v_cache"].cpu(), pt.cpu(), lens.cpu(),
                                sm_scale=D ** -0.5, q_scale=qs.cpu(), **scales)
    assert _rel(results[1], want) <= 0.005
