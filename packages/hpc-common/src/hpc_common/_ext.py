"""The CUDA extension of hpc_common, built on first use (see hpc_common.jit)."""

from pathlib import Path

from .jit import ExtensionSpec

_HERE = Path(__file__).resolve().parent

SPEC = ExtensionSpec(
    name="_hpc_common_C",
    sources=sorted((_HERE / "csrc").glob("*.cu")) + [_HERE / "csrc" / "bindings.cpp"],
    include_dirs=[_HERE / "include"],
)


def load():
    return SPEC.load()
