"""The CUDA extension of hpc_common, built on first use (see hpc_common.jit)."""

from pathlib import Path

from .jit import ExtensionSpec

SPEC = ExtensionSpec.for_package("_hpc_common_C", Path(__file__).resolve().parent)


def load():
    return SPEC.load()
