"""FP8 E4M3 quantisation on SM90: per-tensor (static or dynamic), per-token, per-token-group
and per-token-per-head. Semantics in hpc_common/fp8/reference.py; the kernels
(include/hpc_common/fp8_quant*.cuh; which one serves a call: heuristics.py) match the reference bit for bit.

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
from . import heuristics as _heur
from . import reference as _ref

FP8 = torch.float8_e4m3fn
INPUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
PER_TENSOR, PER_TOKEN, PER_TOKEN_GROUP, PER_TOKEN_HEAD = (_heur.PER_TENSOR, _heur.PER_TOKEN, _heur.PER_TOKEN_GROUP,
                                                          _heur.PER_TOKEN_HEAD)
_SCALE_DYNAMIC, _SCALE_STATIC = _heur.SCALE_DYNAMIC, _heur.SCALE_STATIC


def _launch(x: torch.Tensor, out: torch.Tensor, scale_out: Optional[torch.Tensor], mode: int,
            group_size: int, ue8m0: bool, scale_source: int, static_scale: Optional[torch.Tensor],
            static_value: float) -> None:
    """Fill the launcher's QuantParams (the kernel choice: heuristics.launch_fields) and run it."""
    from .. import _ext

    ext = _ext.load()
    p = ext.QuantParams()
    for name, value in _heur.launch_fields(x, out, scale_out, mode, group_size, scale_source).items():
        setattr(p, name, value)
    p.num_sms = get_num_sms(x.device)
    workspace = None  # kept alive until the launch is enqueued
    if p.per_tensor_dynamic:  # one partial amax per block of the amax pass
        workspace = torch.empty(ext.FP8_AMAX_BLOCKS_PER_SM * p.num_sms, dtype=torch.int32, device=x.device)
        p.workspace = workspace.data_ptr()
    p.x, p.q = x.data_ptr(), out.data_ptr()
    p.scale = scale_out.data_ptr() if scale_out is not None else 0
    p.static_scale = static_scale.data_ptr() if static_scale is not None else 0
    p.static_value = float(static_value)
    p.ue8m0 = bool(ue8m0)
    ext.fp8_quant(p, get_pdl(), stream_ptr(x.device))


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
