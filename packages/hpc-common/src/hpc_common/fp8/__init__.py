"""FP8 E4M3 quantisation kernels (SM90) and their pure-torch references.

    from hpc_common.fp8 import quantize_per_token_group
    q, s = quantize_per_token_group(x, 128, column_major_scales=True)

Semantics (rounding, saturation, NaN/Inf, zero rows, scale layouts): reference.py and
packages/hpc-common/FP8_DESIGN.md. Importing this module builds nothing and touches no GPU;
the extension is compiled (or loaded from the JIT cache) at the first call.
"""

from . import reference
from .quant import (
    quantize_per_tensor,
    quantize_per_token,
    quantize_per_token_group,
    quantize_per_token_head,
)

__all__ = [
    "quantize_per_tensor",
    "quantize_per_token",
    "quantize_per_token_group",
    "quantize_per_token_head",
    "reference",
]
