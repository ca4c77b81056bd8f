"""Argument checks that raise errors naming the argument (never a device fault later)."""

from __future__ import annotations

from typing import Iterable

import torch


def check_tensor(
    t: object,
    arg: str,
    op: str,
    *,
    dtype: torch.dtype | Iterable[torch.dtype] | None = None,
    ndim: int | None = None,
    shape: tuple[int | None, ...] | None = None,
    device: torch.device | None = None,
    contiguous: bool = False,
    last_dim_contiguous: bool = False,
) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if dtype is not None:
        allowed = (dtype,) if isinstance(dtype, torch.dtype) else tuple(dtype)
        if t.dtype not in allowed:
            names = " or ".join(str(d).replace("torch.", "") for d in allowed)
            raise TypeError(f"{op}: {arg} must be {names}, got {str(t.dtype).replace('torch.', '')}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{op}: {arg} must be {ndim}-D, got shape {tuple(t.shape)}")
    if shape is not None:
        if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{op}: {arg} must have shape {want}, got {list(t.shape)}")
    if device is not None and t.device != device:
        raise ValueError(f"{op}: {arg} must be on {device}, got {t.device}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{op}: {arg} must be contiguous, got strides {t.stride()}")
    if last_dim_contiguous and t.dim() > 0 and t.stride(-1) != 1 and t.shape[-1] > 1:
        raise ValueError(f"{op}: {arg} must have a unit stride in its last dimension, got strides {t.stride()}")
    return t


def check_aligned(t: torch.Tensor, arg: str, op: str, nbytes: int = 16) -> None:
    if t.data_ptr() % nbytes:
        raise ValueError(f"{op}: {arg} must be {nbytes}-byte aligned (data_ptr {t.data_ptr():#x})")
