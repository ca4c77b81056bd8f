"""The fused prologue on hypothesis-drawn cases. GPU: token counts of decode and prefill, the head layouts
of the served models, both rotary dims and RoPE styles, norm on and off, both KV and Q dtypes, padding
tokens, int32 and int64 ids, FP32 and BF16 cos / sin caches. CPU: the kernel's source run by the host
emulation (test_prologue.EmuExt) on small token counts, any even rotary dim and odd page sizes. Draws shapes
and seeds, never tensor contents. Every output and written cache slot is within one rounding of the float64
reference, every other slot keeps its NaN poison, and (GPU) a second run gives the same bits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import hpc_attention as ha

from . import test_prologue as tp
from . import test_prologue_emulated as tpe
from .test_prologue import FP8, check_against_reference, make_inputs
from .test_prologue_emulated import emu_harness  # noqa: F401 (a fixture)

TOKENS = [1, 3, 64, 257, 2048]
HEADS = [(8, 1), (64, 8), (32, 4), (16, 16), (40, 8)]


@st.composite
def cases(draw):
    return dict(T=draw(st.sampled_from(TOKENS)), heads=draw(st.sampled_from(HEADS)),
                rotary_dim=draw(st.sampled_from([64, 128])), style=draw(st.sampled_from(["neox", "gptj"])),
                norm=draw(st.booleans()), kv=draw(st.sampled_from([torch.bfloat16, FP8])),
                q=draw(st.sampled_from([torch.bfloat16, FP8])), page=draw(st.sampled_from([16, 64])),
                pad_every=draw(st.sampled_from([0, 2, 7])), i64=draw(st.booleans()), cs_f32=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)))


def run_case(c):
    hq, hkv = c["heads"]
    a = make_inputs(c["T"], hq, hkv, rotary_dim=c["rotary_dim"], kv=c["kv"], page=c["page"], norm=c["norm"],
                    cs_dtype=torch.float32 if c["cs_f32"] else torch.bfloat16,
                    idx_dtype=torch.int64 if c["i64"] else torch.int32, pad_every=c["pad_every"], seed=c["seed"],
                    device="cuda")
    for cache in (a["k_cache"], a["v_cache"]):
        cache.view(torch.uint8).fill_(0xFF)  # NaN in BF16 and E4M3
    scales = dict(k_scale=0.04, v_scale=0.03) if c["kv"] == FP8 else {}
    kw = dict(num_qo_heads=hq, num_kv_heads=hkv, q_norm_weight=a["q_norm_weight"],
              k_norm_weight=a["k_norm_weight"], eps=1e-5, rope_style=c["style"], q_out_dtype=c["q"], **scales)
    args = [a[n] for n in ("qkv", "positions", "cos_sin_cache", "k_cache", "v_cache", "slot_mapping")]
    q, qs = ha.qk_norm_rope_store(*args, **kw)
    torch.cuda.synchronize()
    repro = f"repro: run_case({c!r})"
    try:
        check_against_reference(a, q, qs, hq, hkv, q_dtype=c["q"], kv_dtype=c["kv"], k_scale=scales.get("k_scale"),
                                v_scale=scales.get("v_scale"), eps=1e-5, rope_style=c["style"])
    except AssertionError as e:
        raise AssertionError(f"{e}\n{repro}") from None
    first = [t.view(torch.uint8).clone() for t in (q, a["k_cache"], a["v_cache"])]
    q2, qs2 = ha.qk_norm_rope_store(*args, out_q=torch.empty_like(q), **kw)
    for x, y in zip(first, (q2, a["k_cache"], a["v_cache"])):
        assert torch.equal(x, y.view(torch.uint8)), f"not deterministic; {repro}"
    if qs is not None:
        assert torch.equal(qs, qs2), f"q_scale not deterministic; {repro}"


@pytest.mark.gpu
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
@example(dict(T=1, heads=(8, 1), rotary_dim=128, style="neox", norm=True, kv=FP8, q=FP8, page=64, pad_every=0,
              i64=True, cs_f32=True, seed=0))
@example(dict(T=257, heads=(40, 8), rotary_dim=64, style="gptj", norm=False, kv=torch.bfloat16,
              q=torch.bfloat16, page=16, pad_every=7, i64=False, cs_f32=False, seed=1))
@example(dict(T=2048, heads=(64, 8), rotary_dim=128, style="neox", norm=True, kv=FP8, q=FP8, page=64,
              pad_every=2, i64=False, cs_f32=True, seed=2))
@example(dict(T=3, heads=(16, 16), rotary_dim=64, style="neox", norm=True, kv=torch.bfloat16, q=FP8, page=16,
              pad_every=0, i64=True, cs_f32=False, seed=3))
def test_prologue_matches_reference(c):
    run_case(c)


@st.composite
def small_cases(draw):
    hkv = draw(st.sampled_from([1, 2, 3, 8]))
    return dict(T=draw(st.integers(1, 12)), heads=(hkv * draw(st.sampled_from([1, 2, 4, 5, 16])), hkv),
                rotary_dim=2 * draw(st.integers(1, 64)), style=draw(st.sampled_from(["neox", "gptj"])),
                norm=draw(st.booleans()), kv=draw(st.sampled_from([torch.bfloat16, FP8])),
                q=draw(st.sampled_from([torch.bfloat16, FP8])), page=draw(st.sampled_from([1, 3, 16, 64])),
                pad_every=draw(st.sampled_from([0, 2, 5])), i64=draw(st.booleans()), cs_f32=draw(st.booleans()),
                seed=draw(st.integers(0, 2**31 - 1)))


@pytest.fixture(scope="module")
def emu_ext_module(emu_harness, tmp_path_factory):
    ext = tpe.EmuExt(emu_harness, tmp_path_factory.mktemp("prologue_emu_props"))
    mp = pytest.MonkeyPatch()
    mp.setattr(tp.pro._ext, "load", lambda: ext)
    mp.setattr(tp.pro, "require_hopper", lambda *a, **k: None)
    mp.setattr(tp.pro, "stream_ptr", lambda device: 0)
    yield ext
    mp.undo()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_cases())
@example(dict(T=1, heads=(16, 1), rotary_dim=128, style="neox", norm=True, kv=FP8, q=FP8, page=64, pad_every=0,
              i64=True, cs_f32=True, seed=0))
@example(dict(T=12, heads=(5, 1), rotary_dim=34, style="gptj", norm=False, kv=torch.bfloat16, q=torch.bfloat16,
              page=3, pad_every=2, i64=False, cs_f32=False, seed=1))
def test_emulated_prologue_matches_reference(emu_ext_module, c):
    hq, hkv = c["heads"]
    a = make_inputs(c["T"], hq, hkv, rotary_dim=c["rotary_dim"], kv=c["kv"], page=c["page"], norm=c["norm"],
                    cs_dtype=torch.float32 if c["cs_f32"] else torch.bfloat16,
                    idx_dtype=torch.int64 if c["i64"] else torch.int32, pad_every=c["pad_every"], seed=c["seed"],
                    max_pos=300)
    for cache in (a["k_cache"], a["v_cache"]):
        cache.view(torch.uint8).fill_(0xFF)
    scales = dict(k_scale=0.04, v_scale=0.03) if c["kv"] == FP8 else {}
    q, qs = tpe.emulate(a, hq, hkv, eps=1e-5, rope_style=c["style"], q_out_dtype=c["q"], **scales)
    try:
        check_against_reference(a, q, qs, hq, hkv, q_dtype=c["q"], kv_dtype=c["kv"], k_scale=scales.get("k_scale"),
                                v_scale=scales.get("v_scale"), eps=1e-5, rope_style=c["style"])
    except AssertionError as e:
        raise AssertionError(f"{e}\nrepro: {c!r}") from None
