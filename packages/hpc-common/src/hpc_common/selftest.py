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


def smem_opt_in(x: torch.Tensor) -> torch.Tensor:
    """y[i] = x[n - 1 - i] + (i % 256), computed by one CTA through 48 KB of dynamic plus 1 KB of
    static shared memory: shows that hpc::launch_kernel opts such kernels in to the larger
    dynamic size (a launch without the opt-in fails). x: contiguous float32 CUDA tensor of
    SMEM_OPT_IN_FLOATS elements."""
    require_hopper(x, "x", "smem_opt_in")
    n = _ext.load().SMEM_OPT_IN_FLOATS
    if x.dtype != torch.float32 or not x.is_contiguous() or x.shape != (n,):
        raise ValueError(f"smem_opt_in: x must be a contiguous float32 tensor of shape ({n},)")
    y = torch.empty_like(x)
    _ext.load().smem_opt_in(x.data_ptr(), y.data_ptr(), stream_ptr(x.device))
    return y


def smem_opt_in_reference(x: torch.Tensor) -> torch.Tensor:
    i = torch.arange(x.numel(), device=x.device)
    return torch.flip(x, dims=[0]) + (i % 256).to(x.dtype)
