"""The CUDA extension of hpc_common, built on first use (see hpc_common.jit)."""

from pathlib import Path

from .jit import ExtensionSpec

SPEC = ExtensionSpec.for_package("_hpc_common_C", Path(__file__).resolve().parent)


def load():
    return SPEC.load()


def load_variant(*defines: str):
    """The same sources built with extra -D switches (ExtensionSpec.variant), e.g. the FP8 vector paths'
    cache hints (fp8_primitives.cuh, HPC_FP8_LOAD_HINT / HPC_FP8_STORE_HINT) for the benchmark's A/B
    rows. Made on first use, not listed for `hpc_common.jit.prebuild`."""
    return SPEC.variant(*defines).load() if defines else SPEC.load()
