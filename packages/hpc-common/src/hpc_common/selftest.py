"""Self-test kernels of the launch utilities (used by the test suite and the report)."""

from __future__ import annotations

import torch

from . import _ext
from .launch import get_pdl, require_hopper, stream_ptr


def pdl_chain(x: torch.Tensor, *, pdl: bool | None = None, spin_cycles: int = 20000) -> torch.Tensor:
    """z = y*y + roll(y, -4096) with y = 2x + 1, computed by two kernels chained with PDL
    (`pdl=None` takes the process-wide switch). x: contiguous float32 CUDA tensor."""
    require_hopper(x, "x", "pdl_chain")
    if x.dtype != torch.float32 or not x.is_contiguous() or x.dim() != 1:
        raise ValueError("pdl_chain: x must be a contiguous 1-D float32 tensor")
    y = torch.empty_like(x)
    z = torch.empty_like(x)
    _ext.load().pdl_chain(x.data_ptr(), y.data_ptr(), z.data_ptr(), x.numel(), spin_cycles,
                          get_pdl() if pdl is None else bool(pdl), stream_ptr(x.device))
    return z


def pdl_chain_reference(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 + 1
    return y * y + torch.roll(y, shifts=-4096)
