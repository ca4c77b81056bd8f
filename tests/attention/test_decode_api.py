"""The Python layer of the decode attention on the CPU (runs in CI): argument checks name the
argument, and a dry run with a stand-in extension shows that every keyword handed to the
bindings exists in csrc/bindings.cpp and carries the expected value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import hpc_attention as ha
from hpc_attention import heuristics
from hpc_attention import paged_decode as dec
from hpc_common import pdl_enabled, set_num_sms

FP8 = torch.float8_e4m3fn
BINDINGS = Path(ha.__file__).parent / "csrc" / "bindings.cpp"


def binding_args() -> dict[str, list[str]]:
    text = BINDINGS.read_text()
    out = {}
    for chunk in text.split("m.def(")[1:]:
        name = re.match(r'\s*"(\w+)"', chunk).group(1)
        out[name] = re.findall(r'py::arg\("(\w+)"\)', chunk)
    return out


class FakeExt:
    def __init__(self):
        self.calls = []
        self.names = binding_args()

    def __getattr__(self, fn):
        if fn not in self.names:
            raise AttributeError(fn)

        def call(**kw):
            assert sorted(kw) == sorted(self.names[fn]), f"{fn}: {sorted(set(kw) ^ set(self.names[fn]))}"
            self.calls.append((fn, kw))

        return call


@pytest.fixture
def fake(monkeypatch):
    ext = FakeExt()
    monkeypatch.setattr(dec._ext, "load", lambda: ext)
    monkeypatch.setattr(dec, "require_hopper", lambda *a, **k: None)
    monkeypatch.setattr(dec, "stream_ptr", lambda device: 0)
    set_num_sms(132)
    yield ext
    set_num_sms(None)


def inputs(B=3, hkv=2, g=4, page=64, pages=10, kv=torch.bfloat16):
    q = torch.zeros(B, hkv * g, 128, dtype=torch.bfloat16)
    k = torch.zeros(pages, page, hkv, 128, dtype=kv)
    v = torch.zeros_like(k)
    pt = torch.zeros(B, 4, dtype=torch.int32)
    lens = torch.tensor([5, 0, 200][:B], dtype=torch.int32)
    return q, k, v, pt, lens


@pytest.mark.parametrize("merge_in_decode", [True, False], ids=["merge_in_decode", "combine_kernel"])
def test_dry_run_passes_every_binding_argument(fake, monkeypatch, merge_in_decode):
    monkeypatch.setattr(heuristics, "MERGE_IN_DECODE", merge_in_decode)
    q, k, v, pt, lens = inputs(page=128, kv=FP8)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, validate=True)
    out = ha.decode(q, k, v, pt, lens, plan, k_scale=0.5, v_scale=torch.tensor([2.0]))
    assert out.shape == (3, 8, 128) and out.dtype == torch.bfloat16
    names = [c[0] for c in fake.calls]
    assert names == ["decode_plan", "paged_decode"] + ([] if merge_in_decode else ["decode_combine"])
    plan_kw, dec_kw = fake.calls[0][1], fake.calls[1][1]
    assert plan_kw["batch"] == 3 and plan_kw["num_bins"] == 132 and plan_kw["max_len"] == 256
    assert plan_kw["static_splits"] == 0 and plan_kw["min_tiles"] >= 1
    assert plan_kw["slot_meta"] == ws.slot_meta.data_ptr()
    assert dec_kw["fp8_kv"] and not dec_kw["fp8_q"] and dec_kw["page_size_log2"] == 7
    assert dec_kw["group"] == 4 and dec_kw["num_kv_heads"] == 2 and dec_kw["num_ctas"] == 132
    assert dec_kw["k_scale"] == 0.5 and dec_kw["k_scale_ptr"] == 0 and dec_kw["v_scale_ptr"] != 0
    assert dec_kw["k_stride_tok"] == 2 * 128 and dec_kw["k_stride_page"] == 128 * 2 * 128
    # merge 2: split tasks merged by the helper warps of the TMA kernel (the cp.async kernel, also the
    # binding's fallback, merges on its consumers whatever the value)
    assert dec_kw["tma_producer"] == dec._use_tma(128, 2, True)
    want_merge = (2 if heuristics.MERGE_ON_HELPER_WARPS else 1) if merge_in_decode else 0
    assert dec_kw["merge"] == want_merge
    assert dec_kw["slot_meta"] == ws.slot_meta.data_ptr() and dec_kw["merge_counts"] == ws.merge_counts.data_ptr()
    assert dec_kw["merge_ml"] == ws.merge_ml.data_ptr() and dec_kw["combine"] == ws.combine.data_ptr()
    assert dec_kw["counters"] == ws.counters.data_ptr() and dec_kw["claim_counter"] == ws.claim_counter.data_ptr()
    assert ws.merge_counts.shape == (ws.caps.slots,) and not ws.merge_counts.any()
    assert ws.merge_ml.shape == (ws.caps.slots, 4, 2) and ws.slot_meta.shape == (ws.caps.slots, 2)
    if not merge_in_decode:
        comb_kw = fake.calls[2][1]
        assert comb_kw["group"] == 4 and comb_kw["partial_o"] == ws.partial_o.data_ptr()


@pytest.mark.parametrize("flag,page,want", [(False, 64, False), (True, 64, True), (True, 16, True),
                                             (True, 8, False)])
def test_tma_producer_flag_and_page_floor(fake, monkeypatch, flag, page, want):
    """heuristics.USE_TMA_PRODUCER asks the binding for the TMA producer, except on pages of
    fewer than 16 tokens (more than 4 boxes per tile): those keep cp.async."""
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", flag)
    q, k, v, pt, lens = inputs(page=page, pages=64)
    pt = torch.zeros(3, 256 // page, dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[1][0] == "paged_decode" and fake.calls[1][1]["tma_producer"] is want


@pytest.mark.parametrize("hkv,want", [(1, False), (4, False), (8, True), (16, True)])
def test_tma_producer_auto_by_kv_heads(fake, monkeypatch, hkv, want):
    """USE_TMA_PRODUCER = "auto": TMA from heuristics.TMA_MIN_KV_HEADS KV heads up."""
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", "auto")
    monkeypatch.setattr(heuristics, "TMA_MIN_KV_HEADS", 8)
    q, k, v, pt, lens = inputs(hkv=hkv, g=1)
    ws = ha.DecodeWorkspace(3, hkv, hkv, 256, "cpu")
    plan = ha.plan_decode(lens, hkv, hkv, workspace=ws)
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[1][1]["tma_producer"] is want


@pytest.mark.parametrize("hkv", [1, 2, 8])
def test_tma_producer_auto_fp8_from_one_head(fake, monkeypatch, hkv):
    """USE_TMA_PRODUCER = "auto" with FP8 KV: TMA from heuristics.TMA_MIN_KV_HEADS_FP8 (1) KV head."""
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", "auto")
    monkeypatch.setattr(heuristics, "TMA_MIN_KV_HEADS", 8)
    monkeypatch.setattr(heuristics, "TMA_MIN_KV_HEADS_FP8", 1)
    q, k, v, pt, lens = inputs(hkv=hkv, g=1, kv=FP8)
    ws = ha.DecodeWorkspace(3, hkv, hkv, 256, "cpu")
    plan = ha.plan_decode(lens, hkv, hkv, workspace=ws)
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[1][1]["tma_producer"] is True


def test_diag_skip_combine_turns_the_merge_off(fake, monkeypatch):
    monkeypatch.setattr(heuristics, "MERGE_IN_DECODE", True)
    monkeypatch.setitem(dec.DIAG, "skip_combine", True)
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    ha.decode(q, k, v, pt, lens, plan)
    assert [c[0] for c in fake.calls] == ["decode_plan", "paged_decode"]
    assert fake.calls[1][1]["merge"] == 0


def test_static_auto_plan_passes_splits(fake):
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto")
    assert plan.static_splits == 22  # ceil(132 / (3 * 2))
    assert fake.calls[0][1]["static_splits"] == 22


def test_plan_errors(fake):
    lens = torch.tensor([5, 9], dtype=torch.int32)
    with pytest.raises(TypeError, match="kv_lens must be int32"):
        ha.plan_decode(lens.long(), 1, 8, max_kv_len=64)
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        ha.plan_decode(lens, 3, 8, max_kv_len=64)
    with pytest.raises(ValueError, match="group"):
        ha.plan_decode(lens, 1, 32, max_kv_len=64)
    with pytest.raises(ValueError, match="max_kv_len"):
        ha.plan_decode(lens, 1, 8)
    ws = ha.DecodeWorkspace(1, 1, 8, 64, "cpu")
    with pytest.raises(ValueError, match="max_batch"):
        ha.plan_decode(lens, 1, 8, workspace=ws)
    ws = ha.DecodeWorkspace(2, 1, 8, 64, "cpu")
    with pytest.raises(ValueError, match=r"kv_lens\[1\] = 9 is outside"):
        ha.plan_decode(lens, 1, 8, workspace=ws, max_kv_len=8)
    with pytest.raises(ValueError, match="too small for 200 static splits"):
        ha.plan_decode(lens, 1, 8, workspace=ws, static_splits=200)
    with pytest.raises(ValueError, match="heads"):
        ha.plan_decode(lens, 2, 8, workspace=ws)


def test_decode_errors_name_the_argument(fake):
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    cases = [
        (dict(q=q.float()), TypeError, "q must be bfloat16 or float8_e4m3fn"),
        (dict(k_cache=k[..., :64]), ValueError, "head dim"),
        (dict(v_cache=v.to(FP8)), TypeError, "v_cache must be bfloat16"),
        (dict(v_cache=v[:5]), ValueError, "v_cache shape"),
        (dict(page_table=pt.long()), TypeError, "page_table must be int32"),
        (dict(page_table=pt[:2]), ValueError, "page_table must have shape"),
        (dict(page_table=pt[:, :1].contiguous()), ValueError, "page_table holds 1 pages"),
        (dict(kv_lens=lens.clone()), ValueError, "another kv_lens"),
        (dict(q=q.to(FP8)), ValueError, "FP8 q needs q_scale"),
        (dict(q_scale=torch.ones(3, 8)), ValueError, "q_scale is only for FP8 q"),
        (dict(out=torch.empty(3, 8, 128)), TypeError, "out must be bfloat16"),
        (dict(out=torch.empty(3, 8, 64, dtype=torch.bfloat16)), ValueError, "out must have shape"),
        (dict(k_cache=torch.zeros(10, 48, 2, 128, dtype=torch.bfloat16),
              v_cache=torch.zeros(10, 48, 2, 128, dtype=torch.bfloat16)), ValueError, "power of two"),
        (dict(q=torch.zeros(3, 4, 128, dtype=torch.bfloat16)), ValueError, "plan was built for 8/2 heads"),
        (dict(k_scale=torch.ones(2)), ValueError, "k_scale must hold one value"),
        (dict(plan="nope"), TypeError, "plan must be a DecodePlan"),
    ]
    for change, exc, msg in cases:
        args = dict(q=q, k_cache=k, v_cache=v, page_table=pt, kv_lens=lens, plan=plan)
        extra = {}
        for key in ("q_scale", "out", "k_scale"):
            if key in change:
                extra[key] = change.pop(key)
        args.update(change)
        with pytest.raises(exc, match=msg):
            ha.decode(**args, **extra)


def test_validate_rejects_bad_page_ids(fake):
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    pt = pt.clone()
    pt[2, 3] = 10  # request 2 has 200 tokens: pages 0..3 are read; 10 pages exist
    with pytest.raises(ValueError, match=r"page_table\[2, 3\] = 10"):
        ha.decode(q, k, v, pt, lens, plan, validate=True)
    pt[2, 3] = 9
    ha.decode(q, k, v, pt, lens, plan, validate=True)
    pt[0, 3] = -4  # past request 0's length: never read, so allowed
    ha.decode(q, k, v, pt, lens, plan, validate=True)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_error_new_tokens(fake, bad):
    q, k, v, pt, lens = inputs()
    plan = ha.plan_decode(lens, 2, 8, workspace=ha.DecodeWorkspace(3, 2, 8, 256, "cpu"))
    with pytest.raises(ValueError, match="new_tokens must be None or an int >= 1"):
        ha.decode(q, k, v, pt, lens, plan, new_tokens=bad)


def test_new_tokens_loads_early_only_when_safe(fake, monkeypatch):
    """decode(new_tokens=n) hands n to the kernel (early_kv_tokens) only with PDL on, the TMA producer, and not on
    the first decode after plan_decode into the workspace (the planner may be the kernel right before it)."""
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", True)
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    with pdl_enabled(True):
        for _ in range(2):
            ha.decode(q, k, v, pt, lens, plan, new_tokens=2)
        ha.decode(q, k, v, pt, lens, plan)  # no promise: nothing early
        plan = ha.plan_decode(lens, 2, 8, workspace=ws)  # a new plan: the next call is the first again
        ha.decode(q, k, v, pt, lens, plan, new_tokens=3)
        ha.decode(q, k, v, pt, lens, plan, new_tokens=3)
        monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", False)
        ha.decode(q, k, v, pt, lens, plan, new_tokens=3)
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", True)
    with pdl_enabled(False):
        ha.decode(q, k, v, pt, lens, plan, new_tokens=3)
    got = [kw["early_kv_tokens"] for name, kw in fake.calls if name == "paged_decode"]
    assert got == [0, 2, 0, 0, 3, 0, 0]
