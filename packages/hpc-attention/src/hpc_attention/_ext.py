"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

_HERE = Path(__file__).resolve().parent

SPEC = ExtensionSpec(
    name="_hpc_attention_C",
    sources=sorted((_HERE / "csrc").glob("*.cu")) + [_HERE / "csrc" / "bindings.cpp"],
    include_dirs=[_HERE / "include"],
)


def load():
    return SPEC.load()
