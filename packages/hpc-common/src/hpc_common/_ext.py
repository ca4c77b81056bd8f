"""The CUDA extension of hpc_common, built on first use (see hpc_common.jit)."""

from pathlib import Path

from .jit import ExtensionSpec

SPEC = ExtensionSpec.for_package("_hpc_common_C", Path(__file__).resolve().parent)


def load():
    return SPEC.load()


def load_variant(*defines: str):
    """The same sources built with extra -D switches (ExtensionSpec.variant), for A/B rows of the FP8
    benchmark (quant.EXT_DEFINES). Made on first use, not listed for `hpc_common.jit.prebuild`."""
    return SPEC.variant(*defines).load()
