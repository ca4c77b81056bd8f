"""The CUDA extension of hpc_attention, built on first use (see hpc_common.jit)."""

from pathlib import Path

from hpc_common.jit import ExtensionSpec, variant_tag  # noqa: F401 (variant_tag: tools/compile_variants.py)

_PACKAGE_DIR = Path(__file__).resolve().parent
SPEC = ExtensionSpec.for_package("_hpc_attention_C", _PACKAGE_DIR)


def load():
    return SPEC.load()


def load_timeline(*defines: str):
    """The same sources built with HPC_ATTN_TIMELINE=1 (and any other build switches): the decode kernel
    records per-CTA event stamps (decode_timeline.cuh; scripts/timeline_decode.py). Diagnostics only, so it
    is made on first use and not listed for `hpc_common.jit.prebuild`."""
    return load_variant("-DHPC_ATTN_TIMELINE=1", *defines)


# The decode kernels' build-switch variants that benchmarks and tests load (load_variant) and CI
# compiles (tools/compile_variants.py): the consumers' schedule before the score look-ahead, and the split merge
# with one row per helper thread at a time (before the twenty-seventh session), the prologue's and the task-end
# fold's earlier forms (the benchmark's A/B rows and the bitwise tests). The twenty-seventh session measured and
# removed eight more (the parameter-line touch, the merge counter's late reset, the copy issuer's layout, the maps'
# early prefetch, per-thread barrier inits, the producer's first copies peeled (two forms; the second measured in the
# twenty-eighth), the task end unrolled): NOTES.md, "Twenty-seventh session", with their results files; the
# twenty-eighth two (the fold's factors row-major, one hand-over arrival per consumer warp): "Twenty-eighth session".
NO_LOOKAHEAD = ("-DHPC_ATTN_SCORE_LOOKAHEAD=0",)
MERGE_ROWS1 = ("-DHPC_ATTN_MERGE_ROWS=1",)
# The prologue before the PDL wait (paged_decode_config.cuh, `--diag-rows prologue`): the earlier form that reads
# p.group there (the default before the twenty-seventh session).
PROLOGUE_READS_GROUP = ("-DHPC_ATTN_PROLOGUE_NO_PARAMS=0",)
# The task-end fold's earlier form, every consumer thread running every row's scalar chain (decode_task_fold.cuh; the
# bitwise tests and the timeline's variant).
FOLD_EACH_THREAD = ("-DHPC_ATTN_FOLD_ROW_SCALARS=0",)
# The fold's second step one column per thread (the default takes 4 adjacent columns with vector loads and stores;
# decode_task_fold.cuh), and that form with its store addresses computed at the fold from the parameters (the
# default pins them in registers from the task's start).
FOLD_SCALAR_COLUMNS = ("-DHPC_ATTN_FOLD_VECTOR=0",)
FOLD_ADDR_AT_FOLD = ("-DHPC_ATTN_FOLD_VECTOR=0", "-DHPC_ATTN_FOLD_ADDR_EARLY=0")
# The 8 group states of an item of more than 16 parts folded by fold_groups (the form before the twenty-ninth
# session; split_merge.cuh HPC_ATTN_MERGE_GROUP_PARTS): different bits, the combine kernel alike.
MERGE_FOLD_GROUPS = ("-DHPC_ATTN_MERGE_GROUP_PARTS=0",)
# A merge group's parts loaded in batches of 8 (split_merge.cuh HPC_ATTN_MERGE_GROUP_BATCH; the default takes 9, so
# the groups of 65-72-part items load in one round trip): different bits, the combine kernel alike.
MERGE_GROUP_BATCH8 = ("-DHPC_ATTN_MERGE_GROUP_BATCH=8",)
# One-level merges (and level 2's 8 group partials) in batches of 8 parts (split_merge.cuh HPC_ATTN_MERGE_BATCH; the
# default takes 9, so 9-part items load in one round trip): different bits for 9-16 parts, the combine kernel alike.
MERGE_BATCH8 = ("-DHPC_ATTN_MERGE_BATCH=8",)
# Every split part handed to the helper warps (decode_merge_in_kernel.cuh HPC_ATTN_CONSUMERS_MERGE_LAST; the default
# has the consumers merge their bin's last task): same bits.
HELPERS_MERGE_LAST = ("-DHPC_ATTN_CONSUMERS_MERGE_LAST=0",)
# Split parts that always arrive (decode_merge_in_kernel.cuh HPC_ATTN_ARRIVAL_PEEK; by default a part that saw every
# other part arrived before its own stores merges without arriving): same bits.
NO_ARRIVAL_PEEK = ("-DHPC_ATTN_ARRIVAL_PEEK=0",)
# Items of 17-24 parts merged in two levels (split_merge.cuh HPC_ATTN_ONE_LEVEL_PARTS; the default merges up to 24
# parts in one level, above 16 in batches of 12): different bits for 17-24 parts, the combine kernel alike.
ONE_LEVEL_16 = ("-DHPC_ATTN_ONE_LEVEL_PARTS=16",)
# decode(new_tokens=...) copying a whole lap of the ring before the PDL wait instead of 3 tiles (paged_decode_config.cuh
# HPC_ATTN_EARLY_TILES; the rotation benchmark's `--early-ab 0` row diag_early_kv_ring): same bits.
EARLY_KV_RING = ("-DHPC_ATTN_EARLY_TILES=0",)
BUILD_VARIANTS = (NO_LOOKAHEAD, MERGE_ROWS1, PROLOGUE_READS_GROUP, FOLD_EACH_THREAD, FOLD_SCALAR_COLUMNS,
                  FOLD_ADDR_AT_FOLD, MERGE_FOLD_GROUPS, MERGE_GROUP_BATCH8, MERGE_BATCH8, HELPERS_MERGE_LAST,
                  NO_ARRIVAL_PEEK, ONE_LEVEL_16, EARLY_KV_RING)


def load_variant(*defines: str):
    """The same sources built with extra -D switches (ExtensionSpec.variant: diagnostics and A/B rows
    of the benchmark, e.g. the decode consumer's previous schedule)."""
    return SPEC.variant(*defines).load()
