"""hpc-router-gemm: BF16 x FP32 router GEMM for Hopper (two BF16 tensor-core products with a
weight split made once, an exact FP32 CUDA-core path for small M)."""

from ._version import __version__
from .router_gemm import plan_for, router_gemm
from .weight import RouterWeight, StaleWeightError, prepare, stale_weights

__all__ = ["RouterWeight", "StaleWeightError", "__version__", "plan_for", "prepare", "router_gemm", "stale_weights"]
