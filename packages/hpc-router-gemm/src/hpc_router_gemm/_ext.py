"""The CUDA extension of hpc_router_gemm, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

_HERE = Path(__file__).resolve().parent

SPEC = ExtensionSpec(
    name="_hpc_router_gemm_C",
    sources=[_HERE / "csrc" / "router_gemm.cu", _HERE / "csrc" / "bindings.cpp"],
    include_dirs=[_HERE / "include"],
)


def load():
    return SPEC.load()
