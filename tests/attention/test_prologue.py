"""The fused attention prologue (qk_norm_rope_store).

CPU (runs in CI): the float64 reference against independent formulas (RoPE as complex rotation: norm
kept, position 0 the identity, rotations compose; RMSNorm against torch's), the reference's cache
write and FP8 rules, argument checks that name the argument, and a dry run with a stand-in extension
that shows every field of PrologueParams is filled and exported, the benchmark's case table. Also the
case builder and the reference check that test_prologue_gpu.py (the kernel on the GPU) and
test_prologue_emulated.py (the kernel's source run on the CPU) share.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

import hpc_attention as ha
from hpc_attention import reference as ref
from hpc_common import pdl_enabled

pro = importlib.import_module("hpc_attention.prologue")
FP8 = torch.float8_e4m3fn
D = 128
PKG = Path(ha.__file__).parent
BINDINGS = PKG / "csrc" / "bindings.cpp"
PARAMS_H = PKG / "include" / "hpc_attention" / "prologue_params.h"


# --------------------------------------------------------------------------------------------------
# Shared case builder (CPU or GPU)
# --------------------------------------------------------------------------------------------------

def make_inputs(T, hq, hkv, *, rotary_dim=128, kv=torch.bfloat16, page=64, num_pages=None, seed=0, norm=True,
                cs_dtype=torch.float32, idx_dtype=torch.int64, max_pos=4096, pad_every=0, device="cpu"):
    """qkv, positions, cos_sin_cache, caches (zeros), slot_mapping (a random permutation of slots,
    every pad_every-th token padding), norm weights; everything on `device`."""
    g = torch.Generator().manual_seed(seed)
    num_pages = num_pages or max(2, -(-2 * T // page))
    qkv = (torch.randn(T, (hq + 2 * hkv) * D, generator=g) * 2).to(torch.bfloat16)
    positions = torch.randint(0, max_pos, (T,), generator=g).to(idx_dtype)
    cs = ref.rope_cos_sin_cache(max_pos, rotary_dim, dtype=cs_dtype)
    slots = torch.randperm(num_pages * page, generator=g)[:T].to(idx_dtype)
    if pad_every:
        slots[::pad_every] = -1
    k = torch.zeros(num_pages, page, hkv, D, dtype=kv)
    v = torch.zeros_like(k)
    wq = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16) if norm else None
    wk = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16) if norm else None
    mv = lambda t: t.to(device) if t is not None else None  # noqa: E731
    return dict(qkv=mv(qkv), positions=mv(positions), cos_sin_cache=mv(cs), k_cache=mv(k), v_cache=mv(v),
                slot_mapping=mv(slots), q_norm_weight=mv(wq), k_norm_weight=mv(wk))


# --------------------------------------------------------------------------------------------------
# CPU: the reference against independent formulas
# --------------------------------------------------------------------------------------------------

def complex_rotate(x, positions, rotary_dim, style, base=10000.0):
    """RoPE as multiplication of complex pairs by exp(i p f_j), from the angles (not the cache)."""
    x = x.to(torch.float64)
    half = rotary_dim // 2
    f = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    ang = positions.to(torch.float64)[:, None, None] * f
    rot = torch.polar(torch.ones_like(ang), ang)
    if style == "neox":
        z = torch.complex(x[..., :half], x[..., half:rotary_dim]) * rot
        out = torch.cat([z.real, z.imag], -1)
    else:
        z = torch.complex(x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]) * rot
        out = torch.stack([z.real, z.imag], -1).flatten(-2)
    return torch.cat([out, x[..., rotary_dim:]], -1)


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("rotary_dim", [2, 64, 96, 100, 128])
def test_rope_reference_is_complex_rotation(style, rotary_dim):
    g = torch.Generator().manual_seed(rotary_dim)
    x = torch.randn(7, 3, D, generator=g, dtype=torch.float64)
    pos = torch.tensor([0, 1, 2, 17, 1000, 4095, 333])
    cs = ref.rope_cos_sin_cache(4096, rotary_dim, dtype=torch.float64)
    got = ref.rope_reference(x, pos, cs, rotary_dim, style)
    torch.testing.assert_close(got, complex_rotate(x, pos, rotary_dim, style), rtol=0, atol=1e-10)
    # a rotation keeps the norm of the whole head, and the values past rotary_dim untouched
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1), rtol=1e-12, atol=0)
    assert torch.equal(got[..., rotary_dim:], x[..., rotary_dim:])
    # position 0 is the identity
    assert torch.equal(got[0], x[0])


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_rope_reference_composes(style):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(5, 2, D, generator=g, dtype=torch.float64)
    cs = ref.rope_cos_sin_cache(2048, 64, dtype=torch.float64)
    a, b = torch.tensor([3, 100, 0, 511, 1]), torch.tensor([5, 900, 7, 511, 1000])
    twice = ref.rope_reference(ref.rope_reference(x, a, cs, 64, style), b, cs, 64, style)
    torch.testing.assert_close(twice, ref.rope_reference(x, a + b, cs, 64, style), rtol=0, atol=1e-10)


def test_rope_reference_rejects_unknown_style():
    with pytest.raises(ValueError, match="style"):
        ref.rope_reference(torch.zeros(1, 1, D), torch.zeros(1, dtype=torch.long),
                           ref.rope_cos_sin_cache(4, 64), 64, "llama")


def test_cos_sin_cache_layout():
    cs = ref.rope_cos_sin_cache(16, 8, base=100.0, dtype=torch.float64)
    assert cs.shape == (16, 8)
    f = 100.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    torch.testing.assert_close(cs[5, :4], torch.cos(5 * f))
    torch.testing.assert_close(cs[5, 4:], torch.sin(5 * f))


@pytest.mark.parametrize("eps", [1e-6, 1e-5, 0.5])
def test_rms_norm_reference(eps):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 3, D, generator=g, dtype=torch.float64) * 3
    w = torch.rand(D, generator=g, dtype=torch.float64) + 0.5
    got = ref.rms_norm_reference(x, w, eps)
    torch.testing.assert_close(got, torch.nn.functional.rms_norm(x, (D,), w, eps), rtol=1e-12, atol=1e-12)
    # unit weights: the mean square of the result is ms / (ms + eps)
    ms = x.square().mean(-1)
    torch.testing.assert_close(ref.rms_norm_reference(x, torch.ones(D), eps).square().mean(-1), ms / (ms + eps))
    assert torch.equal(ref.rms_norm_reference(x, None, eps), x)


@pytest.mark.parametrize("kv", [torch.bfloat16, FP8])
@pytest.mark.parametrize("q_dtype", [torch.bfloat16, FP8])
def test_store_reference_writes_slots_and_quantises(kv, q_dtype):
    T, hq, hkv = 9, 8, 2
    a = make_inputs(T, hq, hkv, kv=kv, page=4, num_pages=8, pad_every=4, rotary_dim=64)
    scales = dict(k_scale=0.05, v_scale=torch.tensor([0.05])) if kv == FP8 else {}
    poison = a["k_cache"].view(torch.uint8).fill_(0x7F).clone()  # an E4M3 NaN / a BF16 NaN pair of bytes
    a["v_cache"].view(torch.uint8).fill_(0x7F)
    q_out, q_scale = ref.qk_norm_rope_store_reference(**a, num_qo_heads=hq, num_kv_heads=hkv, eps=1e-5,
                                                      rope_style="gptj", q_out_dtype=q_dtype, **scales)
    q, k, v = ref.prologue_reference(a["qkv"], a["positions"], a["cos_sin_cache"], num_qo_heads=hq,
                                     num_kv_heads=hkv, q_norm_weight=a["q_norm_weight"],
                                     k_norm_weight=a["k_norm_weight"], eps=1e-5, rope_style="gptj")
    slots = a["slot_mapping"].tolist()
    for t, s in enumerate(slots):
        if s < 0:
            continue
        page, off = divmod(s, 4)
        kk, vv = a["k_cache"][page, off].to(torch.float64), a["v_cache"][page, off].to(torch.float64)
        if kv == FP8:
            kk, vv = kk * 0.05, vv * 0.05
            # within half an E4M3 step (relative 2^-4) of the exact value, or the subnormal step
            assert ((kk - k[t]).abs() <= k[t].abs() / 16 + 2 ** -10 * 0.05).all()
            assert ((vv - v[t]).abs() <= v[t].abs() / 16 + 2 ** -10 * 0.05).all()
        else:
            torch.testing.assert_close(kk, k[t].to(torch.bfloat16).to(torch.float64), rtol=0, atol=0)
            torch.testing.assert_close(vv, v[t].to(torch.bfloat16).to(torch.float64), rtol=0, atol=0)
    # slots not in slot_mapping keep their bytes
    written = torch.zeros(8 * 4, dtype=torch.bool)
    written[[s for s in slots if s >= 0]] = True
    untouched = a["k_cache"].view(torch.uint8).reshape(32, -1)[~written]
    assert torch.equal(untouched, poison.reshape(32, -1)[~written])
    assert q_out.dtype == q_dtype and q_out.shape == (T, hq, D)
    if q_dtype == FP8:
        assert q_scale.shape == (T, hq) and q_scale.dtype == torch.float32
        torch.testing.assert_close(q_scale.double(), q.abs().amax(-1) / 448, rtol=1e-6, atol=0)
        deq = q_out.to(torch.float64) * q_scale.double()[..., None]
        assert ((deq - q).abs() <= q.abs() / 16 + q_scale.double()[..., None] * 2 ** -9).all()
    else:
        assert q_scale is None


# --------------------------------------------------------------------------------------------------
# CPU: argument checks name the argument
# --------------------------------------------------------------------------------------------------

def call(a, **kw):
    args = dict(num_qo_heads=8, num_kv_heads=1)
    args.update(kw)
    return ha.qk_norm_rope_store(a["qkv"], a["positions"], a["cos_sin_cache"], a["k_cache"], a["v_cache"],
                                 a["slot_mapping"], q_norm_weight=a["q_norm_weight"],
                                 k_norm_weight=a["k_norm_weight"], **args)


def base(**kw):
    return make_inputs(4, 8, 1, page=16, num_pages=4, **kw)


def _replace(a, **kw):
    b = dict(a)
    b.update(kw)
    return b


BAD = [
    (lambda a: (_replace(a, qkv=a["qkv"].float()), {}), TypeError, "qkv must be bfloat16"),
    (lambda a: (_replace(a, qkv=a["qkv"][:, :-128]), {}), ValueError, "qkv must have"),
    (lambda a: (a, dict(num_qo_heads=12, num_kv_heads=1)), ValueError, "qkv must have"),
    (lambda a: (a, dict(num_qo_heads=7, num_kv_heads=2)), ValueError, "multiple of num_kv_heads"),
    (lambda a: (a, dict(num_qo_heads=0)), ValueError, "num_qo_heads must be an int"),
    (lambda a: (a, dict(num_qo_heads=34, num_kv_heads=2)), ValueError, "GQA group"),
    (lambda a: (_replace(a, positions=a["positions"].float()), {}), TypeError, "positions must be int32 or int64"),
    (lambda a: (_replace(a, positions=a["positions"][:3]), {}), ValueError, "positions must have shape"),
    (lambda a: (_replace(a, slot_mapping=a["slot_mapping"].to(torch.int16)), {}), TypeError, "slot_mapping must be"),
    (lambda a: (_replace(a, slot_mapping=a["slot_mapping"][:2]), {}), ValueError, "slot_mapping must have shape"),
    (lambda a: (_replace(a, cos_sin_cache=a["cos_sin_cache"].half()), {}), TypeError, "cos_sin_cache must be"),
    (lambda a: (a, dict(rotary_dim=64)), ValueError, "cos_sin_cache must have rotary_dim = 64"),
    (lambda a: (_replace(a, cos_sin_cache=a["cos_sin_cache"][:, :63]), {}), ValueError, "rotary_dim must be an even"),
    (lambda a: (a, dict(rotary_dim=130)), ValueError, "rotary_dim must be an even"),
    (lambda a: (a, dict(rotary_dim=0)), ValueError, "rotary_dim must be an even"),
    (lambda a: (a, dict(rope_style="llama")), ValueError, "rope_style"),
    (lambda a: (a, dict(eps=0.0)), ValueError, "eps must be"),
    (lambda a: (a, dict(eps=-1e-6)), ValueError, "eps must be"),
    (lambda a: (a, dict(eps=float("nan"))), ValueError, "eps must be"),
    (lambda a: (_replace(a, k_cache=a["k_cache"][..., :64]), {}), ValueError, "k_cache head dim"),
    (lambda a: (_replace(a, k_cache=torch.zeros(4, 16, 2, D, dtype=torch.bfloat16)), {}), ValueError,
     "k_cache has 2 KV heads"),
    (lambda a: (_replace(a, v_cache=torch.zeros(5, 16, 1, D, dtype=torch.bfloat16)), {}), ValueError,
     "v_cache shape"),
    (lambda a: (_replace(a, v_cache=a["v_cache"].to(FP8)), {}), TypeError, "v_cache must be bfloat16"),
    (lambda a: (_replace(a, k_cache=a["k_cache"].float(), v_cache=a["v_cache"].float()), {}), TypeError,
     "k_cache must be"),
    (lambda a: (_replace(a, k_cache=a["k_cache"][:, :, :, None]), {}), ValueError, "k_cache must be 4-D"),
    (lambda a: (_replace(a, q_norm_weight=torch.ones(64, dtype=torch.bfloat16)), {}), ValueError,
     "q_norm_weight must have shape"),
    (lambda a: (_replace(a, k_norm_weight=torch.ones(D, dtype=torch.float16)), {}), TypeError,
     "k_norm_weight must be"),
    (lambda a: (_replace(a, k_norm_weight=torch.ones(D)), {}), TypeError, "the same dtype"),
    (lambda a: (a, dict(q_out_dtype=torch.float16)), ValueError, "q_out_dtype"),
    (lambda a: (a, dict(k_scale=1.0)), ValueError, "k_scale is only for FP8 caches"),
    (lambda a: (_fp8(a), dict(v_scale=1.0)), ValueError, "FP8 caches need k_scale"),
    (lambda a: (_fp8(a), dict(k_scale=1.0)), ValueError, "FP8 caches need v_scale"),
    (lambda a: (_fp8(a), dict(k_scale=0.0, v_scale=1.0)), ValueError, "k_scale must be a finite positive"),
    (lambda a: (_fp8(a), dict(k_scale=torch.ones(2), v_scale=1.0)), ValueError, "k_scale must hold one value"),
    (lambda a: (_fp8(a), dict(k_scale=1.0, v_scale=torch.ones(1, dtype=torch.float64))), TypeError,
     "v_scale must be float32"),
    (lambda a: (a, dict(out_q=torch.empty(4, 8, D, dtype=FP8))), TypeError, "out_q must be bfloat16"),
    (lambda a: (a, dict(out_q=torch.empty(4, 7, D, dtype=torch.bfloat16))), ValueError, "out_q must have shape"),
    (lambda a: (a, dict(out_q=torch.empty(4, 8, D + 4, dtype=torch.bfloat16)[:, :, :D])), ValueError,
     "out_q strides"),
    (lambda a: (a, dict(out_q_scale=torch.empty(4, 8))), ValueError, "out_q_scale is only for FP8 Q"),
    (lambda a: (a, dict(q_out_dtype=FP8, out_q_scale=torch.empty(4, 8, dtype=torch.float64))), TypeError,
     "out_q_scale must be float32"),
    (lambda a: (a, dict(q_out_dtype=FP8, out_q_scale=torch.empty(4, 1))), ValueError, "out_q_scale must have shape"),
    (lambda a: (_replace(a, qkv=torch.zeros(4, 10 * D + 4, dtype=torch.bfloat16)[:, :10 * D]), {}), ValueError,
     "row stride"),
    (lambda a: (_replace(a, k_cache=torch.zeros(4, 16, 1, D + 1, dtype=torch.bfloat16)[..., :D],
                         v_cache=torch.zeros(4, 16, 1, D + 1, dtype=torch.bfloat16)[..., :D]), {}), ValueError,
     "k_cache strides"),
    # host validation (default when not capturing a CUDA graph)
    (lambda a: (_replace(a, slot_mapping=torch.tensor([0, 1, 64, 3])), {}), ValueError,
     r"slot_mapping\[2\] = 64 is not a slot"),
    (lambda a: (_replace(a, slot_mapping=torch.tensor([5, -1, 5, 3], dtype=torch.int32)), {}), ValueError,
     "slot 5 appears more than once"),
    (lambda a: (_replace(a, positions=torch.tensor([0, 4096, 1, 2])), {}), ValueError,
     r"positions\[1\] = 4096 is outside"),
    (lambda a: (_replace(a, positions=torch.tensor([0, -3, 1, 2], dtype=torch.int32)), {}), ValueError,
     r"positions\[1\] = -3"),
]


def _fp8(a):
    return _replace(a, k_cache=a["k_cache"].to(FP8), v_cache=a["v_cache"].to(FP8))


@pytest.mark.parametrize("i", range(len(BAD)))
def test_bad_arguments_raise_naming_them(i):
    make, exc, msg = BAD[i]
    a, kw = make(base())
    with pytest.raises(exc, match=msg):
        call(a, **kw)


def test_valid_arguments_reach_the_device_check():
    """Every check passes on good CPU inputs (negative slots are padding, not errors); the call then stops at
    the Hopper check, before any kernel."""
    a = base()
    a["slot_mapping"][1] = -1
    with pytest.raises(ValueError, match="qkv must be a CUDA tensor"):
        call(a)
    with pytest.raises(ValueError, match="qkv must be a CUDA tensor"):
        call(_fp8(a), k_scale=0.5, v_scale=torch.tensor([2.0]), q_out_dtype=FP8, rope_style="gptj")
    # out-of-range ids pass when validation is off: the kernel skips / clamps them on the device
    bad = _replace(a, slot_mapping=torch.tensor([0, 1, 64, 3]), positions=torch.tensor([0, 9999, 1, 2]))
    with pytest.raises(ValueError, match="qkv must be a CUDA tensor"):
        call(bad, validate=False)


# --------------------------------------------------------------------------------------------------
# CPU: the dry run fills every field the binding exports
# --------------------------------------------------------------------------------------------------

def binding_fields() -> list[str]:
    return re.findall(r"HPC_FIELD\(pro, (\w+)\)", BINDINGS.read_text())


def struct_fields() -> list[str]:
    body = re.search(r"struct PrologueParams \{(.*?)\n\};", PARAMS_H.read_text(), re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    names = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if decl:
            first, *rest = decl.split(",")
            names += [first.split()[-1].lstrip("*"), *(r.strip().lstrip("*") for r in rest)]
    return names


def test_binding_exports_every_prologue_field():
    got = binding_fields()
    assert len(got) == len(set(got)), "a field exported twice"
    assert set(got) == set(struct_fields()), sorted(set(got) ^ set(struct_fields()))


class FakeParams:
    fields = binding_fields()

    def __init__(self):
        object.__setattr__(self, "values", {})

    def __setattr__(self, name, value):
        if name not in self.fields:
            raise AttributeError(f"PrologueParams has no field {name}")
        assert isinstance(value, (int, float)), (name, value)
        self.values[name] = value


class FakeExt:
    PrologueParams = FakeParams

    def __init__(self):
        self.calls = []

    def qk_norm_rope_store(self, params, **kw):
        assert sorted(kw) == ["fp8_kv", "fp8_q", "pdl", "stream"]
        missing = set(params.fields) - set(params.values)
        if "q_scale" in params.values and params.values["q_scale"] == 0:
            missing -= {"q_scale_stride_t", "q_scale_stride_h"}  # BF16 Q: no scale tensor
        assert not missing, f"fields left unset: {sorted(missing)}"
        self.calls.append({**params.values, **kw})


@pytest.fixture
def fake(monkeypatch):
    ext = FakeExt()
    monkeypatch.setattr(pro._ext, "load", lambda: ext)
    monkeypatch.setattr(pro, "require_hopper", lambda *a, **k: None)
    monkeypatch.setattr(pro, "stream_ptr", lambda device: 0)
    return ext


@pytest.mark.parametrize("fp8", [False, True])
def test_dry_run_fills_every_field(fake, fp8):
    a = make_inputs(5, 16, 2, page=16, num_pages=4, rotary_dim=64, idx_dtype=torch.int32, cs_dtype=torch.bfloat16)
    if fp8:
        a = _fp8(a)
    kw = dict(k_scale=0.5, v_scale=torch.tensor([2.0]), q_out_dtype=FP8) if fp8 else {}
    with pdl_enabled(True):
        q, qs = ha.qk_norm_rope_store(a["qkv"], a["positions"], a["cos_sin_cache"], a["k_cache"], a["v_cache"],
                                      a["slot_mapping"], num_qo_heads=16, num_kv_heads=2,
                                      q_norm_weight=a["q_norm_weight"], eps=1e-5, rope_style="gptj", **kw)
    assert q.shape == (5, 16, D) and q.dtype == (FP8 if fp8 else torch.bfloat16)
    assert (qs is not None) == fp8
    (c,) = fake.calls
    assert c["fp8_kv"] == fp8 and c["fp8_q"] == fp8 and c["pdl"] is True
    assert c["num_tokens"] == 5 and c["num_qo_heads"] == 16 and c["num_kv_heads"] == 2
    assert c["rotary_dim"] == 64 and c["neox"] == 0 and c["eps"] == 1e-5 and c["max_pos"] == 4096
    assert c["positions_i64"] == 0 and c["slots_i64"] == 0 and c["cos_sin_f32"] == 0 and c["norm_f32"] == 0
    assert c["k_norm_weight"] == 0 and c["q_norm_weight"] == a["q_norm_weight"].data_ptr()
    assert c["num_slots"] == 64 and c["page_size"] == 16 and c["qkv_stride_t"] == 20 * D
    assert (c["k_stride_page"], c["k_stride_tok"], c["k_stride_head"]) == (16 * 2 * D, 2 * D, D)
    assert (c["q_stride_t"], c["q_stride_h"]) == (16 * D, D)
    if fp8:
        assert c["k_scale"] == 0.5 and c["k_scale_ptr"] == 0 and c["v_scale_ptr"] != 0
        assert c["q_scale"] == qs.data_ptr() and (c["q_scale_stride_t"], c["q_scale_stride_h"]) == (16, 1)
    else:
        assert c["q_scale"] == 0 and c["k_scale_ptr"] == 0 and c["v_scale_ptr"] == 0


def test_dry_run_no_tokens_launches_nothing(fake):
    a = make_inputs(0, 8, 1, page=16, num_pages=2)
    q, qs = call(a)
    assert q.shape == (0, 8, D) and qs is None and not fake.calls


# --------------------------------------------------------------------------------------------------
# Shared by the GPU and emulated tests (test_prologue_gpu.py, test_prologue_emulated.py, _props)
# --------------------------------------------------------------------------------------------------

def _run(a, hq, hkv, **kw):
    return ha.qk_norm_rope_store(a["qkv"], a["positions"], a["cos_sin_cache"], a["k_cache"], a["v_cache"],
                                 a["slot_mapping"], num_qo_heads=hq, num_kv_heads=hkv,
                                 q_norm_weight=a["q_norm_weight"], k_norm_weight=a["k_norm_weight"], **kw)


def bf16_ulp(x: torch.Tensor) -> torch.Tensor:
    """The BF16 spacing at |x| (float64), the subnormal spacing at 0."""
    e = torch.floor(torch.log2(x.abs().clamp(min=2.0 ** -126)))
    return torch.exp2(e - 7)


def e4m3_step(x: torch.Tensor) -> torch.Tensor:
    """The E4M3 spacing at |x| in code units (x already divided by its scale), 2^-9 below the normals."""
    e = torch.floor(torch.log2(x.abs().clamp(min=2.0 ** -6)))
    return torch.exp2(e - 3)


def within_one_rounding(got: torch.Tensor, exact: torch.Tensor, step, what: str) -> None:
    """|got - exact| <= half the output format's step at exact (one RNE rounding), plus float32's error on the
    head: 1e-6 of the head's largest value (RoPE's a cos - b sin may cancel)."""
    err = (got.double() - exact).abs()
    slack = 1e-6 * exact.abs().amax(-1, keepdim=True) + 1e-30
    bad = err > step(exact) * 0.5 * (1 + 1e-3) + slack
    assert not bad.any(), (f"{what}: {int(bad.sum())} values off by more than one rounding, first at "
                           f"{bad.nonzero()[0].tolist()}: got {float(got.double()[bad][0])}, "
                           f"exact {float(exact[bad][0])}")


def check_against_reference(a, got_q, got_qs, hq, hkv, *, q_dtype, kv_dtype, k_scale=None, v_scale=None, **kw):
    """Every output and written slot within one rounding of the float64 value (the kernel computes in float32
    and rounds once); slots not in slot_mapping still hold their NaN poison."""
    cpu = {n: (t.cpu() if isinstance(t, torch.Tensor) else t) for n, t in a.items()}
    q, k, v = ref.prologue_reference(cpu["qkv"], cpu["positions"], cpu["cos_sin_cache"], num_qo_heads=hq,
                                     num_kv_heads=hkv, q_norm_weight=cpu["q_norm_weight"],
                                     k_norm_weight=cpu["k_norm_weight"], **kw)
    got_q = got_q.cpu()
    if q_dtype == FP8:
        qs = got_qs.cpu().double()
        want_qs = (q.abs().amax(-1) / 448).clamp(min=1e-10 / 448)
        torch.testing.assert_close(qs, want_qs, rtol=1e-5, atol=0)
        within_one_rounding(got_q, q / qs[..., None], e4m3_step, "q (E4M3 codes)")
    else:
        within_one_rounding(got_q, q, bf16_ulp, "q")
    slots = cpu["slot_mapping"].long()
    page_size = cpu["k_cache"].shape[1]
    keep = (slots >= 0).nonzero().flatten()
    for name, cache, want, scale in (("k_cache", a["k_cache"].cpu(), k, k_scale),
                                     ("v_cache", a["v_cache"].cpu(), v, v_scale)):
        rows = cache.reshape(-1, hkv, D)[slots[keep]]
        if kv_dtype == FP8:
            within_one_rounding(rows, want[keep] / float(scale), e4m3_step, f"{name} (E4M3 codes)")
        else:
            within_one_rounding(rows, want[keep], bf16_ulp, name)
        written = torch.zeros(cache.shape[0] * page_size, dtype=torch.bool)
        written[slots[keep]] = True
        rest = cache.reshape(-1, hkv, D)[~written]
        assert rest.float().isnan().all(), f"{name}: a slot not in slot_mapping was written"


# --------------------------------------------------------------------------------------------------
# CPU: the benchmark's case table and its unfused baseline
# --------------------------------------------------------------------------------------------------

def _bench_module():
    import importlib.util
    import sys

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_prologue.py"
    spec = importlib.util.spec_from_file_location("bench_prologue", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_prologue"] = bench
    spec.loader.exec_module(bench)
    return bench


def test_bench_case_table_builds_on_the_cpu():
    bench = _bench_module()
    rows = bench.case_table(["prologue", "step"], bench.TOKENS, bench.HEADS, bench.KV, bench.STEP_CASES)
    pro_rows = [r for r in rows if r["part"] == "prologue"]
    assert {r["T"] for r in pro_rows} == {1, 8, 64, 256, 2048, 8192}
    assert {(r["Hq"], r["Hkv"]) for r in rows} == {(8, 1), (64, 8)}
    assert len(pro_rows) == 24 and len(rows) - len(pro_rows) == 24
    assert all(r["floor_us"] > 0 for r in rows)
    # the Hy3 TP8 prologue at T = 256 moves about 1.4 MB (BF16): 0.66 MB of qkv read, as much written, cos / sin
    assert 1.3e6 < bench.prologue_bytes(256, 8, 1, False) < 1.5e6


@pytest.mark.parametrize("fp8", [False, True])
def test_bench_unfused_sequence_is_the_prologue(fp8):
    """The benchmark's unfused torch baseline computes what the prologue computes (within its BF16 rounding of
    the norm's output), so the two providers are timed on the same work."""
    bench = _bench_module()
    gen = torch.Generator().manual_seed(4)
    cs = ref.rope_cos_sin_cache(512, 128)
    p = bench.Prologue(9, 16, 2, fp8, cs, gen)
    p.positions = p.positions % 512
    p.unfused()()
    sc = dict(k_scale=bench.KV_SCALE, v_scale=bench.KV_SCALE) if fp8 else {}
    kc = torch.zeros_like(p.k_cache.to(torch.float32)).to(p.k_cache.dtype)
    vc = torch.zeros_like(kc)
    q, qs = ref.qk_norm_rope_store_reference(p.qkv, p.positions, cs, kc, vc, p.slots, num_qo_heads=16,
                                             num_kv_heads=2, q_norm_weight=p.wq, k_norm_weight=p.wk, eps=bench.EPS,
                                             q_out_dtype=p.out_q.dtype, **sc)
    deq = lambda x, s: x.double() * (s.double()[..., None] if s is not None else 1)  # noqa: E731
    got, want = deq(p.out_q, p.out_qs), deq(q, qs)
    assert float((got - want).abs().max() / want.abs().max()) < (0.07 if fp8 else 0.02)
    for a, b in ((p.k_cache, kc), (p.v_cache, vc)):
        diff = (a.double() - b.double()).abs().max() / b.double().abs().max()
        assert float(diff) < (0.15 if fp8 else 0.02)


def test_bound_probe_extension_builds():
    """tools/probes/prologue (bound_kernels.cu + bindings.cpp) still builds against the real prologue headers
    as the extension its script loads (tools/probes/build.py compiles the .cu alone, without the bindings)."""
    import shutil
    import sys

    from hpc_common.jit import toolchain

    try:
        toolchain.find_nvcc()
    except Exception:
        pytest.skip("needs nvcc")
    if shutil.which("ninja") is None and shutil.which("ninja", path=str(Path(sys.executable).parent)) is None:
        pytest.skip("needs ninja")
    probe_dir = Path(__file__).resolve().parents[2] / "tools" / "probes" / "prologue"
    sys.path.insert(0, str(probe_dir))
    try:
        bound = importlib.import_module("prologue_bound")
    finally:
        sys.path.remove(str(probe_dir))
    ext = bound.load_probe_ext()
    assert {"bare_copy", "bare_copy_registers", "empty"} <= set(dir(ext))
    assert ext.bare_copy_registers(3, False) == -1  # a variant the probe does not build
    assert bound.prologue_blocks(2048, 8, 1) == 640 and bound.prologue_blocks(1, 8, 1, 4) == 1
