"""FP8 E4M3 quantisation on SM90: per-tensor (static or dynamic), per-token, per-token-group
and per-token-per-head. Semantics in hpc_common/fp8/reference.py and FP8_NOTES.md; the
kernels (include/hpc_common/fp8_quant.cuh) match the reference bit for bit.

Every mode computes q = e4m3_rne_satfinite(float32(x) * (1 / scale)) with IEEE float32
operations (the reciprocal once per scale). Inputs are bfloat16, float16 or float32 with a unit stride in the last dimension (other
strides are free); any size works; 16-byte-aligned layouts take the vectorised path, and
rows misaligned alike in x and out (odd N) take it after a scalar head per row. Outputs
are a contiguous float8_e4m3fn tensor of x's shape and float32 scales. Every function
accepts preallocated `out` / `scale_out` (CUDA-graph friendly) and is a torch custom op
(`hpc_common::fp8_quant_dynamic`, `hpc_common::fp8_quant_static`), so it traces under
torch.compile and replays in CUDA graphs.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from ..checks import check_tensor
from ..launch import get_num_sms, get_pdl, require_hopper, stream_ptr
from . import reference as _ref

FP8 = torch.float8_e4m3fn
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
_DTYPE_CODE = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}

# Modes of the custom op (int in the schema).
PER_TENSOR, PER_TOKEN, PER_TOKEN_GROUP, PER_TOKEN_HEAD = 0, 1, 2, 3
# Per-tensor modes have no per-segment scale: segments only split the work. 2048 elements
# gives 64 (bf16) or 128 (fp32) threads per segment, each holding four 16-byte vectors.
_PER_TENSOR_SEG = 2048
_SCALE_DYNAMIC, _SCALE_STATIC = 0, 1


# --------------------------------------------------------------------------------------
# Launch (real tensors only: alignment is a property of the data pointers)
# --------------------------------------------------------------------------------------

def _geometry(x: torch.Tensor, out: torch.Tensor, mode: int, group_size: int) -> dict:
    if mode == PER_TOKEN_HEAD:
        t, h, d = x.shape
        return dict(rows=t * h, heads=h, row_len=d, seg_len=d, segs_per_row=1,
                    x_stride_t=x.stride(0), x_stride_h=x.stride(1),
                    q_stride_t=out.stride(0), q_stride_h=out.stride(1))
    m, n = x.shape
    if mode == PER_TENSOR and x.is_contiguous():
        rows, row_len = 1, m * n  # one flat row: vectorised even when n is odd
    else:
        rows, row_len = m, n
    # A group wider than the row is the row (same scales); this keeps seg_len <= N.
    seg = {PER_TENSOR: _PER_TENSOR_SEG, PER_TOKEN: max(n, 1), PER_TOKEN_GROUP: min(group_size, max(n, 1))}[mode]
    return dict(rows=rows, heads=1, row_len=row_len, seg_len=seg, segs_per_row=math.ceil(row_len / seg),
                x_stride_t=x.stride(0) if rows > 1 else row_len, x_stride_h=0,
                q_stride_t=out.stride(0) if rows > 1 else row_len, q_stride_h=0)


def _vectorizable(x: torch.Tensor, out: torch.Tensor, geo: dict) -> tuple[bool, bool]:
    """(vectorized, peel). Vectorized: every segment start 16-byte aligned in x and VEC-byte
    aligned in out (VEC = 16 bytes of x's elements). Otherwise, with USE_PEELED_VECTOR_PATH,
    peel when x and out are misaligned alike (x's element address and out's byte address agree
    modulo VEC at every segment start: the kernel takes each segment's first elements up to a
    16-byte boundary one by one, the rest as vectors). Neither: the scalar path."""
    vec = 16 // x.element_size()
    offs = []  # element offsets between segment starts, in x and in out
    if geo["rows"] > geo["heads"]:
        offs.append((geo["x_stride_t"], geo["q_stride_t"]))
    if geo["heads"] > 1:
        offs.append((geo["x_stride_h"], geo["q_stride_h"]))
    if geo["segs_per_row"] > 1:
        offs.append((geo["seg_len"], geo["seg_len"]))
    if (x.data_ptr() % 16 == 0 and out.data_ptr() % vec == 0
            and all(a % vec == 0 and b % vec == 0 for a, b in offs)):
        return True, False
    x_elem = x.data_ptr() // x.element_size()
    if (USE_PEELED_VECTOR_PATH and x.data_ptr() % x.element_size() == 0
            and (x_elem - out.data_ptr()) % vec == 0 and all((a - b) % vec == 0 for a, b in offs)):
        return True, True
    return False, False


# Rows whose starts are not 16-byte aligned (odd N, column offsets) take the vector path with a
# scalar head per segment when x and out are misaligned alike (FP8_HISTORY.md); off: scalar path.
USE_PEELED_VECTOR_PATH = True
# (A one-warp-per-row kernel for such rows with per-group scales was measured twice in the ninth
# session, bitwise correct and 1.5-2x slower than this path both times: removed, FP8_HISTORY.md.)


# Group-128 / per-head quantisation takes the short-segment kernel (fp8_quant_small_seg.cuh) where no
# tile kernel serves it (with USE_TILE_KERNEL on, odd group rows take fp8_quant_odd_group_row_kernel, group-128
# rows of 2-byte inputs, or fp8_quant_odd_row_tile_kernel),
# peeled rows (odd N) with 4-32-vector segments its masked form (H200, 64 MB bf16 group-128 with
# N = 4095: 54.9 us against 69.6 on the generic kernel's peeled path); benchmarks/bench_fp8_quant.py
# turns this off to time the generic kernel beside it.
USE_SHORT_SEGMENT_KERNEL = True
# Tile kernels (16 KB tiles of whole segments: the short-lived-CTA kernels of fp8_quant_tile.cuh,
# USE_TILE_KERNEL below, or the bulk-copy ring of fp8_quant_bulk.cuh): serve shapes whose segments
# are whole, 16-element multiples and at most 16 KB (the launcher checks; other shapes keep the
# register kernels above). BULK_KERNEL_MODES lists the modes where they are the default (see
# FP8_HISTORY.md for the measurements); USE_BULK_KERNEL = True / False forces them on / off for
# every mode (tests and benchmarks time and check both), None follows BULK_KERNEL_MODES.
# H200 run of aeb24f7 (bf16 N=4096, % of the 4.27 TB/s copy bandwidth, bulk ring / register kernels):
# per-tensor static 75.6 / 72.3 (64 MB), 91.0 / 89.3 (256 MB); group-128 71.4 / 67.5, 87.0 / 87.6;
# per-head 71.9 / 67.7, 87.4 / 87.5; per-token 71.6 / 70.6, 87.8 / 89.0 (fp32 128 MB: 77.8 / 71.5);
# per-tensor dynamic 78.0 / 78.9, 92.8 / 92.3 and 53.7 / 58.5 at 16 MB: the register kernels.
# Per-tensor dynamic joined in the seventeenth session: its second pass on the one-tile-per-CTA
# kernel (visiting the tiles last-first after the amax pass) read 46.9 us at 64 MB against 48.9 on
# the register kernel, 162.5 against 168.3 at 256 MB (H200, same process).
BULK_KERNEL_MODES = frozenset({"per_tensor_static", "per_tensor_dynamic", "per_token", "group", "per_head"})
USE_BULK_KERNEL: Optional[bool] = None
# Where the bulk ring kernel applies, short-lived CTAs instead (fp8_quant_tile.cuh): one 16 KB tile
# per CTA, straight into registers; group scales and dense per-head inputs in 8-row column tiles
# (whole 32-byte runs of scales per CTA); a per-tensor static scale on a contiguous tensor takes the
# flat kernel; per-token / per-head rows of a vector count that is no power of two (hidden 2880 / 5120 /
# 7168) or of 1025-4096 vectors (intermediates 14336 / 28672) row forms of the tile kernel (eighteenth
# session: 64 MB per-token 34.1-35.1 -> 29.7-30.2 us, 28672 34.5 -> 32.3, where the register kernels
# served them). Same bits as the ring. H200, one process, written flush, 64 MB bf16 (us, ring ->
# these, run of 5c0a6f4): per-tensor static 30.5 -> 29.0 (81.3 % of 4.27 TB/s), dynamic 48.5 -> 46.3,
# per-token 32.2 -> 29.8, group-128 32.4 -> 30.1 (column-major scales 33.1 -> 30.1), per-head 32.1 ->
# 30.0; 256 MB and fp32 input faster too (FP8_HISTORY.md, seventeenth session). False: the ring (the
# benchmark's `ours_ring` row, the timeline script).
USE_TILE_KERNEL = True

# Per-tensor dynamic on a contiguous tensor: the amax pass is a flat, evenly split streaming
# kernel (fp8_amax_flat_kernel) instead of segment teams (whose last of ~4 block waves ran partly
# idle): H200, 64 MB bf16 50.0 -> 48.2 us (81.6% of the copy), 256 MB 169.8 -> 166.6 us
# (FP8_HISTORY.md, fourth pass). False gives the segment-team pass (tests and the benchmark's
# `ours_old` row compare both). The other alternatives of that pass (a warp-specialised bulk
# kernel, a balanced last tile round, L2 evict_first loads) measured slower or within ~1 us and
# were removed after commit 59a5220, where their code and switches remain.
FLAT_AMAX_KERNEL = True

# Bulk ring kernel order after a tile's block barrier (FP8_HISTORY.md, fifth pass; only with
# USE_TILE_KERNEL off): 0 = the default,
# thread 0 refills the tile's stage, then stores the tile (H200: 64 MB calls 0.3-0.8 us faster);
# 1 = the 8fdf820 order (store, then refill). Same bits out either way. (2, a refill at the
# row-max barrier for per-token rows, measured 1-1.5 % slower in the ninth session: removed.)
BULK_VARIANT = 0
# Diagnosis only (scripts/fp8_timeline.py): a CUDA int64 tensor of at least
# grid * TIMELINE_SLOTS elements; the bulk ring kernel (USE_TILE_KERNEL off) then writes per-CTA
# %globaltimer stamps into it
# (slot layout: TimelineSlot in fp8_quant.cuh). None in normal calls.
BULK_TIMELINE: Optional[torch.Tensor] = None
TIMELINE_SLOTS = 8 + 2 * 32  # kTimelineSlots
# A/B only (the benchmark's variant rows): -D switches of an extension variant every call then uses, e.g.
# ("-DHPC_FP8_ROW_TILE_ONE_ROW=0",). () is the default build.
EXT_DEFINES: tuple[str, ...] = ()


def _bulk_for(mode: int, scale_source: int) -> bool:
    if USE_BULK_KERNEL is not None:
        return bool(USE_BULK_KERNEL)
    name = {PER_TOKEN: "per_token", PER_TOKEN_GROUP: "group", PER_TOKEN_HEAD: "per_head"}.get(mode)
    if name is None:
        name = "per_tensor_static" if scale_source == _SCALE_STATIC else "per_tensor_dynamic"
    return name in BULK_KERNEL_MODES


def _shape_params(x: torch.Tensor, out: torch.Tensor, scale_out: Optional[torch.Tensor], mode: int,
                  group_size: int, scale_source: int) -> dict:
    """The launch arguments that decide which kernel runs: geometry, alignment, scale layout, the
    module switches (no pointers, so tests/common/test_fp8_dispatch.py checks the choice on CPU
    tensors with these very values)."""
    geo = _geometry(x, out, mode, group_size)
    vectorized, peel = _vectorizable(x, out, geo)
    if mode == PER_TOKEN_GROUP and scale_out is not None:
        s_row, s_seg = scale_out.stride(0), scale_out.stride(1)
    else:
        s_row, s_seg = 1, 0  # per-token [M, 1], per-head [T, H, 1]: scale index = row
    return dict(scale_stride_row=s_row, scale_stride_seg=s_seg, dtype=_DTYPE_CODE[x.dtype],
                scale_source=scale_source, per_tensor_dynamic=mode == PER_TENSOR and scale_source == _SCALE_DYNAMIC,
                vectorized=vectorized, short_segments=USE_SHORT_SEGMENT_KERNEL, bulk=_bulk_for(mode, scale_source),
                peel=peel, tile=USE_TILE_KERNEL, **geo)


def _launch(x: torch.Tensor, out: torch.Tensor, scale_out: Optional[torch.Tensor], mode: int,
            group_size: int, ue8m0: bool, scale_source: int, static_scale: Optional[torch.Tensor],
            static_value: float) -> None:
    from .. import _ext

    ext = _ext.load_variant(*EXT_DEFINES)
    params = _shape_params(x, out, scale_out, mode, group_size, scale_source)
    num_sms = get_num_sms(x.device)
    workspace = None
    if params["per_tensor_dynamic"]:
        workspace = torch.empty(ext.FP8_AMAX_BLOCKS_PER_SM * num_sms, dtype=torch.int32, device=x.device)
    ext.fp8_quant(
        x=x.data_ptr(), q=out.data_ptr(), scale=scale_out.data_ptr() if scale_out is not None else 0,
        static_scale=static_scale.data_ptr() if static_scale is not None else 0,
        static_value=float(static_value), workspace=workspace.data_ptr() if workspace is not None else 0,
        ue8m0=bool(ue8m0), num_sms=num_sms, pdl=get_pdl(), stream=stream_ptr(x.device),
        flat_amax=FLAT_AMAX_KERNEL, bulk_variant=BULK_VARIANT,
        timeline=BULK_TIMELINE.data_ptr() if BULK_TIMELINE is not None else 0, **params)


# No argument may be called `mode`: torch.compile's auto_functionalized_v2 passes its own
# `mode` to the fake kernel ("got multiple values for argument 'mode'", seen with torch 2.11).
@torch.library.custom_op("hpc_common::fp8_quant_dynamic", mutates_args=("out", "scale_out"))
def _fp8_quant_dynamic(x: torch.Tensor, out: torch.Tensor, scale_out: torch.Tensor, quant_mode: int,
                       group_size: int, ue8m0: bool) -> None:
    _launch(x, out, scale_out, quant_mode, group_size, ue8m0, _SCALE_DYNAMIC, None, 0.0)


@_fp8_quant_dynamic.register_fake
def _(x, out, scale_out, quant_mode, group_size, ue8m0):
    return None


@torch.library.custom_op("hpc_common::fp8_quant_static", mutates_args=("out",))
def _fp8_quant_static(x: torch.Tensor, out: torch.Tensor, scale: Optional[torch.Tensor],
                      scale_value: float) -> None:
    _launch(x, out, None, PER_TENSOR, 0, False, _SCALE_STATIC, scale, scale_value)


@_fp8_quant_static.register_fake
def _(x, out, scale, scale_value):
    return None


# --------------------------------------------------------------------------------------
# Checks: shapes and dtypes first (they need no GPU), then the device.
# --------------------------------------------------------------------------------------

# The kernels index inside a row with 32-bit integers.
_MAX_ROW = (1 << 31) - 1


def _check_x(x, op: str, ndim: int) -> torch.Tensor:
    check_tensor(x, "x", op, dtype=INPUT_DTYPES, ndim=ndim, last_dim_contiguous=True)
    if x.shape[-1] > _MAX_ROW:
        raise ValueError(f"{op}: x's last dimension must be at most {_MAX_ROW}, got {x.shape[-1]}")
    return x


def _check_out(out, x: torch.Tensor, op: str) -> None:
    if out is not None:
        check_tensor(out, "out", op, dtype=FP8, shape=tuple(x.shape), contiguous=True)


def _check_scale_out(scale_out, shape: tuple, op: str, *, contiguous: bool = True) -> None:
    if scale_out is not None:
        check_tensor(scale_out, "scale_out", op, dtype=torch.float32, shape=shape, contiguous=contiguous)


def _check_devices(x: torch.Tensor, op: str, **others) -> None:
    # Under torch.compile the capability query (an lru_cache'd CUDA call) is left to the
    # eager run that traced the graph; device placement is still checked.
    if not torch.compiler.is_compiling():
        require_hopper(x, "x", op)
    elif x.device.type != "cuda":
        raise ValueError(f"{op}: x must be a CUDA tensor on an SM90 (Hopper) GPU, got device {x.device}")
    for name, t in others.items():
        if t is not None and t.device != x.device:
            raise ValueError(f"{op}: {name} must be on {x.device} (like x), got {t.device}")


def _empty_scale_value(ue8m0: bool) -> float:
    """The scale of a segment with no element (amax 0), computed on the CPU like the kernel."""
    return _ref.scale_from_amax(torch.zeros(1), ue8m0).item()


def _alloc(x: torch.Tensor, out, scale_out, scale_shape) -> tuple[torch.Tensor, torch.Tensor]:
    if out is None:
        out = torch.empty(x.shape, dtype=FP8, device=x.device)
    if scale_out is None:
        scale_out = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    return out, scale_out


# --------------------------------------------------------------------------------------
# Public functions
# --------------------------------------------------------------------------------------

def quantize_per_tensor(x: torch.Tensor, scale: torch.Tensor | float | None = None, *, ue8m0: bool = False,
                        out: torch.Tensor | None = None,
                        scale_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x [M, N] (bf16 / fp16 / fp32, last dim contiguous) with one float32 scale.

    Static: `scale` is a float32 CUDA tensor of one element (read on the device, so it may be
    produced by a previous kernel or a graph input) or a positive finite Python float (baked
    into the launch). Dynamic (`scale=None`): scale = max(amax, 1e-10) / 448 over the finite
    elements, computed on the device by two kernels chained with PDL (amax partials, then a
    quantising pass that visits the tensor in reverse so the tail still in L2 is read first);
    `ue8m0` rounds it up to a power of two. Returns (q float8_e4m3fn [M, N], scale float32 [1]);
    static calls return `scale` itself (a float becomes a new one-element tensor).
    A device scale that is zero, negative or NaN is not checked (it would cost a sync):
    q = e4m3(x * (1 / scale)) then follows IEEE rules (scale 0: +-448 for x != 0, NaN for 0).
    """
    op = "quantize_per_tensor"
    _check_x(x, op, 2)
    _check_out(out, x, op)
    if scale is not None:
        if ue8m0:
            raise ValueError(f"{op}: ue8m0 applies to dynamic scales only (scale must be None)")
        if scale_out is not None:
            raise ValueError(f"{op}: scale_out is for dynamic scales only (scale must be None)")
        if isinstance(scale, torch.Tensor):
            check_tensor(scale, "scale", op, dtype=torch.float32)
            if scale.numel() != 1:
                raise ValueError(f"{op}: scale must have exactly one element, got shape {tuple(scale.shape)}")
        elif isinstance(scale, (int, float)) and not isinstance(scale, bool):
            if not (math.isfinite(scale) and scale > 0):
                raise ValueError(f"{op}: scale must be a positive finite number, got {scale!r}")
        else:
            raise TypeError(f"{op}: scale must be a float32 tensor, a float or None, got {type(scale).__name__}")
    _check_scale_out(scale_out, (1,), op)
    _check_devices(x, op, out=out, scale=scale if isinstance(scale, torch.Tensor) else None,
                   scale_out=scale_out)

    if scale is not None:
        out = out if out is not None else torch.empty(x.shape, dtype=FP8, device=x.device)
        if isinstance(scale, torch.Tensor):
            if x.numel():
                _fp8_quant_static(x, out, scale, 0.0)
            return out, scale
        value = torch.tensor(float(scale), dtype=torch.float32).item()  # float32 rounding
        if x.numel():
            _fp8_quant_static(x, out, None, value)
        return out, torch.full((1,), value, dtype=torch.float32, device=x.device)

    out, scale_out = _alloc(x, out, scale_out, (1,))
    if x.numel() == 0:
        scale_out.fill_(_empty_scale_value(ue8m0))
    else:
        _fp8_quant_dynamic(x, out, scale_out, PER_TENSOR, 0, bool(ue8m0))
    return out, scale_out


def quantize_per_token(x: torch.Tensor, *, ue8m0: bool = False, out: torch.Tensor | None = None,
                       scale_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise each row of x [M, N] (bf16 / fp16 / fp32, last dim contiguous) with its own
    scale max(amax_row, 1e-10) / 448 (finite elements only; `ue8m0`: rounded up to a power
    of two). Returns (q float8_e4m3fn [M, N], scale float32 [M, 1]), so that
    q.float() * scale dequantises."""
    op = "quantize_per_token"
    _check_x(x, op, 2)
    _check_out(out, x, op)
    _check_scale_out(scale_out, (x.shape[0], 1), op)
    _check_devices(x, op, out=out, scale_out=scale_out)
    out, scale_out = _alloc(x, out, scale_out, (x.shape[0], 1))
    if x.shape[1] == 0:
        scale_out.fill_(_empty_scale_value(ue8m0))
    elif x.numel():
        _fp8_quant_dynamic(x, out, scale_out, PER_TOKEN, 0, bool(ue8m0))
    return out, scale_out


def quantize_per_token_group(x: torch.Tensor, group_size: int = 128, *, column_major_scales: bool = False,
                             ue8m0: bool = False, out: torch.Tensor | None = None,
                             scale_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x [M, N] in groups of `group_size` consecutive columns of a row (the
    activation layout of 128x128 block-scaled FP8 checkpoints: Qwen3-FP8, DeepSeek-V3, Hy3-FP8),
    one scale max(amax_group, 1e-10) / 448 each; the last group of a row may be shorter.

    Returns (q float8_e4m3fn [M, N], scale float32 [M, G]) with G = ceil(N / group_size).
    The scale is row-major by default; with `column_major_scales` it is a [M, G] view with
    strides (1, M_pad), M_pad = M rounded up to a multiple of 4, whose padding rows are
    written as 0 (the TMA-aligned layout DeepGEMM-style GEMMs read). A given `scale_out`
    must have that layout (any pitch >= M). `ue8m0` rounds the scales up to powers of two
    (the UE8M0 scale format of Blackwell block-scaled GEMMs).
    """
    op = "quantize_per_token_group"
    _check_x(x, op, 2)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise ValueError(f"{op}: group_size must be a positive int, got {group_size!r}")
    m, n = x.shape
    g = math.ceil(n / group_size)
    _check_out(out, x, op)
    if scale_out is not None:
        _check_scale_out(scale_out, (m, g), op, contiguous=not column_major_scales)
        if column_major_scales and m > 1 and g > 0 and not (scale_out.stride(0) == 1 and scale_out.stride(1) >= m):
            raise ValueError(f"{op}: scale_out must be column-major (strides (1, pitch >= {m})) when "
                             f"column_major_scales=True, got strides {scale_out.stride()}")
    _check_devices(x, op, out=out, scale_out=scale_out)
    if out is None:
        out = torch.empty(x.shape, dtype=FP8, device=x.device)
    if scale_out is None:
        if column_major_scales:
            m_pad = (m + 3) // 4 * 4
            scale_out = torch.empty(g, m_pad, dtype=torch.float32, device=x.device).t()[:m]
        else:
            scale_out = torch.empty(m, g, dtype=torch.float32, device=x.device)
    if x.numel():
        _fp8_quant_dynamic(x, out, scale_out, PER_TOKEN_GROUP, group_size, bool(ue8m0))
    return out, scale_out


def quantize_per_token_head(x: torch.Tensor, *, ue8m0: bool = False, out: torch.Tensor | None = None,
                            scale_out: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x [T, H, D] (bf16 / fp16 / fp32; D contiguous, T and H strides free, e.g. a
    slice of a fused QKV output) with one scale per (token, head): the FP8 Q of attention.
    Returns (q float8_e4m3fn [T, H, D] contiguous, scale float32 [T, H, 1])."""
    op = "quantize_per_token_head"
    _check_x(x, op, 3)
    t, h, d = x.shape
    _check_out(out, x, op)
    _check_scale_out(scale_out, (t, h, 1), op)
    _check_devices(x, op, out=out, scale_out=scale_out)
    out, scale_out = _alloc(x, out, scale_out, (t, h, 1))
    if d == 0:
        scale_out.fill_(_empty_scale_value(ue8m0))
    elif x.numel():
        _fp8_quant_dynamic(x, out, scale_out, PER_TOKEN_HEAD, 0, bool(ue8m0))
    return out, scale_out
