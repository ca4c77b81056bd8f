"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec

_PACKAGE_DIR = Path(__file__).resolve().parent
SPEC = ExtensionSpec.for_package("_hpc_attention_C", _PACKAGE_DIR)
_TIMELINE_SPEC = None


def load():
    return SPEC.load()


def load_timeline():
    """The same sources built with HPC_ATTN_TIMELINE=1: the decode kernel records per-CTA event
    stamps (decode_timeline.cuh; scripts/timeline_decode.py). Diagnostics only, so it is made on
    first use and not listed for `hpc_common.jit.prebuild`."""
    global _TIMELINE_SPEC
    if _TIMELINE_SPEC is None:
        _TIMELINE_SPEC = ExtensionSpec(name="_hpc_attention_timeline_C", sources=SPEC.sources,
                                       include_dirs=SPEC.include_dirs, cuda_flags=["-DHPC_ATTN_TIMELINE=1"])
    return _TIMELINE_SPEC.load()
