"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

_PACKAGE_DIR = Path(__file__).resolve().parent
SPEC = ExtensionSpec.for_package("_hpc_attention_C", _PACKAGE_DIR)


def load():
    return SPEC.load()
