"""FP8 E4M3 quantisation: reference semantics and argument checks (CPU), kernels against the
reference bit for bit (GPU, `gpu` marker)."""

from __future__ import annotations

import math
import struct

import pytest
import torch
from _fp8_cases import DTYPES, MODES, assert_same, make_input, run, run_ref, scale_storage, shape_for

import hpc_common
from hpc_common import fp8
from hpc_common.fp8 import reference as ref
from hpc_common.testing import assert_bitwise_equal, poison_, poisoned_empty

FP8 = torch.float8_e4m3fn


# ---------------------------------------------------------------------------------------
# Reference semantics (CPU)
# ---------------------------------------------------------------------------------------

def _e4m3_value(code: int) -> float:
    e, m = (code >> 3) & 0xF, code & 7
    v = m / 8 * 2.0**-6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
    return -v if code & 0x80 else v


_POS_CODES = list(range(0x7F))  # 0x00 .. 0x7E (448); 0x7F is NaN


def _expected_code(v: float) -> int:
    """Independent RNE-satfinite E4M3 encoder: nearest code, ties to the even code."""
    if math.isnan(v):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, v) < 0 else 0
    a = abs(v)
    if a >= 448.0:
        return sign | 0x7E
    best = min(_POS_CODES, key=lambda c: (abs(_e4m3_value(c) - a), c & 1))
    return sign | best


def _f32(v: float) -> float:
    return struct.unpack("f", struct.pack("f", v))[0]


def test_e4m3_rounding_is_rne_at_every_midpoint():
    vals = []
    for c in range(0x7E):
        lo, hi = _e4m3_value(c), _e4m3_value(c + 1)
        mid = (lo + hi) / 2  # exactly representable in float32
        step = math.ulp(_f32(mid))
        vals += [lo, mid, mid - step, mid + step, hi]
    vals += [448.0, 449.0, 463.9, 464.0, 465.0, 480.0, 1e30, 3.4e38, 2.0**-10, 2.0**-10 + 2.0**-30, 1e-40, 0.0]
    vals += [-v for v in vals]
    t = torch.tensor(vals, dtype=torch.float32)
    got = ref.e4m3_from_float32(t).view(torch.uint8).tolist()
    want = [_expected_code(_f32(v)) for v in vals]
    bad = [(v, g, w) for v, g, w in zip(vals, got, want) if g != w]
    assert not bad, f"{len(bad)} codes differ, first {bad[:5]}"


def test_saturation_and_nan():
    t = torch.tensor([float("inf"), float("-inf"), 1e30, -1e30, 448.0, -460.0, float("nan"), -float("nan")])
    got = ref.e4m3_from_float32(t).view(torch.uint8).tolist()
    assert got == [0x7E, 0xFE, 0x7E, 0xFE, 0x7E, 0xFE, 0x7F, 0x7F]


def test_amax_ignores_nan_and_inf():
    x = torch.tensor([[1.0, float("nan"), -2.0, float("inf")], [float("-inf"), 0.5, 0.25, float("nan")]])
    q, s = ref.quantize_per_token_ref(x)
    assert s.flatten().tolist() == [_f32(_f32(2.0) / 448.0), _f32(_f32(0.5) / 448.0)]
    codes = q.view(torch.uint8)
    assert codes[0].tolist()[1] == 0x7F and codes[0].tolist()[3] == 0x7E and codes[1].tolist()[0] == 0xFE
    assert codes[0, 2].item() == 0xFE  # -2.0 is the row's amax: exactly -448


@pytest.mark.parametrize("ue8m0", [False, True])
def test_zero_and_all_nan_rows_give_finite_scale(ue8m0):
    x = torch.zeros(3, 130)
    x[1] = float("nan")
    x[2, 7] = float("inf")
    for q, s in (ref.quantize_per_token_ref(x, ue8m0), ref.quantize_per_token_group_ref(x, 128, ue8m0),
                 ref.quantize_per_tensor_ref(x, ue8m0=ue8m0)):
        assert torch.isfinite(s).all() and (s > 0).all()
        assert (s == ref.scale_from_amax(torch.zeros(1), ue8m0)).all()
        codes = q.view(torch.uint8)
        assert (codes[0] == 0).all() and (codes[1] == 0x7F).all()
        assert codes[2, 7] == 0x7E and (codes[2, :7] == 0).all()


def test_ue8m0_scales_are_the_next_power_of_two():
    x = torch.randn(64, 512) * torch.logspace(-8, 8, 64).unsqueeze(1)
    _, s = ref.quantize_per_token_group_ref(x, 128)
    _, p = ref.quantize_per_token_group_ref(x, 128, ue8m0=True)
    m, e = torch.frexp(p)
    assert (m == 0.5).all()
    assert (p >= s).all() and (p < 2 * s).all()


def test_group_scales_layouts_and_short_last_group():
    x = make_input((5, 300), torch.bfloat16, 1)
    q, s = ref.quantize_per_token_group_ref(x, 128)
    assert s.shape == (5, 3)
    for g in range(3):
        qg, sg = ref.quantize_per_token_ref(x[:, g * 128:(g + 1) * 128])
        assert_bitwise_equal(q[:, g * 128:(g + 1) * 128].view(torch.uint8), qg.view(torch.uint8))
        assert_bitwise_equal(s[:, g], sg[:, 0])
    qc, sc = ref.quantize_per_token_group_ref(x, 128, column_major_scales=True)
    assert sc.stride() == (1, 8) and sc.shape == (5, 3)
    assert torch.equal(sc, s) and torch.equal(qc.view(torch.uint8), q.view(torch.uint8))
    assert (scale_storage(sc)[:, 5:] == 0).all()


def test_per_head_equals_per_token_over_heads():
    x = make_input((7, 3, 65), torch.float16, 2)
    q, s = ref.quantize_per_token_head_ref(x)
    qt, st = ref.quantize_per_token_ref(x.reshape(21, 65))
    assert_bitwise_equal(q.reshape(21, 65).view(torch.uint8), qt.view(torch.uint8))
    assert_bitwise_equal(s.reshape(21, 1), st)
    assert s.shape == (7, 3, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dequantised_error_is_within_half_an_e4m3_step(dtype):
    x = make_input((33, 257), dtype, 3, special=False)
    q, s = ref.quantize_per_token_group_ref(x, 128)
    d = ref.dequantize_ref(q, s, 128)
    xf = x.float()
    sf = s.repeat_interleave(128, dim=1)[:, :257]
    # Normals: relative 2^-4; subnormals of E4M3: absolute 2^-10 of the scale.
    assert ((d - xf).abs() <= torch.maximum(xf.abs() * 2.0**-4, sf * 2.0**-10) * (1 + 1e-6)).all()


def test_static_scale_divides_exactly():
    x = torch.tensor([[0.5, 1.0, 3.0, -7.0, 1000.0]])
    q, s = ref.quantize_per_tensor_ref(x, 0.5)
    assert s.tolist() == [0.5]
    assert q.float().tolist() == [[1.0, 2.0, 6.0, -14.0, 448.0]]


def test_empty_inputs_reference():
    q, s = ref.quantize_per_token_ref(torch.zeros(3, 0))
    assert q.shape == (3, 0) and s.shape == (3, 1) and (s == ref.scale_from_amax(torch.zeros(1))).all()
    q, s = ref.quantize_per_token_group_ref(torch.zeros(0, 5))
    assert q.shape == (0, 5) and s.shape == (0, 1)


# ---------------------------------------------------------------------------------------
# Argument checks that need no GPU: dtype/shape errors come before the device check.
# ---------------------------------------------------------------------------------------

def test_errors_name_the_argument():
    x = torch.zeros(4, 256, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="quantize_per_token: x must be bfloat16 or float16 or float32"):
        fp8.quantize_per_token(x.double())
    with pytest.raises(ValueError, match="x must be 2-D"):
        fp8.quantize_per_token(x[0])
    with pytest.raises(ValueError, match="x must be 3-D"):
        fp8.quantize_per_token_head(x)
    with pytest.raises(ValueError, match="x must have a unit stride"):
        fp8.quantize_per_token(x.t())
    with pytest.raises(TypeError, match="out must be float8_e4m3fn"):
        fp8.quantize_per_token(x, out=torch.empty(4, 256))
    with pytest.raises(ValueError, match=r"out must have shape \[4, 256\]"):
        fp8.quantize_per_token(x, out=torch.empty(4, 255, dtype=FP8))
    with pytest.raises(ValueError, match=r"scale_out must have shape \[4, 1\]"):
        fp8.quantize_per_token(x, scale_out=torch.empty(4))
    with pytest.raises(ValueError, match=r"scale_out must have shape \[4, 2\]"):
        fp8.quantize_per_token_group(x, 128, scale_out=torch.empty(4, 3))
    with pytest.raises(ValueError, match="scale_out must be column-major"):
        fp8.quantize_per_token_group(x, 128, column_major_scales=True, scale_out=torch.empty(4, 2))
    with pytest.raises(ValueError, match="group_size must be a positive int"):
        fp8.quantize_per_token_group(x, 0)
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        fp8.quantize_per_tensor(x, -1.0)
    with pytest.raises(ValueError, match="scale must have exactly one element"):
        fp8.quantize_per_tensor(x, torch.ones(2))
    with pytest.raises(TypeError, match="scale must be float32"):
        fp8.quantize_per_tensor(x, torch.ones(1, dtype=torch.float16))
    with pytest.raises(ValueError, match="ue8m0 applies to dynamic scales only"):
        fp8.quantize_per_tensor(x, 1.0, ue8m0=True)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        fp8.quantize_per_tensor([1.0])


@pytest.mark.parametrize("mode", list(MODES))
def test_valid_cpu_input_is_refused_as_not_cuda(mode):
    x = torch.zeros(shape_for(mode, 4, 256), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="x must be a CUDA tensor"):
        run(mode, x, static_scale=torch.ones(1))


def test_custom_ops_are_registered_with_fake_kernels():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        x = torch.empty(4, 256, dtype=torch.bfloat16)
        out = torch.empty(4, 256, dtype=FP8)
        s = torch.empty(4, 1)
        assert torch.ops.hpc_common.fp8_quant_dynamic(x, out, s, 1, 0, False) is None
        assert torch.ops.hpc_common.fp8_quant_static(x, out, None, 1.0) is None


def test_import_touches_no_gpu():
    # The package imports on a CPU-only machine and registers its ops without building.
    assert hasattr(hpc_common, "__version__") and callable(fp8.quantize_per_token_group)


def test_extension_compiles():
    """The kernels compile with this machine's nvcc (cached; launches nothing)."""
    from hpc_common import _ext

    so = _ext.SPEC.build()
    assert so.is_file()


# ---------------------------------------------------------------------------------------
# Kernels against the reference (GPU)
# ---------------------------------------------------------------------------------------

SHAPES = [(1, 1), (3, 7), (4, 128), (5, 129), (17, 256), (64, 4096), (33, 1000), (2, 5001), (3, 40000)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("ue8m0", [False, True])
def test_matches_reference_bitwise(cuda, mode, dtype, ue8m0):
    if ue8m0 and mode == "per_tensor_static":
        pytest.skip("ue8m0 applies to dynamic scales only")
    for i, (m, n) in enumerate(SHAPES):
        if mode == "per_head" and m * n > 200_000:
            continue
        x = make_input(shape_for(mode, m, n), dtype, seed=100 + i, device=cuda)
        got = run(mode, x, ue8m0=ue8m0)
        assert_same(got, run_ref(mode, x, ue8m0=ue8m0), what=f"{mode} {tuple(x.shape)} (GPU ref)")
        assert_same(got, run_ref(mode, x.cpu(), ue8m0=ue8m0), what=f"{mode} {tuple(x.shape)} (CPU ref)")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("scale", [1.0, 0.125, 3.0])
def test_static_midpoints_round_to_even(cuda, dtype, scale):
    mids = []
    for c in range(0x7E):
        lo, hi = _e4m3_value(c), _e4m3_value(c + 1)
        mids += [lo, (lo + hi) / 2, hi, 500.0]
    if dtype == torch.float16:
        mids = [v for v in mids if v * scale < 6e4]
    x = (torch.tensor(mids) * scale).to(dtype)
    x = torch.stack([x, -x]).to(cuda)
    for s in (scale, torch.tensor([scale], device=cuda)):
        q, _ = fp8.quantize_per_tensor(x, s)
        qr, _ = ref.quantize_per_tensor_ref(x.cpu(), scale)
        assert_bitwise_equal(q.view(torch.uint8).cpu(), qr.view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(MODES))
def test_poisoned_outputs_are_overwritten(cuda, mode):
    x = make_input(shape_for(mode, 37, 300), torch.bfloat16, 7, device=cuda)
    expected = run_ref(mode, x)
    out = poison_(torch.empty(x.shape, dtype=FP8, device=cuda))
    scale_out = None
    if mode not in ("per_tensor_static",):
        s = expected[1]
        if mode == "group_col":
            m_pad = (37 + 3) // 4 * 4
            scale_out = poison_(torch.empty(s.shape[1], m_pad, device=cuda)).t()[:37]
        else:
            scale_out = poison_(torch.empty(s.shape, device=cuda))
    assert_same(run(mode, x, out=out, scale_out=scale_out), expected, what=mode)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", list(MODES))
def test_strided_and_misaligned_inputs(cuda, mode, dtype):
    # Rows with a pitch, a start that is not 16-byte aligned, and (per-head) a slice of a
    # fused QKV buffer: the scalar path, then the vectorised path with a padded pitch.
    for col0, pitch_pad in ((1, 3), (0, 64)):
        if MODES[mode] == 3:
            big = make_input((9, 12, 128 + col0 + pitch_pad), dtype, 11, device=cuda)
            x = big[:, 2:6, col0:col0 + 128]
        else:
            big = make_input((23, 520 + col0 + pitch_pad), dtype, 12, device=cuda)
            x = big[:, col0:col0 + 520]
        assert not x.is_contiguous()
        assert_same(run(mode, x), run_ref(mode, x), what=f"{mode} offset {col0}")


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(MODES))
def test_cuda_graph_replay_equals_eager(cuda, mode):
    x = make_input(shape_for(mode, 48, 1024), torch.bfloat16, 21, device=cuda)
    static = torch.tensor([0.05], device=cuda)  # no host-to-device copy inside the capture
    eager = run(mode, x, static_scale=static)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(mode, x, static_scale=static)
    for seed in (22, 23):
        x.copy_(make_input(x.shape, torch.bfloat16, seed, device=cuda))
        graph.replay()
        torch.cuda.synchronize()
        assert_same(captured, run(mode, x, static_scale=static), what=f"{mode} replay")
    assert eager[0].shape == captured[0].shape


@pytest.mark.gpu
@pytest.mark.parametrize("mode", list(MODES))
def test_deterministic_and_pdl_on_equals_off(cuda, mode):
    x = make_input(shape_for(mode, 300, 4096), torch.bfloat16, 31, device=cuda)
    with hpc_common.pdl_enabled(True):
        a = run(mode, x)
        b = run(mode, x)
    with hpc_common.pdl_enabled(False):
        c = run(mode, x)
    ra = (a[0].clone(), a[1].clone())
    assert_same(b, ra, what=f"{mode} run-to-run")
    assert_same(c, ra, what=f"{mode} pdl off vs on")


@pytest.mark.gpu
def test_per_tensor_dynamic_large_uses_many_blocks(cuda):
    # Big enough for the amax kernel to fill its whole grid and for several partials to
    # hold the maximum; a single huge value placed last must still set the scale.
    x = make_input((4096, 4097), torch.bfloat16, 41, special=False, device=cuda)
    x[-1, -1] = 12345.0
    got = fp8.quantize_per_tensor(x)
    assert_same(got, ref.quantize_per_tensor_ref(x), what="per-tensor large")
    assert got[1].item() == ref.scale_from_amax(x[-1, -1].float().cpu().reshape(1)).item()


@pytest.mark.gpu
def test_static_float_and_tensor_scales_agree(cuda):
    x = make_input((70, 333), torch.float32, 51, device=cuda)
    a, sa = fp8.quantize_per_tensor(x, 0.02)
    b, sb = fp8.quantize_per_tensor(x, torch.tensor([0.02], device=cuda))
    assert_bitwise_equal(a.view(torch.uint8), b.view(torch.uint8))
    assert sa.device == x.device and sa.item() == sb.item()


@pytest.mark.gpu
def test_empty_inputs(cuda):
    for m, n in ((0, 128), (3, 0)):
        for mode in MODES:
            x = torch.zeros(shape_for(mode, m, n), dtype=torch.bfloat16, device=cuda)
            assert_same(run(mode, x), run_ref(mode, x), what=f"{mode} empty {tuple(x.shape)}")


@pytest.mark.gpu
def test_torch_compile_traces_the_custom_ops(cuda):
    x = make_input((64, 512), torch.bfloat16, 61, device=cuda)

    def f(t):
        q, s = fp8.quantize_per_token_group(t * 2, 128, column_major_scales=True)
        q2, s2 = fp8.quantize_per_token(t)
        return q, s, q2, s2

    got = torch.compile(f, fullgraph=True)(x)
    want = f(x)
    assert_same(got[:2], want[:2], what="compiled group")
    assert_same(got[2:], want[2:], what="compiled per-token")


@pytest.mark.gpu
def test_scale_is_the_reference_dequantisation_scale(cuda):
    x = make_input((16, 256), torch.bfloat16, 71, special=False, device=cuda)
    q, s = fp8.quantize_per_token_group(x, 128)
    d = ref.dequantize_ref(q, s, 128)
    assert ((d - x.float()).abs() <= x.float().abs() * 2.0**-4 + s.repeat_interleave(128, 1) * 2.0**-10).all()


def test_torch_compile_functionalises_the_mutating_op_cpu():
    """torch.compile (inductor) of the dynamic op writing into a column-major scale view, with
    the reference registered as the op's CPU kernel (the real one needs an SM90 GPU). Guards
    the schema against names that clash with auto_functionalized's own arguments."""
    from hpc_common.fp8.quant import PER_TOKEN_GROUP, _fp8_quant_dynamic

    @_fp8_quant_dynamic.register_kernel("cpu")
    def _cpu(x, out, scale_out, quant_mode, group_size, ue8m0):
        q, s = ref.quantize_per_token_group_ref(x, group_size, ue8m0)
        out.copy_(q)
        scale_out.copy_(s)

    def f(t):
        x = t * 2
        out = torch.empty(x.shape, dtype=FP8)
        s = torch.zeros(2, 64).t()[: x.shape[0]]  # the CPU stand-in writes no padding
        torch.ops.hpc_common.fp8_quant_dynamic(x, out, s, PER_TOKEN_GROUP, 128, False)
        return out, s

    x = make_input((61, 256), torch.bfloat16, 5)
    got = torch.compile(f, fullgraph=True)(x)
    assert_same(got, ref.quantize_per_token_group_ref(x * 2, 128, column_major_scales=True), what="compiled")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,group_size", [("group", 128), ("group_col", 128), ("group", 256), ("group", 64),
                                             ("group", 32), ("per_head", 128)])
@pytest.mark.parametrize("m", [1, 37, 1000])
def test_group_and_per_head_kernels_match_reference(cuda, dtype, mode, group_size, m):
    """Group and per-head scales give the reference's bits on the kernels these shapes take (column
    tiles, tile kernel, short-segment kernel for 16- and 32-vector segments)."""
    x = make_input(shape_for(mode, m, 512 if mode != "per_head" else 128), dtype, seed=m * 7 + group_size)
    kw = {} if mode == "per_head" else {"group_size": group_size}
    got = run(mode, x.to(cuda), **kw)
    assert_same(got, run_ref(mode, x, **kw), what=f"{mode} g{group_size} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode,seg,n", [
    ("group", 128, 4095), ("group", 128, 4097), ("group", 128, 200), ("group_col", 128, 1001),
    ("group", 64, 1001), ("group", 256, 1001), ("group", 100, 1001), ("group", 32, 333),
    ("per_head", 127, 127), ("per_head", 130, 130)])
@pytest.mark.parametrize("shift", [0, 3])
def test_masked_short_segment_kernel_matches_reference(cuda, dtype, mode, seg, n, shift):
    """Segments whose starts are not 16-byte aligned (odd N, group lengths that are not a vector
    multiple, per-head rows of odd length, x and out shifted alike) or whose row ends in a short
    segment take the masked short-segment kernel (aligned rows ending in a shorter group: the row tile
    kernel's covers, the default):
    neighbouring segments share their boundary vector, so a huge value just before each boundary
    would leak into the next segment's scale, and a poisoned output byte left unwritten would show.
    Equal, bit for bit, to the reference."""
    shape = shape_for(mode, 37, n, heads=3)
    numel = math.prod(shape)
    x = make_input((numel + shift,), dtype, seed=seg + n + shift)
    xv = x[shift:].view(shape)
    big = 1e30 if dtype != torch.float16 else 6e4
    xv.view(-1, n)[::2, seg - 1::seg] = big  # the last element of every other row's segments
    xg = x.to(cuda)[shift:].view(shape)
    kw = {} if mode == "per_head" else {"group_size": seg}
    want = run_ref(mode, xv, **kw)
    out = poisoned_empty(numel + shift, dtype=FP8, device=cuda)[shift:].view(shape)
    assert_same(run(mode, xg, out=out, **kw), want, what=f"{mode} seg {seg} n {n} {dtype} shift {shift}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("shift", [0, 3])
def test_peeled_vector_path_matches_reference(cuda, mode, dtype, shift):
    """Rows of odd length (each row starts elsewhere modulo 16 bytes), and x and out both shifted
    by `shift` elements: the vector path with a scalar head per segment; out shifted one byte more
    than x: the scalar path. Both agree with the reference bit for bit."""
    from hpc_common.fp8 import heuristics

    shape = shape_for(mode, 37, 1001, heads=3)
    n = math.prod(shape)
    x = make_input((n + shift,), dtype, seed=shift + 13, device=cuda)[shift:].view(shape)
    qmode = {"per_token": heuristics.PER_TOKEN, "group": heuristics.PER_TOKEN_GROUP,
             "group_col": heuristics.PER_TOKEN_GROUP, "per_head": heuristics.PER_TOKEN_HEAD}.get(mode, heuristics.PER_TENSOR)
    got = {}
    for peel, out_shift in ((True, shift), (False, shift + 1)):
        out = torch.empty(n + out_shift, dtype=FP8, device=cuda)[out_shift:].view(shape)
        geo = heuristics.geometry(x, out, qmode, 128)
        aligned_flat = mode.startswith("per_tensor") and shift == 0 and peel  # one flat, aligned row
        assert heuristics.vector_path(x, out, geo) == ((True, not aligned_flat) if peel else (False, False))
        got[peel] = run(mode, x, out=out)
    want = run_ref(mode, x)
    assert_same(got[True], want, what=f"peeled {mode} {dtype} shift {shift}")
    assert_same(got[False], want, what=f"scalar {mode} {dtype} shift {shift}")
