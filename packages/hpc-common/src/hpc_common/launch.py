"""Process-wide launch knobs (getter/setter pairs) and device checks shared by all operators."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import torch

from . import env

_pdl_enabled: bool | None = None
_num_sms_override: int | None = None


def set_pdl(enabled: bool | None) -> None:
    """Turn Programmatic Dependent Launch on or off for every hpc-ops kernel launched after;
    None restores the default (HPC_PDL, on unless set to 0)."""
    global _pdl_enabled
    _pdl_enabled = None if enabled is None else bool(enabled)


def get_pdl() -> bool:
    return env.pdl_default() if _pdl_enabled is None else _pdl_enabled


@contextlib.contextmanager
def pdl_enabled(enabled: bool | None) -> Iterator[None]:
    """set_pdl(enabled) inside the block, and afterwards the setting from before it (including
    "no override": a saved get_pdl() would pin the default instead)."""
    global _pdl_enabled
    saved = _pdl_enabled
    set_pdl(enabled)
    try:
        yield
    finally:
        _pdl_enabled = saved


def set_num_sms(n: int | None) -> None:
    """Size persistent grids for `n` SMs (None: the device's count). Useful to leave SMs to
    a concurrent stream, or to test scheduling on a smaller part."""
    global _num_sms_override
    if n is not None and n < 1:
        raise ValueError(f"set_num_sms: n must be >= 1, got {n}")
    _num_sms_override = n


@functools.lru_cache(maxsize=None)
def _device_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def get_num_sms(device: torch.device | int | None = None) -> int:
    if _num_sms_override is not None:
        return _num_sms_override
    if env.num_sms_override() is not None:
        return env.num_sms_override()
    if device is None:
        idx = torch.cuda.current_device()
    elif isinstance(device, int):
        idx = device
    else:
        idx = device.index if device.index is not None else torch.cuda.current_device()
    return _device_sms(idx)


def stream_ptr(device: torch.device) -> int:
    """The raw cudaStream_t of torch's current stream on `device` (graph capture included)."""
    return torch.cuda.current_stream(device).cuda_stream


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def require_hopper(t: torch.Tensor, arg: str, op: str) -> None:
    """Raise a clear error unless `t` lives on an SM90 GPU (the kernels are built for sm_90a)."""
    if t.device.type != "cuda":
        raise ValueError(f"{op}: {arg} must be a CUDA tensor on an SM90 (Hopper) GPU, got device {t.device}")
    cap = _capability(t.device.index if t.device.index is not None else torch.cuda.current_device())
    if cap != (9, 0):
        raise RuntimeError(
            f"{op}: the hpc-ops kernels need an SM90 (Hopper: H100/H200/H20) GPU; "
            f"{arg} is on a device of compute capability {cap[0]}.{cap[1]}"
        )
