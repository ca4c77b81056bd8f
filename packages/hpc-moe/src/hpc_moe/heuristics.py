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


# ---- Gate-Up split-K (moe_gate_up_split.cuh; DESIGN.md, "Gate-Up split-K") -------------------------------
# A Gate-Up task is one (active expert, 16-row w13 tile); split-K cuts its K stages (128 bytes of every row:
# H / 128 stages FP8, H / 64 BF16) into S equal parts, each a CTA task, the last part to arrive summing them.
GATE_UP_MAX_SPLITS = 8
# Windows of at most this many pairs may split (T = 16 at top-8); the workspace's partials are sized for
# GATE_UP_MAX_SPLITS parts of this many pairs (1.5 MB at I = 192, 12 MB at I = 1536).
GATE_UP_SPLIT_MAX_PAIRS = 128
GATE_UP_CTAS_PER_SM = {True: 3, False: 2}  # moe_gate_up.cuh, gate_up_ctas_per_sm (shared-memory bound)


def gate_up_k_stages(hidden_size: int, fp8: bool) -> int:
    """128-byte K stages of a w13 tile row (the unit a split part holds a whole number of)."""
    return hidden_size * (1 if fp8 else 2) // 128


def gate_up_split_problem(splits: int, num_pairs: int, hidden_size: int, fp8: bool) -> str | None:
    """Why a window of `num_pairs` pairs cannot run the Gate-Up in `splits` parts, or None when it can."""
    if not isinstance(splits, int) or isinstance(splits, bool) or not 1 <= splits <= GATE_UP_MAX_SPLITS:
        return f"must be an int in 1..{GATE_UP_MAX_SPLITS}"
    stages = gate_up_k_stages(hidden_size, fp8)
    if stages % splits:
        return f"must divide the {stages} K stages of a w13 tile (H = {hidden_size}, fp8 = {fp8})"
    if splits > 1 and num_pairs > GATE_UP_SPLIT_MAX_PAIRS:
        return f"a window of {num_pairs} pairs cannot split (at most {GATE_UP_SPLIT_MAX_PAIRS} pairs)"
    return None


def gate_up_splits(num_pairs: int, num_local_experts: int, intermediate_size: int, hidden_size: int,
                   num_sms: int, fp8: bool) -> int:
    """The Gate-Up split-K parts of a window. 1 (no split) until the H200 measures the split
    (tools/probes/moe/time_gate_up_splits.py); predicted_gate_up_splits is the rule it is to confirm."""
    return 1


def gate_up_busiest_sm_bytes(tasks: int, splits: int, tile_bytes: int, num_sms: int, ctas_per_sm: int) -> int:
    """Weight bytes the busiest SM streams in a Gate-Up launch of `tasks` (expert, tile) tasks cut into `splits`
    parts, CTAs spread evenly over the SMs (grid = min(parts, resident CTAs), CTA c takes parts c, c + grid, ...)."""
    parts = tasks * splits
    grid = max(1, min(parts, num_sms * ctas_per_sm))
    return -(-grid // num_sms) * -(-parts // grid) * (tile_bytes // splits)


# A split must cut the busiest SM's bytes by at least this much to pay for its added L2 round trip (the last
# part reads the other parts' sums) and one atomic per part: a PREDICTION, to be replaced by the H200's numbers.
GATE_UP_SPLIT_MIN_GAIN = 0.8


def predicted_gate_up_splits(num_pairs: int, num_local_experts: int, intermediate_size: int, hidden_size: int,
                             num_sms: int, fp8: bool) -> int:
    """PREDICTION, not measured: the fewest parts S (dividing the K stages, at most GATE_UP_MAX_SPLITS) that
    minimise gate_up_busiest_sm_bytes, when that is at most GATE_UP_SPLIT_MIN_GAIN of the unsplit launch's;
    windows of at most GATE_UP_SPLIT_MAX_PAIRS pairs. The (expert, tile) tasks are bounded by
    I/8 x min(E_local, pairs) like the grid. Hy3 TP8 on 132 SMs: FP8 T = 1 -> 2 (busiest SM 128 -> 96 KB),
    T >= 2 -> 1; BF16 T = 1 -> 4 (256 -> 192 KB), T = 2 -> 2, T = 3 -> 4, T >= 5 -> 1."""
    if num_pairs > GATE_UP_SPLIT_MAX_PAIRS:
        return 1
    tasks = intermediate_size // 8 * min(num_local_experts, num_pairs)
    per_sm = GATE_UP_CTAS_PER_SM[bool(fp8)]
    stages = gate_up_k_stages(hidden_size, fp8)
    tile = 16 * hidden_size * (1 if fp8 else 2)
    cost = {s: gate_up_busiest_sm_bytes(tasks, s, tile, num_sms, per_sm)
            for s in range(1, GATE_UP_MAX_SPLITS + 1) if stages % s == 0}
    best = min(cost, key=lambda s: (cost[s], s))
    return best if cost[best] <= GATE_UP_SPLIT_MIN_GAIN * cost[1] else 1


def split_partial_rows(max_tokens: int, top_k: int) -> int:
    """Rows (of 2I FP32 values) of the workspace's split-K partials: GATE_UP_MAX_SPLITS parts of the pairs
    of the largest window that may split."""
    return GATE_UP_MAX_SPLITS * min(max_tokens * top_k, GATE_UP_SPLIT_MAX_PAIRS)


def split_counter_words(max_tokens: int, top_k: int, intermediate_size: int) -> int:
    """int32 counters of the split-K arrivals: one per (active expert, tile) task, at most
    min(E_local, pairs) x I/8 <= pairs x I/8."""
    return min(max_tokens * top_k, GATE_UP_SPLIT_MAX_PAIRS) * max(1, intermediate_size // 8)
