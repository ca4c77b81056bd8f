"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

_PACKAGE_DIR = Path(__file__).resolve().parent
SPEC = ExtensionSpec.for_package("_hpc_attention_C", _PACKAGE_DIR)


def load():
    return SPEC.load()


def load_timeline():
    """The same sources built with HPC_ATTN_TIMELINE=1: the decode kernel records per-CTA event
    stamps (decode_timeline.cuh; scripts/timeline_decode.py). Diagnostics only, so it is made on
    first use and not listed for `hpc_common.jit.prebuild`."""
    return load_variant("timeline", "-DHPC_ATTN_TIMELINE=1")


_VARIANTS: dict[str, ExtensionSpec] = {}


def load_variant(tag: str, *defines: str):
    """The same sources built with extra -D switches (diagnostics and A/B rows of the benchmark:
    e.g. the decode consumer's previous schedule). Made on first use, cached per tag; not
    listed for `hpc_common.jit.prebuild`."""
    spec = _VARIANTS.get(tag)
    if spec is None:
        spec = ExtensionSpec(name=f"_hpc_attention_{tag}_C", sources=SPEC.sources, include_dirs=SPEC.include_dirs,
                             cuda_flags=list(defines))
        _VARIANTS[tag] = spec
    return spec.load()
