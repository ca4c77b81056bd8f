"""The CUDA extension of hpc_router_gemm, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

SPEC = ExtensionSpec.for_package("_hpc_router_gemm_C", Path(__file__).resolve().parent)


def load():
    return SPEC.load()
