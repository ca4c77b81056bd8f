"""Output poisoning: fill buffers with values a correct kernel must overwrite."""

from __future__ import annotations

import torch


def poison_(t: torch.Tensor) -> torch.Tensor:
    """NaN for floating tensors (0xFF bytes for FP8, a NaN in E4M3 and E5M2), -1 bytes for
    integers. Returns `t`."""
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        t.view(torch.uint8).fill_(0xFF)
    elif t.is_floating_point():
        t.fill_(float("nan"))
    else:
        t.view(torch.uint8).fill_(0xFF)
    return t


def poisoned_empty(*shape, dtype: torch.dtype, device) -> torch.Tensor:
    return poison_(torch.empty(*shape, dtype=dtype, device=device))
