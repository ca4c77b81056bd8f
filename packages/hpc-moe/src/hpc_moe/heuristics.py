"""Shape heuristics of the fused MoE: the pipeline window, which Down form a window runs, and the sizes
that follow from that choice. Pure functions of host integers (never of device data), so a captured
CUDA graph replays with new routing. DESIGN.md, "Down: two forms", has the byte floors behind them.

Down forms:
  "tile"   (moe_down.cuh): a CTA owns a 16-row H tile and a chunk of tokens across every active
           expert and sums the top-k in shared memory. Reads each w2 byte once, but each pass is one
           expert's 3-6 KB tile with <= 16 pairs: latency bound once many experts are active
           (H200, Hy3 TP8 FP8, T = 256: 151 MB of w2 in ~190 us, 0.8 TB/s).
  "expert" (moe_down_experts.cuh + moe_topk_reduce.cuh): a CTA owns (active expert, slab of <= 128
           of its pairs, block of 16-row tiles), streams the block's contiguous weights (48 KB) into
           shared memory with one bulk copy per warp, multiplies them by the slab's pairs 16 columns
           at a time and writes per-pair BF16 partial rows y [pairs, H]; a second kernel sums each
           token's top-k partials in j order. Costs the partials' bytes (written once, read once).
The tile form may be split over experts (down_tile_splits): S CTAs per (chunk, tile), per-pair partial rows
summed by the same top-k reduce kernel.
"""

from __future__ import annotations

# The Gate-Up kernel holds the index of every pair of its window in shared memory (4 bytes each):
# 8192 pairs = 32 KB, which leaves room for its resident CTAs. Longer batches run the pipeline
# window after window (same stream, so each window's Gate-Up waits for the previous Down).
MAX_WINDOW_PAIRS = 8192

DOWN_TILE, DOWN_EXPERT = "tile", "expert"

# Measured (H200, tools/probes/moe/time_down_forms.py at bbc6769, Hy3 TP8: E = 192, top-8, I = 192, whole
# call cold, us, tile / expert form): FP8 block T = 64 182.4 / 167.8, T = 128 215.0 / 194.4, T = 256 327.8 /
# 226.1, T = 1024 898.4 / 570.9; BF16 T = 64 235.8 / 245.0, T = 128 278.0 / 268.5, T = 256 340.3 / 294.4,
# T = 1024 1063.1 / 843.4. So the expert form from 512 pairs on, with on average (uniform routing over all
# `num_experts`) at least 2.5 pairs per expert for FP8 weights (T = 64 gives 2.67 and wins) and 4 for BF16
# (2.67 loses, 5.33 wins; in between not measured). T = 32 (256 pairs) was not measured: tile form.
# Below that most CTAs would multiply a weight block by one or two pairs and the partials buy nothing.
EXPERT_DOWN_MIN_PAIRS = 512
# pairs per expert, as (numerator, denominator): FP8 2.5, BF16 4
EXPERT_DOWN_MIN_PAIRS_PER_EXPERT = {True: (5, 2), False: (4, 1)}
# A warp streams this many weight bytes per CTA (whole 16-row tiles, at least one): 4 warps x 12 KB
# = 48 KB per CTA, 3 CTAs per SM with the B chunk and the output staging (144 KB of weights in flight
# per SM, above the ~32 KB per SM that 4.27 TB/s needs at ~1 us latency).
EXPERT_DOWN_WARP_BYTES = 12 << 10
# and at most 4 tiles (a CTA's block at most 256 rows of H), which bounds the output staging (16 pairs x
# 256 rows BF16) for small I.
EXPERT_DOWN_MAX_TILES_PER_WARP = 4
# Larger tiles (FP8 I > 768, BF16 I > 384, e.g. Hy3 EP8's I = 1536) stay on the tile form: one tile per
# warp would leave too little shared memory for two CTAs per SM, and the tile form's passes are
# already 24-48 KB there.
EXPERT_DOWN_MAX_TILE_BYTES = 12 << 10
# Pairs per expert-form task: a hot expert's pairs are cut into slabs so that it spreads over many
# CTAs; each slab re-reads the expert's weight block (from L2 when the slabs run together).
EXPERT_DOWN_SLAB_PAIRS = 128
W2_TILE_ROWS = 16
WARPS = 4
# Tile-form Down over few H tiles (H = 2048: 128 CTAs, each with ~24 KB of w2 loads in flight, ~3 MB over the
# GPU, well under what 4.27 TB/s needs): S CTAs share a (token chunk, tile), each over every S-th group of 4
# active experts, writing per-pair partial rows that the top-k reduce sums (moe_down.cuh). S fills one wave of
# resident CTAs (3 per SM: 147 BF16 / 165 FP8 registers x 128 threads), or two from
# DOWN_TILE_TWO_WAVE_MIN_PAIRS pairs, and every warp keeps an expert.
DOWN_TILE_CTAS_PER_SM = 3
MAX_DOWN_TILE_SPLITS = 8
# Measured (H200, tools/probes/moe/time_moe.py at 7e33cb6, whole call cold, us, tile form at S = 1 / 2 / 3 / 4;
# results in benchmarks/results/h200/moe_tile_splits/moe_tile_splits.json): Qwen3-30B-A3B (H = 2048, 128 CTAs per chunk) BF16
# T = 16 249 / 208 / 203 / 216, T = 64 399 / 323 / 314 / 336; FP8 block T = 16 230 / 171 / 148 / 166. Hy3 TP8
# (H = 4096, 256 CTAs) FP8 block T = 1 20.2 / 24.4 / 25.0 / 26.5 (small windows lose to the reduce kernel),
# T = 16 97.5 / 101 / 89.9 / 94.1 (S = 2 leaves a partial second wave; S = 3 fills two).
DOWN_TILE_TWO_WAVE_MIN_PAIRS = 128


def window_tokens(top_k: int) -> int:
    """Tokens per pipeline window."""
    return max(1, MAX_WINDOW_PAIRS // top_k)


def w2_tile_bytes(intermediate_size: int, fp8: bool) -> int:
    """Bytes of one prepared 16-row w2 tile (16 x I weights)."""
    return W2_TILE_ROWS * intermediate_size * (1 if fp8 else 2)


def expert_down_supported(intermediate_size: int, fp8: bool) -> bool:
    return w2_tile_bytes(intermediate_size, fp8) <= EXPERT_DOWN_MAX_TILE_BYTES


def down_form(num_pairs: int, num_experts: int, intermediate_size: int, fp8: bool) -> str:
    """The Down form of a window of `num_pairs` = tokens x top-k pairs routed over `num_experts`
    global experts (all ranks: the expected pairs per expert do not depend on EP)."""
    if not expert_down_supported(intermediate_size, fp8):
        return DOWN_TILE
    num, den = EXPERT_DOWN_MIN_PAIRS_PER_EXPERT[bool(fp8)]
    if num_pairs >= EXPERT_DOWN_MIN_PAIRS and den * num_pairs >= num * num_experts:
        return DOWN_EXPERT
    return DOWN_TILE


def down_tile_splits(num_chunks: int, hidden_size: int, num_pairs: int, num_local_experts: int, num_sms: int) -> int:
    """Expert splits S of a tile-form Down window (gridDim.z) over its chunks x H/16 grid: as many as one wave
    of resident CTAs holds when the grid fits in it twice (H = 2048: 3); else as many as two waves hold once the
    window has DOWN_TILE_TWO_WAVE_MIN_PAIRS pairs (Hy3, H = 4096, T = 16: 3), and 1 below that (Hy3 T <= 4).
    At most one group of WARPS active experts per split."""
    base = max(1, num_chunks) * (hidden_size // W2_TILE_ROWS)
    resident = DOWN_TILE_CTAS_PER_SM * num_sms
    if 2 * base <= resident:
        by_grid = resident // base
    elif num_pairs >= DOWN_TILE_TWO_WAVE_MIN_PAIRS:
        by_grid = 2 * resident // base
    else:
        by_grid = 1
    by_experts = -(-min(num_local_experts, num_pairs) // WARPS)
    return max(1, min(by_grid, by_experts, MAX_DOWN_TILE_SPLITS))


def expert_down_tiles_per_warp(intermediate_size: int, fp8: bool) -> int:
    return max(1, min(EXPERT_DOWN_MAX_TILES_PER_WARP, EXPERT_DOWN_WARP_BYTES // w2_tile_bytes(intermediate_size, fp8)))


def expert_down_block_tiles(intermediate_size: int, fp8: bool) -> int:
    """16-row tiles per expert-form CTA (the last block of H may hold fewer)."""
    return WARPS * expert_down_tiles_per_warp(intermediate_size, fp8)


def expert_down_task_bound(num_pairs: int, num_local_experts: int, slab: int = EXPERT_DOWN_SLAB_PAIRS) -> int:
    """An upper bound on the (expert, slab) tasks of any routing of `num_pairs` pairs: sum over the
    active experts of ceil(c_e / slab) <= floor(pairs / slab) + number of active experts."""
    return max(1, num_pairs // slab + min(num_local_experts, num_pairs))


def partial_rows(max_tokens: int, top_k: int) -> int:
    """Rows of the workspace's partials y [rows, H] (and the capacity of its index): one window's pairs
    at most, so y never exceeds MAX_WINDOW_PAIRS x H BF16 (64 MB at H = 4096)."""
    return min(max_tokens * top_k, MAX_WINDOW_PAIRS)


def index_words(rows: int) -> int:
    """int32 words of the Down index the Gate-Up kernel writes for the expert form (moe_params.h,
    DownIndex): the active count, the active experts, their range starts (+1) and the pair list."""
    return 3 * rows + 2
