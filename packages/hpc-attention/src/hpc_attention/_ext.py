"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec, variant_tag  # noqa: F401 (variant_tag: tools/compile_variants.py)

_PACKAGE_DIR = Path(__file__).resolve().parent
SPEC = ExtensionSpec.for_package("_hpc_attention_C", _PACKAGE_DIR)


def load():
    return SPEC.load()


def load_timeline():
    """The same sources built with HPC_ATTN_TIMELINE=1: the decode kernel records per-CTA event
    stamps (decode_timeline.cuh; scripts/timeline_decode.py). Diagnostics only, so it is made on
    first use and not listed for `hpc_common.jit.prebuild`."""
    return load_variant("-DHPC_ATTN_TIMELINE=1")


# The decode kernels' build-switch variants that benchmarks and tests load (load_variant) and CI
# compiles (tools/compile_variants.py): the consumers' schedule before the score look-ahead (the benchmark's
# A/B rows). (HPC_ATTN_TOUCH_PARAMS, the parameter block's lines touched at entry, measured null in the
# twenty-seventh session and was removed: decode_attention_touch_params_ab_3e0dcf2.*.)
NO_LOOKAHEAD = ("-DHPC_ATTN_SCORE_LOOKAHEAD=0",)
# The split merge's critical path (decode_merge_in_kernel.cuh; twenty-seventh session, `--diag-rows merge`): the
# last arrival's counter reset after its acquire fence, two rows per helper thread loaded together, both.
MERGE_LATE_RESET = ("-DHPC_ATTN_MERGE_LATE_RESET=1",)
MERGE_ROWS2 = ("-DHPC_ATTN_MERGE_ROWS=2",)
MERGE_FAST = MERGE_LATE_RESET + MERGE_ROWS2
# The copy issuer laid out right after the prologue (paged_decode.cuh, `--diag-rows layout`).
PRODUCER_FALLTHROUGH = ("-DHPC_ATTN_PRODUCER_FALLTHROUGH=1",)
BUILD_VARIANTS = (NO_LOOKAHEAD, MERGE_LATE_RESET, MERGE_ROWS2, MERGE_FAST, PRODUCER_FALLTHROUGH)


def load_variant(*defines: str):
    """The same sources built with extra -D switches (ExtensionSpec.variant: diagnostics and A/B rows
    of the benchmark, e.g. the decode consumer's previous schedule)."""
    return SPEC.variant(*defines).load()
