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


# The FP8 kernels' build-switch variants: the FP8 benchmark's A/B rows (benchmarks/bench_fp8_quant.py, by
# these names; quant.EXT_DEFINES), which CI compiles (tools/compile_variants.py) so that no path behind a
# switch rots. The switches and why each exists: fp8_quant_tile.cuh.
# - ours_row_tile_shared: as many rows per row-tile CTA as 256 threads hold, also for multi-warp teams (the
#   default before fc77e29's run);
# - ours_nan_fixup: AmaxAcc and the NaN fix-up on every thread (the kernels before the twenty-fifth session);
# - ours_col_finite: the column tile kernel with the finite fast path too (measured 0.25 us slower; edc8e5e's
#   A/B named the rows without it `ours_col_nan_fixup`);
# - ours_row_tile_four: rows of 3 x (team) vectors with 4 vectors per lane (N = 1536, as before);
# - ours_long_row_eight: rows of 1025-1792 vectors with 8 vectors per lane (N = 14336, as before);
# - ours_cover_partial: covers of whole vectors with the partial-vector code too (group-128 N = 2880; the default
#   before the twenty-sixth session, 0.8 us slower; a27c95a's and 1b62255's A/Bs name the whole-vector rows
#   `ours_cover_whole`);
# - ours_long_row_sixteen: rows of 2049-3584 vectors with 16 vectors per lane on up to 224 lanes, 1793-2048 with 8
#   (N = 28672; the default before the twenty-sixth session, 1.4 us slower; 1b62255's A/B names the 512-thread
#   rows `ours_wide_long_rows`);
# - ours_cover_threads_256: the covers (64 threads since the twenty-sixth session) and odd rows (128) on 256-thread
#   CTAs, as before (0.4-1.8 us slower; 70b01d9's A/B names the 128- / 64-thread rows `ours_cover_threads_128/_64`);
# - ours_odd_group_covers: odd group-128 rows of 2-byte inputs on the misaligned covers (fp8_quant_odd_row_tile_kernel)
#   instead of one row per CTA (fp8_quant_odd_group_row_kernel; the default from the thirty-third session).
# (The thirty-third session's ours_odd_group_general_path measured the one-row kernel without a separate path for
# its interior quads, which was 2.2 / 2.7 us slower cold / back to back and was removed:
# fp8_quant_odd_group_rows_interior_ab_682b15a.*.)
# (The twenty-sixth session's ours_row_warp_six, rows of 129-192 vectors on one warp at 6 per lane, measured null at
# N = 1536 and was removed; its rows are in fp8_quant_row_warp_six_ab_fea367c.*. ours_touch_params, every parameter
# line touched at entry, measured null to slower and was removed: fp8_quant_touch_params_ab_4c48a4c.*.)
# (dce68fe's stores-last switch, measured null to slower, was removed; its rows are in
# fp8_quant_stores_last_ab_dce68fe.*.)
FP8_VARIANTS = {
    "ours_row_tile_shared": ("-DHPC_FP8_ROW_TILE_ONE_ROW=0",),
    "ours_row_tile_one_row_64": ("-DHPC_FP8_ROW_TILE_OWN_CTA_MIN_TEAM=64",),
    "ours_nan_fixup": ("-DHPC_FP8_FINITE_FAST_PATH=0",),
    "ours_col_finite": ("-DHPC_FP8_COL_FINITE_FAST_PATH=1",),
    "ours_row_tile_four": ("-DHPC_FP8_ROW_TILE_THREE=0",),
    "ours_long_row_eight": ("-DHPC_FP8_LONG_ROW_FULL_TEAMS=0",),
    "ours_cover_partial": ("-DHPC_FP8_COVER_WHOLE_VECTORS=0",),
    "ours_long_row_sixteen": ("-DHPC_FP8_WIDE_LONG_ROWS=0",),
    "ours_cover_threads_256": ("-DHPC_FP8_COVER_CTA_THREADS=256", "-DHPC_FP8_ODD_COVER_CTA_THREADS=256"),
    "ours_odd_group_covers": ("-DHPC_FP8_ODD_GROUP_ROWS=0",),
}
BUILD_VARIANTS = tuple(FP8_VARIANTS.values())
