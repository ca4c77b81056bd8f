"""The Python layer of the decode attention on the CPU (runs in CI): argument checks name the argument, and a
dry run with a stand-in extension shows that the ops fill every field of the params structs the binding
exports (csrc/bindings.cpp), that the binding exports every field of the structs (decode_params.h), and that
each carries the expected value."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions, _ops, heuristics
from hpc_common import pdl_enabled, set_num_sms

dec = importlib.import_module("hpc_attention.decode")  # the module (hpc_attention.decode is the function)
FP8 = torch.float8_e4m3fn
PKG = Path(ha.__file__).parent
BINDINGS = PKG / "csrc" / "bindings.cpp"
PARAMS_H = PKG / "include" / "hpc_attention" / "decode_params.h"
# Fields the host fills itself: the tensor maps (csrc/decode_dispatch.cu) and the line order (set_line_order).
HOST_FILLED = {"DecodeParams": {"k_map", "v_map"},
               "DecodePlanParams": {"line_heads", "line_batch", "line_batch_magic", "cut_bins"}}


def binding_fields() -> dict[str, list[str]]:
    text = BINDINGS.read_text()
    cls = dict(re.findall(r'py::class_<(\w+)> (\w+)\(m, "\w+"\)', text))
    var_to_cls = {v: k for k, v in cls.items()}
    out: dict[str, list[str]] = {c: [] for c in cls}
    for var, name in re.findall(r"HPC_FIELD\((plan|dec), (\w+)\)", text):
        out[var_to_cls[var]].append(name)
    return out


def binding_args() -> dict[str, list[str]]:
    text = BINDINGS.read_text()
    out = {}
    for chunk in text.split("m.def(")[1:]:
        name = re.match(r'\s*"(\w+)"', chunk).group(1)
        out[name] = re.findall(r'py::arg\("(\w+)"\)', chunk)
    return out


def struct_fields(name: str) -> list[str]:
    text = PARAMS_H.read_text()
    body = re.search(r"struct %s \{(.*?)\n\};" % name, text, re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        first, *rest = decl.split(",")
        names.append(first.split()[-1].lstrip("*"))
        names += [r.strip().lstrip("*") for r in rest]
    return names


@pytest.mark.parametrize("struct", ["DecodeParams", "DecodePlanParams"])
def test_binding_exports_every_struct_field(struct):
    want = set(struct_fields(struct)) - HOST_FILLED[struct]
    got = binding_fields()[struct]
    assert len(got) == len(set(got)), "a field exported twice"
    assert set(got) == want, sorted(set(got) ^ want)


class FakeStruct:
    """A params struct of the binding: only its exported fields may be set."""

    fields: list[str] = []

    def __init__(self):
        object.__setattr__(self, "values", {})

    def __setattr__(self, name, value):
        if name not in self.fields:
            raise AttributeError(f"{type(self).__name__} has no field {name}")
        assert isinstance(value, (int, float)), (name, value)  # ints (pointers too) and floats cross the binding
        self.values[name] = value

    def __getattr__(self, name):
        return self.values[name]


class FakeExt:
    def __init__(self):
        self.calls = []
        self.args = binding_args()
        fields = binding_fields()
        self.DecodeParams = type("DecodeParams", (FakeStruct,), {"fields": fields["DecodeParams"]})
        self.DecodePlanParams = type("DecodePlanParams", (FakeStruct,), {"fields": fields["DecodePlanParams"]})

    def __getattr__(self, fn):
        if fn not in self.args:
            raise AttributeError(fn)

        def call(params, **kw):
            assert sorted(["params", *kw]) == sorted(self.args[fn]), f"{fn}: {sorted(set(kw) ^ set(self.args[fn]))}"
            missing = set(params.fields) - set(params.values)
            assert not missing, f"{fn}: fields left unset: {sorted(missing)}"
            self.calls.append((fn, {**params.values, **kw}))
            return None

        return call


@pytest.fixture
def fake(monkeypatch):
    ext = FakeExt()
    monkeypatch.setattr(_ops._ext, "load", lambda: ext)
    monkeypatch.setattr(dec, "require_hopper", lambda *a, **k: None)
    monkeypatch.setattr(_ops, "stream_ptr", lambda device: 0)
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


@pytest.mark.parametrize("merge", ["helpers", "consumers", "combine"])
def test_dry_run_fills_every_binding_field(fake, merge):
    q, k, v, pt, lens = inputs(page=128, kv=FP8)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, validate=True, options=DecodeOptions(merge=merge))
    out = ha.decode(q, k, v, pt, lens, plan, k_scale=0.5, v_scale=torch.tensor([2.0]))
    assert out.shape == (3, 8, 128) and out.dtype == torch.bfloat16
    assert [c[0] for c in fake.calls] == ["decode_plan", "decode"]
    plan_kw, dec_kw = fake.calls[0][1], fake.calls[1][1]
    assert plan_kw["batch"] == 3 and plan_kw["num_bins"] == 132 and plan_kw["max_len"] == 256
    assert plan_kw["static_splits"] == 0 and plan_kw["min_tiles"] >= 1
    assert plan_kw["slot_meta"] == ws.slot_meta.data_ptr() and plan_kw["page_table"] == 0
    assert plan_kw["head_major"] is True and plan_kw["cut_to_heads"] is True
    assert dec_kw["fp8_kv"] and not dec_kw["fp8_q"] and dec_kw["page_size_log2"] == 7
    assert dec_kw["group"] == 4 and dec_kw["num_kv_heads"] == 2 and dec_kw["num_ctas"] == 132
    assert dec_kw["combine_ctas"] == 132 == plan.combine_ctas
    assert dec_kw["k_scale"] == 0.5 and dec_kw["k_scale_ptr"] == 0 and dec_kw["v_scale_ptr"] != 0
    assert dec_kw["k_stride_tok"] == 2 * 128 and dec_kw["k_stride_page"] == 128 * 2 * 128
    assert dec_kw["tma"] is True and plan.producer == "tma"
    assert dec_kw["merge"] == {"combine": 0, "consumers": 1, "helpers": 2}[merge]
    assert dec_kw["bin_heads"] == 2 == plan.bin_heads and plan.head_major
    assert dec_kw["slot_meta"] == ws.slot_meta.data_ptr() and dec_kw["merge_counts"] == ws.merge_counts.data_ptr()
    assert dec_kw["combine"] == ws.combine.data_ptr() and dec_kw["partial_o"] == ws.partial_o.data_ptr()
    assert dec_kw["counters"] == ws.counters.data_ptr() and dec_kw["claim_counter"] == ws.claim_counter.data_ptr()
    assert dec_kw["bin_first_page"] == 0 and dec_kw["early_kv_tokens"] == 0
    assert ws.merge_counts.shape == (ws.caps.slots,) and not ws.merge_counts.any()
    assert ws.slot_meta.shape == (ws.caps.slots, 2)


def test_defaults_resolved_into_the_plan(fake):
    """plan_decode resolves every policy from heuristics.py (pure functions of the shape) into the plan."""
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    pol = heuristics.resolve(None, 3, 2, 132, 0, None)
    assert (plan.min_tiles, plan.task_cost, plan.cost_cap, plan.tail_percent, plan.tail_bin) == (
        pol.min_tiles, pol.task_cost, pol.cost_cap, pol.tail_percent, pol.tail_bin)
    assert (plan.producer, plan.merge, plan.head_major, plan.cut_to_heads) == (
        heuristics.PRODUCER, heuristics.MERGE, heuristics.HEAD_MAJOR_LINE, heuristics.HEAD_MAJOR_CUT_TO_HEADS)
    one = ha.plan_decode(lens[:1], 1, 8, workspace=ha.DecodeWorkspace(1, 1, 8, 256, "cpu"))
    assert not one.head_major and one.bin_heads == 1  # one KV head: the request-major line


def test_options_reach_the_plan(fake):
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    opts = DecodeOptions(min_tiles=3, task_cost=7, cost_cap=False, head_major=False, producer="cp_async",
                         merge="combine")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, options=opts)
    kw = fake.calls[-1][1]
    assert (kw["min_tiles"], kw["task_cost"], kw["cost_cap"], kw["head_major"]) == (3, 7, 0, False)
    assert (plan.producer, plan.merge, plan.bin_heads) == ("cp_async", "combine", 1)
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(bins_by_head=False))
    assert plan.head_major and plan.bin_heads == 1
    with pytest.raises(TypeError, match="options must be a DecodeOptions"):
        ha.plan_decode(lens, 2, 8, workspace=ws, options={"min_tiles": 3})
    with pytest.raises(ValueError, match="producer must be"):
        ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(producer="bulk"))
    with pytest.raises(ValueError, match="merge must be one of"):
        ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(merge="kernel"))


@pytest.mark.parametrize("producer,page,want", [("cp_async", 64, False), ("tma", 64, True), ("tma", 16, True),
                                                 ("tma", 8, False)])
def test_tma_producer_and_page_floor(fake, producer, page, want):
    """The plan's producer reaches the binding, except that pages of fewer than 16 tokens (more than 4 boxes
    per tile) keep cp.async."""
    q, k, v, pt, lens = inputs(page=page, pages=64)
    pt = torch.zeros(3, 256 // page, dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(producer=producer))
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[1][0] == "decode" and fake.calls[1][1]["tma"] is want


@pytest.mark.parametrize("hkv", [1, 2, 8])
@pytest.mark.parametrize("kv", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_tma_producer_by_default_at_every_head_count(fake, hkv, kv):
    q, k, v, pt, lens = inputs(hkv=hkv, g=1, kv=kv)
    ws = ha.DecodeWorkspace(3, hkv, hkv, 256, "cpu")
    plan = ha.plan_decode(lens, hkv, hkv, workspace=ws, kv_dtype=kv)
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[1][1]["tma"] is True


def test_static_auto_plan_passes_splits(fake):
    q, k, v, pt, lens = inputs()
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto")
    assert plan.static_splits == 22  # ceil(132 / (3 * 2))
    assert fake.calls[0][1]["static_splits"] == 22 and fake.calls[0][1]["task_cost"] == 0
    assert not plan.head_major and plan.tail_percent == 0 and plan.task_cost == 0


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


def test_new_tokens_loads_early_only_when_safe(fake):
    """decode(new_tokens=n) hands n to the kernel (early_kv_tokens) only with PDL on, the TMA producer, and not on
    the first decode after plan_decode into the workspace (the planner may be the kernel right before it)."""
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
        cp = ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(producer="cp_async"))
        ha.decode(q, k, v, pt, lens, cp, new_tokens=3)
        ha.decode(q, k, v, pt, lens, cp, new_tokens=3)
    with pdl_enabled(False):
        ha.decode(q, k, v, pt, lens, plan, new_tokens=3)
    got = [kw["early_kv_tokens"] for name, kw in fake.calls if name == "decode"]
    assert got == [0, 2, 0, 0, 3, 0, 0, 0]
