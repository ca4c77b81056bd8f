"""The CUDA extension of hpc_router_gemm, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec, variant_tag  # noqa: F401 (variant_tag: tests, tools)

SPEC = ExtensionSpec.for_package("_hpc_router_gemm_C", Path(__file__).resolve().parent)


def load():
    return SPEC.load()


def load_variant(*defines: str):
    """The same sources built with extra -D switches (ExtensionSpec.variant), e.g. the per-CTA
    timeline build (-DHPC_ROUTER_TIMELINE=1, router_gemm.DIAG)."""
    return SPEC.variant(*defines).load()
