"""The CUDA extension of hpc_router_gemm, built on first use (see hpc_common.jit)."""

import re
from pathlib import Path

from hpc_common.jit import ExtensionSpec

SPEC = ExtensionSpec.for_package("_hpc_router_gemm_C", Path(__file__).resolve().parent)

_VARIANTS: dict[tuple[str, ...], ExtensionSpec] = {}


def load():
    return SPEC.load()


def load_timeline():
    """The same sources built with HPC_ROUTER_TIMELINE=1: the BF16x2 wgmma kernel records per-CTA
    event stamps (router_timeline.cuh; scripts/timeline_large_m.py). Diagnostics only."""
    return load_variant("-DHPC_ROUTER_TIMELINE=1")


def variant_tag(defines: tuple[str, ...]) -> str:
    """A name for a switch set, e.g. ("-DHPC_ROUTER_TIMELINE=1",) -> HPC_ROUTER_TIMELINE_1."""
    return re.sub(r"\W+", "_", "_".join(d.removeprefix("-D") for d in defines)).strip("_")


def load_variant(*defines: str):
    """The same sources built with extra -D switches. Made on first use and cached per switch
    set (the module is named after it), so it never replaces the library's build; not listed for
    `hpc_common.jit.prebuild`, which walks the specs made at import."""
    spec = _VARIANTS.get(defines)
    if spec is None:
        spec = ExtensionSpec(name=f"_hpc_router_gemm_{variant_tag(defines)}_C", sources=SPEC.sources,
                             include_dirs=SPEC.include_dirs, cuda_flags=list(defines))
        _VARIANTS[defines] = spec
    return spec.load()
