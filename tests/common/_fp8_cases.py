"""Shared by the FP8 quantisation tests: one way to call each mode, its reference, inputs
with special values, and a bitwise comparison that sees the padding of column-major scales."""

from __future__ import annotations

import torch

from hpc_common import fp8
from hpc_common.fp8 import reference as ref
from hpc_common.testing import assert_bitwise_equal

# mode name -> input ndim
MODES = {
    "per_tensor": 2,
    "per_tensor_static": 2,
    "per_token": 2,
    "group": 2,
    "group_col": 2,
    "per_head": 3,
}
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
STATIC_SCALE = 0.0123  # any positive float32; a device tensor in the tests


def run(mode: str, x: torch.Tensor, *, ue8m0: bool = False, group_size: int = 128, out=None, scale_out=None,
        static_scale=None):
    if mode == "per_tensor":
        return fp8.quantize_per_tensor(x, ue8m0=ue8m0, out=out, scale_out=scale_out)
    if mode == "per_tensor_static":
        s = static_scale if static_scale is not None else torch.tensor([STATIC_SCALE], device=x.device)
        return fp8.quantize_per_tensor(x, s, out=out)
    if mode == "per_token":
        return fp8.quantize_per_token(x, ue8m0=ue8m0, out=out, scale_out=scale_out)
    if mode in ("group", "group_col"):
        return fp8.quantize_per_token_group(x, group_size, column_major_scales=mode == "group_col", ue8m0=ue8m0,
                                            out=out, scale_out=scale_out)
    if mode == "per_head":
        return fp8.quantize_per_token_head(x, ue8m0=ue8m0, out=out, scale_out=scale_out)
    raise KeyError(mode)


def run_ref(mode: str, x: torch.Tensor, *, ue8m0: bool = False, group_size: int = 128, static_scale=None):
    if mode == "per_tensor":
        return ref.quantize_per_tensor_ref(x, ue8m0=ue8m0)
    if mode == "per_tensor_static":
        s = static_scale if static_scale is not None else torch.tensor([STATIC_SCALE], device=x.device)
        return ref.quantize_per_tensor_ref(x, s)
    if mode == "per_token":
        return ref.quantize_per_token_ref(x, ue8m0=ue8m0)
    if mode in ("group", "group_col"):
        return ref.quantize_per_token_group_ref(x, group_size, ue8m0=ue8m0, column_major_scales=mode == "group_col")
    if mode == "per_head":
        return ref.quantize_per_token_head_ref(x, ue8m0=ue8m0)
    raise KeyError(mode)


def shape_for(mode: str, m: int, n: int, heads: int = 4) -> tuple[int, ...]:
    return (m, heads, n) if MODES[mode] == 3 else (m, n)


def make_input(shape, dtype: torch.dtype, seed: int, *, special: bool = True, device="cpu") -> torch.Tensor:
    """Normal values with a per-row magnitude spread over 1e-3..1e3, and (with `special`) a
    zero row, NaN, +-Inf, a huge finite value, a denormal and a negative zero. Built on the
    CPU from `seed` so that every device sees the same input."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float32)
    rows = x.reshape(-1, shape[-1]) if x.numel() else x.reshape(0, 1)
    rows *= torch.pow(10.0, torch.empty(rows.shape[0], 1).uniform_(-3, 3, generator=g))
    if special and x.numel() > 8:
        flat = rows.reshape(-1)
        n = flat.numel()
        idx = torch.randint(0, n, (8,), generator=g)
        big = 1e30 if dtype != torch.float16 else 6e4
        vals = [float("nan"), float("inf"), float("-inf"), big, -big, 1e-40 if dtype != torch.float16 else 1e-7,
                -0.0, -float("nan")]
        for i, v in zip(idx.tolist(), vals):
            flat[i] = v
        if rows.shape[0] > 2:
            rows[rows.shape[0] // 2] = 0.0  # a zero row
    return x.to(dtype).to(device)


def scale_storage(s: torch.Tensor) -> torch.Tensor:
    """The whole buffer behind a column-major group scale (padding rows included)."""
    if s.dim() == 2 and s.shape[0] > 1 and s.shape[1] > 0 and s.stride(0) == 1 and s.stride(1) >= s.shape[0]:
        return torch.as_strided(s, (s.shape[1], s.stride(1)), (s.stride(1), 1))
    return s


def assert_same(actual, expected, *, what: str = "") -> None:
    q, s = actual
    qr, sr = expected
    assert_bitwise_equal(q.view(torch.uint8).cpu(), qr.view(torch.uint8).cpu(), name=f"{what} q")
    assert tuple(s.shape) == tuple(sr.shape), f"{what} scale shape {tuple(s.shape)} != {tuple(sr.shape)}"
    assert s.stride() == sr.stride() or s.numel() <= 1, f"{what} scale strides {s.stride()} != {sr.stride()}"
    assert_bitwise_equal(scale_storage(s).cpu(), scale_storage(sr).cpu(), name=f"{what} scale")


def kernel_names(fn) -> list[str]:
    """Names of the CUDA kernels `fn` launched (torch profiler): tests check which kernel served a shape."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]

