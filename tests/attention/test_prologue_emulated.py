"""The fused prologue's real kernel source run on the CPU (prologue_emu/harness.cpp: one fiber per GPU
thread, team shuffles and __syncwarp emulated) through the Python layer: against the float64 reference,
out-of-range ids, strided views, opcheck of the custom op and torch.compile."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import hpc_attention as ha
from hpc_attention import reference as ref

from .test_prologue import (D, FP8, PKG, FakeParams, _run, bf16_ulp, check_against_reference, make_inputs, pro,
                            within_one_rounding)

# --------------------------------------------------------------------------------------------------
# CPU: the real kernel source, run on the host (prologue_emu/harness.cpp: one fiber per thread)
# --------------------------------------------------------------------------------------------------

EMU = Path(__file__).resolve().parent / "prologue_emu"


@pytest.fixture(scope="module")
def emu_harness(tmp_path_factory):
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("needs g++ (ucontext)")
    from hpc_common.jit.build import COMMON_INCLUDE_DIR

    exe = tmp_path_factory.mktemp("prologue_emu") / "harness"
    cmd = ["g++", "-std=c++17", "-O1", "-w", f"-I{EMU}", f"-I{COMMON_INCLUDE_DIR}", f"-I{PKG / 'include'}", "-o",
           str(exe), str(EMU / "harness.cpp"), "-x", "c++", str(PKG / "csrc" / "prologue.cu")]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return exe


def _extents(v: dict) -> dict[str, tuple[str, int]]:
    """Each pointer field of PrologueParams as (field, bytes from the pointer to the end of its last element)."""
    T, hq, hkv = int(v["num_tokens"]), int(v["num_qo_heads"]), int(v["num_kv_heads"])
    qe, ke = (1 if v["fp8_q"] else 2), (1 if v["fp8_kv"] else 2)
    idx = lambda i64: T * (8 if i64 else 4)  # noqa: E731
    pages = int(v["num_slots"]) // int(v["page_size"])

    def cache(c):
        return ((pages - 1) * v[f"{c}_stride_page"] + (v["page_size"] - 1) * v[f"{c}_stride_tok"]
                + (hkv - 1) * v[f"{c}_stride_head"] + D) * ke

    return {"qkv": ("qkv", ((T - 1) * v["qkv_stride_t"] + (hq + 2 * hkv) * D) * 2),
            "positions": ("positions", idx(v["positions_i64"])),
            "cos_sin": ("cos_sin", ((v["max_pos"] - 1) * v["cos_sin_stride"] + v["rotary_dim"])
                        * (4 if v["cos_sin_f32"] else 2)),
            "q_norm_weight": ("q_norm_weight", D * (4 if v["norm_f32"] else 2)),
            "k_norm_weight": ("k_norm_weight", D * (4 if v["norm_f32"] else 2)),
            "slot_mapping": ("slot_mapping", idx(v["slots_i64"])),
            "q_out": ("q_out", ((T - 1) * v["q_stride_t"] + (hq - 1) * v["q_stride_h"] + D) * qe),
            "q_scale": ("q_scale", ((T - 1) * v["q_scale_stride_t"] + (hq - 1) * v["q_scale_stride_h"] + 1) * 4),
            "k_cache": ("k_cache", cache("k")), "v_cache": ("v_cache", cache("v")),
            "k_scale": ("k_scale_ptr", 4), "v_scale": ("v_scale_ptr", 4)}


class EmuExt:
    """A stand-in extension that runs the harness on the call's params and the CPU memory its pointers name
    (copied out, run, the written tensors copied back in place)."""

    PrologueParams = FakeParams

    def __init__(self, exe, tmp):
        self.exe, self.tmp, self.calls = exe, tmp, 0

    def qk_norm_rope_store(self, params, fp8_kv, fp8_q, pdl, stream):
        import ctypes
        import subprocess

        self.calls += 1
        v = {**params.values, "fp8_kv": int(fp8_kv), "fp8_q": int(fp8_q)}
        v.setdefault("q_scale_stride_t", 0)
        v.setdefault("q_scale_stride_h", 0)
        (self.tmp / "params.txt").write_text("".join(f"{k} {float(x)!r}\n" for k, x in v.items()))
        ext = _extents(v)
        for name, (field, n) in ext.items():
            path = self.tmp / f"{name}.bin"
            path.unlink(missing_ok=True)
            if v[field]:
                path.write_bytes(ctypes.string_at(v[field], int(n)))
        subprocess.run([str(self.exe), str(self.tmp)], check=True, timeout=600)
        for name in ("q_out", "q_scale", "k_cache", "v_cache"):
            field, n = ext[name]
            if v[field]:
                data = (self.tmp / f"{name}.bin").read_bytes()
                assert len(data) == n
                ctypes.memmove(v[field], data, len(data))


@pytest.fixture
def emu_ext(emu_harness, tmp_path, monkeypatch):
    ext = EmuExt(emu_harness, tmp_path)
    monkeypatch.setattr(pro._ext, "load", lambda: ext)
    monkeypatch.setattr(pro, "require_hopper", lambda *a, **k: None)
    monkeypatch.setattr(pro, "stream_ptr", lambda device: 0)
    return ext


def emulate(a, hq, hkv, **kw):
    """qk_norm_rope_store through the Python layer (with emu_ext active), into NaN-filled outputs."""
    T = a["qkv"].shape[0]
    qd = kw.get("q_out_dtype", torch.bfloat16)
    out_q = torch.full((T, hq, D), float("nan")).to(qd)
    out_qs = torch.full((T, hq), float("nan")) if qd == FP8 else None
    return _run(a, hq, hkv, out_q=out_q, out_q_scale=out_qs, **kw)


EMU_CASES = [  # T, Hq, Hkv, rotary_dim, style, norm, kv, q dtype, cos/sin dtype, ids dtype, page
    (1, 8, 1, 128, "neox", True, torch.bfloat16, torch.bfloat16, torch.float32, torch.int64, 64),
    (5, 16, 2, 64, "gptj", True, FP8, FP8, torch.bfloat16, torch.int32, 16),
    (9, 12, 3, 100, "gptj", False, FP8, torch.bfloat16, torch.float32, torch.int64, 4),
    (6, 8, 2, 96, "neox", True, torch.bfloat16, FP8, torch.bfloat16, torch.int32, 8),
    (7, 8, 8, 64, "neox", False, torch.bfloat16, FP8, torch.float32, torch.int32, 3),
    (11, 40, 8, 128, "gptj", True, FP8, FP8, torch.float32, torch.int64, 64),
    (4, 4, 1, 2, "neox", True, torch.bfloat16, torch.bfloat16, torch.float32, torch.int64, 16),
    # Hq + 2 Hkv odd: a team's two rows (a V row, then the next token's first q row) straddle tokens
    (5, 5, 1, 128, "neox", True, FP8, torch.bfloat16, torch.float32, torch.int32, 16),
    (6, 1, 1, 64, "gptj", True, torch.bfloat16, FP8, torch.bfloat16, torch.int64, 8),
]


@pytest.mark.parametrize("case", EMU_CASES, ids=[f"{c[0]}x{c[1]}/{c[2]}-r{c[3]}-{c[4]}" for c in EMU_CASES])
def test_emulated_kernel_matches_reference(emu_ext, case):
    T, hq, hkv, rd, style, norm, kv, qd, csd, idx, page = case
    a = make_inputs(T, hq, hkv, rotary_dim=rd, kv=kv, norm=norm, page=page, num_pages=2 * T + 1, seed=T,
                    cs_dtype=csd, idx_dtype=idx, pad_every=3, max_pos=512)
    for cache in (a["k_cache"], a["v_cache"]):
        cache.view(torch.uint8).fill_(0xFF)
    scales = dict(k_scale=0.04, v_scale=torch.tensor([0.03])) if kv == FP8 else {}
    q, qs = emulate(a, hq, hkv, eps=1e-5, rope_style=style, q_out_dtype=qd, **scales)
    check_against_reference(a, q, qs, hq, hkv, q_dtype=qd, kv_dtype=kv, k_scale=0.04 if kv == FP8 else None,
                            v_scale=0.03 if kv == FP8 else None, eps=1e-5, rope_style=style)


def test_emulated_kernel_skips_out_of_range_ids(emu_ext):
    """With validation off, slots past the cache write nothing and positions past the cos / sin cache are
    clamped to its last row: the kernel never reads or writes outside its tensors."""
    a = make_inputs(4, 8, 1, page=4, num_pages=2, max_pos=64, pad_every=0)
    for cache in (a["k_cache"], a["v_cache"]):
        cache.view(torch.uint8).fill_(0xFF)
    a["slot_mapping"] = torch.tensor([0, 8, 5, 1 << 40])  # 8 and 2^40 are past the 8 slots
    a["positions"] = torch.tensor([3, 63, 64, 1 << 33])
    q, _ = emulate(a, 8, 1, validate=False)
    written = [s for s in a["slot_mapping"].tolist() if s < 8]
    rows = a["k_cache"].reshape(8, -1)
    for s in range(8):
        assert rows[s].isnan().all() != (s in written), s
    want = ref.prologue_reference(a["qkv"], a["positions"].clamp(max=63), a["cos_sin_cache"], num_qo_heads=8,
                                  num_kv_heads=1, q_norm_weight=a["q_norm_weight"],
                                  k_norm_weight=a["k_norm_weight"])[0]
    within_one_rounding(q, want, bf16_ulp, "q")


def test_emulated_strided_views(emu_ext):
    """qkv a column slice of a wider projection, the caches views of one [2, pages, page, Hkv, 128] buffer (the
    vLLM layout), out_q and out_q_scale strided views."""
    T, hq, hkv = 6, 16, 2
    a = make_inputs(T, hq, hkv, kv=FP8, rotary_dim=64, page=8, num_pages=3, max_pos=256)
    wide = torch.zeros(T, (hq + 2 * hkv) * D + 256, dtype=torch.bfloat16)
    wide[:, :(hq + 2 * hkv) * D] = a["qkv"]
    a["qkv"] = wide[:, :(hq + 2 * hkv) * D]
    kv = torch.full((2, *a["k_cache"].shape), float("nan")).to(FP8)
    a["k_cache"], a["v_cache"] = kv[0], kv[1]
    out_q = torch.full((T, hq + 1, D), float("nan")).to(FP8)[:, 1:]
    out_qs = torch.full((hq, T), float("nan")).t()
    q, qs = _run(a, hq, hkv, q_out_dtype=FP8, k_scale=0.05, v_scale=0.05, out_q=out_q, out_q_scale=out_qs)
    assert q.data_ptr() == out_q.data_ptr() and qs.data_ptr() == out_qs.data_ptr()
    check_against_reference(a, q, qs, hq, hkv, q_dtype=FP8, kv_dtype=FP8, k_scale=0.05, v_scale=0.05)


def test_custom_op_opcheck(emu_ext):
    """The custom op's schema (mutated outputs and caches) and fake implementation agree with what it does,
    the emulated kernel standing in for the GPU."""
    T, hq, hkv = 3, 8, 1
    a = make_inputs(T, hq, hkv, page=4, num_pages=2, max_pos=64, cs_dtype=torch.bfloat16)
    args = (a["qkv"], a["positions"], a["cos_sin_cache"], a["q_norm_weight"], a["k_norm_weight"], a["slot_mapping"],
            torch.empty(T, hq, D, dtype=torch.bfloat16), None, a["k_cache"], a["v_cache"], None, None, 1.0, 1.0, hq,
            hkv, 128, True, 1e-6)
    utils = ("test_schema", "test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.hpc_attention.qk_norm_rope_store.default, args, test_utils=utils)
    assert emu_ext.calls >= 3


def test_emulated_under_torch_compile(emu_ext):
    """torch.compile (aot_eager, full graph) of a layer calling qk_norm_rope_store gives the eager bits."""
    T, hq, hkv = 5, 8, 1
    a = make_inputs(T, hq, hkv, page=4, num_pages=3, max_pos=64)
    eager, _ = _run(a, hq, hkv, validate=False)
    k_eager = a["k_cache"].clone()
    a["k_cache"].zero_()

    @torch.compile(backend="aot_eager", fullgraph=True)
    def layer(qkv, positions, out_q):
        return ha.qk_norm_rope_store(qkv, positions, a["cos_sin_cache"], a["k_cache"], a["v_cache"],
                                     a["slot_mapping"], num_qo_heads=hq, num_kv_heads=hkv,
                                     q_norm_weight=a["q_norm_weight"], k_norm_weight=a["k_norm_weight"],
                                     out_q=out_q, validate=False)[0]

    got = layer(a["qkv"], a["positions"], torch.empty_like(eager))
    assert torch.equal(got, eager) and torch.equal(a["k_cache"], k_eager)
