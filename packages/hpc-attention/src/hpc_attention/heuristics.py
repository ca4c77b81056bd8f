"""Scheduling knobs of the decode attention, with the reasoning behind each value.

Measurements that set them are in NOTES.md (H200, commit given there); change a value only
with a new measurement next to it.
"""

from __future__ import annotations

import math

import torch

# The decode kernel keeps 4 (BF16) or 7 (FP8) stages of K+V in ~190 KB of shared memory:
# one CTA per SM, which already holds 112-128 KB of KV in flight per SM (Little's law at
# ~32 GB/s per SM and ~1-2 us of loaded DRAM latency needs ~64 KB).
CTAS_PER_SM = 1

# Work floor per CTA, in 64-token tiles. Each task costs a query load, a 4-warp merge and a
# partial write + combine; at 4 tiles (128 KB of BF16 KV) that overhead is a few percent,
# while a higher floor leaves SMs idle on small batches (64 x 0.5K with 8/1 heads has 512
# tiles: floor 4 -> 128 CTAs busy, floor 8 -> 64).
MIN_TILES_PER_CTA = 4
# Plans with at least a quarter as many items (request, KV head) as CTAs: 8, BF16 and FP8 alike. Fewer, longer parts
# mean fewer split merges at the call's end (~2 us each on its critical path, twenty-ninth session); with few items the
# parallelism matters more (FP8 8/1, floor 8 against 4, us: 1x1K 12.3 / 10.8, 16x1K 12.8 / 11.7, 8x2K 12.5 / 11.7, 32x1K
# 13.1 / 12.6; hence the gate). FP8 since the twenty-ninth session (8/1 64x0.5K 12.4 / 13.0, 48x0.5K 11.8 / 12.2, 64x1K
# 15.0 / 16.2). BF16 since the thirtieth, once the capped charge (TASK_COST_CAP) let a floor of 8 keep 8-tile items
# whole (before it, floor 8 cut 64x0.5K's items at 8 units + 2 of charge and read 15.7 against 14.9): 8/1 64x0.5K
# 12.90 / 14.88, 128x0.5K 17.54 / 20.70, 36x0.5K 11.20 / 13.15, 48x1K 17.66 / 18.88, 64x1K 19.84 / 20.58, 64/8 8x0.5K
# 12.77 / 15.14, no shape slower beyond noise (`decode_attention_min_tiles_bf16_cap_*`; NOTES.md).
MIN_TILES_PER_CTA_MANY = 8

# Split items (one (request, KV head) over several CTAs) are merged inside the decode kernel by
# the last of their parts to finish (no combine launch) when True, by the separate combine
# kernel when False. Both give bitwise identical outputs (same arithmetic, split_merge.cuh) and
# the GPU tests run both. The combine launch measured 3.2 us of 16.8 on 64x0.5K and 5.5 us of
# 52.3 on 1x128K+31x4K (8/1 BF16, commit 8f4e192); the predicted gain of the in-kernel merge is
# in HISTORY.md (version 4). Read when `decode` is called (a CUDA graph keeps the capture's value).
MERGE_IN_DECODE = True

# With MERGE_IN_DECODE and the TMA producer: the arrival and merge of split tasks run on the
# kernel's two idle producer warps (the consumers hand each split task over through shared memory
# and go on), instead of on the four consumer warps, which otherwise wait for a GPU-scope fence
# and an atomic round trip per split task. Identical bits (same arithmetic, same order); the GPU
# tests run both. Measured (H200, commit be593056a46f, --quick, TMA kernel, no tail; helpers vs
# consumers): 64/8 FP8 185.1 vs 189.4 us (64x4K), 176.7 vs 181.2 (1x128K+31x4K); 64/8 BF16 equal
# (274.9 / 275.0, 271.4 / 272.4); 8/1 FP8 36.2 vs 40.5, 37.3 vs 41.8; 8/1 BF16 49.5 vs 50.5, 50.4 vs
# 50.7. Only the TMA kernel has the spare warps; the cp.async kernel merges on its consumers.
# Read when `decode` is called.
MERGE_ON_HELPER_WARPS = True

# Fixed cost of a task in tiles' worth of streaming, charged per non-empty (request, KV head)
# item when the planner cuts the work line into bins, so a CTA that gets many short items gets
# fewer of them. Why: each task pays a start-up chain (descriptor -> page id -> first bytes) and
# a 4-warp merge + output write that do not overlap its own tiles. Measured at commit 1c2ea65
# (64/8 heads, 32x128+32x4K, task_cost 0): the CTAs holding 64 two-tile items each ran ~3.4 us
# (BF16) / ~3.9 us (FP8) per item against ~1.2 / ~0.8 us per tile in steady streaming, i.e. a
# fixed cost of ~1.4 BF16 tiles / ~3.7 FP8 tiles per item; dynamic ran 222.6 / 251.9 us there
# against 165.0 / 112.7 for the static split. Values rounded. Run of 0f62eef (TMA producer at
# 64/8, --quick): 32x128+32x4K with the cost vs without: 64/8 BF16 150.3 vs 210.1 us (static
# 147.8), FP8 110.2 vs 249.0 (static 103.9); 8/1 BF16 30.8 vs 37.2, FP8 26.0 vs 37.6. It cost
# 64x0.5K 8/1 ~2 us (17.1 vs 15.1 BF16), whose 8-tile items are longer than the budget: since
# then only items no longer than the tiles-only budget are charged (decode_plan.cuh).
TASK_COST_TILES_BF16 = 2
TASK_COST_TILES_FP8 = 4
MAX_TASK_COST = 64

# The charge is capped (DecodePlanParams::cost_cap, planner.plan_tables' cost_cap): an item of n tiles is charged at
# most q_t - n units, q_t = total tiles / nb0 (the tiles-only budget), so the charge never makes an item whose tiles
# fit one bin longer than that budget. Why: equal short items whose tiles fill the budget (8/1 64x0.5K FP8: 8 tiles
# + 4 units against a budget of 8 units) were each cut in two by the charge alone, bins of 4 / 4 / 8 tiles (no
# shorter than whole items' 8) and a split merge at the call's end for every other item; 128x0.5K FP8 (11.6 units
# per bin against 12 per item) split nearly every item. Whole items measured 11.0 against 12.4 us (64x0.5K, the
# floor-12 plan, twenty-ninth session); it changes no other brief case (their charged items are far below q_t).
# Measured (thirtieth session, NOTES.md): see `--diag-rows cost_cap`. Read by plan_decode.
TASK_COST_CAP = True

# Producer of the decode kernel: tensor-map (TMA) copies from one warp (True) or 16-byte cp.async
# from four warps (False), or "auto": TMA when num_kv_heads >= TMA_MIN_KV_HEADS. Identical
# outputs; the GPU tests run both. Pages of fewer than 16 tokens always use cp.async. Measured
# (H200, HISTORY.md "TMA producer, GPU run 2", the six brief cases): with 64/8 heads TMA is faster
# on 11 of 12 rows (BF16 -1.5 to -8.4 %, 3.9 TB/s on 64x4K; FP8 -3 to -7.6 %, one row +3 %);
# with 8/1 heads slower on 11 of 12 (+0.1 to +4.6 us: decode alone is faster, the in-kernel
# merge costs more). Hkv 2-4 not measured: kept on cp.async. Read when `decode` is called.
# With the merge on helper warps (MERGE_ON_HELPER_WARPS), TMA at 8/1 FP8 measured faster than
# cp.async on the two cases measured (64x4K 36.2 vs 38.3 us, 1x128K+31x4K 37.3 vs 38.3; BF16 49.5 /
# 50.4 vs 50.0 / 50.0): not switched until the other four cases are measured (bench rows
# `diag_tma_helpers_tail0` against `ours`).
# Seventh session (H200, tree 2833f6d3caf7, with the consumers' score look-ahead): at 8/1 FP8 the
# TMA kernel (merge on its helper warps) beat cp.async on 5 of 6 cases (1x128K+31x4K 35.0 vs 37.7,
# 64x4K 34.7 vs 37.7, 32x128+32x4K 25.6 vs 27.3, 2x32K+30x4K 29.8 vs 31.2, 1x64K+15x4K 25.6 vs
# 26.0) and lost 0.4 us on 64x0.5K (14.6 vs 14.2): FP8 KV takes TMA from one KV head. BF16 at 8/1
# (run of 37f4982, same process, full calls): TMA -2.3 / -1.9 / -0.7 us on 64x4K / 1x128K+31x4K /
# 32x128+32x4K, +0.2 / +0.1 / +0.9 on 64x0.5K / 2x32K+30x4K / 1x64K+15x4K (net -3.8 us over the
# six; its decode alone is faster on all six): BF16 takes TMA from one KV head too.
USE_TMA_PRODUCER = "auto"
TMA_MIN_KV_HEADS = 1
TMA_MIN_KV_HEADS_FP8 = 1

# Claimable tail (decode_bin_ring.cuh): the planner cuts the last TAIL_PERCENT % of the work line
# into small bins (>= TAIL_BIN_TILES units, at most MAX_TAIL_BINS_PER_CTA per CTA, so the bins
# grow on big lines) that CTAs claim in order once their own bin is done, so CTAs that run faster
# take more of the line. Why: ncu of the 8/1 kernel (NOTES.md) found SMs idle 15-17 % of the
# kernel although every bin holds the same tiles: CTAs finish ~7 us apart. Only the TMA producer
# kernel claims (its spare warp runs the scheduler); the cp.async kernel (pages < 16 tokens, or
# USE_TMA_PRODUCER off) runs the tail bins in a fixed order (bin C + c, 2C + c, ... after bin c):
# correct and identical in its results, not balanced. Applies only when the line fills all CTAs.
# 0 disables it (the plan of before). Read by `plan_decode` (a CUDA graph keeps the capture's value).
# Measured slower everywhere (H200, HISTORY.md "Claimable tail" runs 1-2): with the merge on the
# consumers 20 % cost 5-8 us at 8/1 and 2-10 us at 64/8; with the merge on helper warps still 3-7 us
# at 8/1 (64x4K FP8 43.8 vs 36.2 without tail, BF16 53.9 vs 49.5) and 0-5 us at 64/8; 8-tile bins
# cost least (+1 to +4 us). Off by default; kept for the next attempt (HISTORY.md says where).
TAIL_PERCENT = 0
TAIL_BIN_TILES = 4
MAX_TAIL_BINS_PER_CTA = 2
MAX_TAIL_PERCENT = 50

# The decode kernel's start chain is bin (bin_start / bin_first) -> page id -> first KV bytes,
# three dependent DRAM round trips after the L2 flush. When plan_decode is given the page table,
# the planner also writes each bin's first page id, which the kernel loads with bin_start: the
# first copies then go out one round trip earlier. Timeline (H200, commit 1d63a79, HISTORY.md): bin
# known -> first copies issued 1.1-2.0 us; with the id from the plan 1.1-1.4 (run 2, 827f151: the
# read was only ~0.3-0.5 us of that step). Measured (H200, 38c0e3d, 8/1 FP8, 30 reps): decode
# -0.04 to -0.59 us per call on the six cases, planner +1.0-1.4 us per step (one pass after a block
# barrier). Same bits (same pages; GPU test). Only used when plan_decode got the page table.
# Read when `decode` is called (a CUDA graph keeps the capture's value).
FIRST_PAGE_FROM_PLAN = True

# Dynamic plans with Hkv > 1 lay the items on the line head by head (all requests of KV head 0,
# then of head 1, ...) and cut it into at most C rounded down to a multiple of Hkv bins, so every
# head's stretch is cut at the same token positions: CTAs that run in step read all KV heads of
# the same pages together, and whole items fit the bins more often (64x0.5K at 64/8: 128 bins of
# 4 items, no split at all). Measured with the planner's twin feeding the kernel (H200, eighth
# session, NOTES.md; same process): 64/8 FP8 160.0 -> 156.6 us (1x128K+31x4K), 40.1 -> 36.4
# (64x0.5K), 98.4 -> 94.1 (32x128+32x4K), BF16 49.3 -> 45.2 (64x0.5K), 276.3 -> 272.4 (64x4K);
# no case slower. Used when plan_decode's `head_major` is None; tails (TAIL_PERCENT) keep the
# request-major line.
HEAD_MAJOR_LINE = True

# The head-major line is cut into C rounded down to a multiple of Hkv bins (128 of 132 at Hkv = 8),
# so every head's stretch is cut alike (the aligned plan, decode_plan_aligned.cuh, relies on it).
# False: into up to C bins (diagnostic rows only; the twin, planner.plan_tables, takes the same
# switch as `cut_to_heads`). Read by plan_decode.
HEAD_MAJOR_CUT_TO_HEADS = True

# Head-major plans cut into a multiple of Hkv bins: CTAs c .. c + Hkv - 1 run the Hkv heads' bins of
# the same stretch of the line (own_bin, paged_decode_config.cuh), so neighbouring CTAs read the
# Hkv rows of the same tokens together, as the static split's round robin does; False: CTA c runs
# bin c (head h's bins on CTAs h * nb1 ..). H200, eleventh session (same process, us): 64/8 FP8
# 64x4K 153.9 -> 149.4, 1x128K+31x4K 155.6 -> 150.8, 2x32K+30x4K 117.6 -> 113.8, 1x64K+15x4K
# 85.1 -> 82.5, 32x128+32x4K 89.5 -> 87.6, 64x0.5K equal; 64/8 BF16 -1.9 (64x4K) to +0.7 (64x0.5K).
# Same bits either way. Read when `decode` is called (a CUDA graph keeps the capture's value).
BINS_BY_HEAD = True

TILE_TOKENS = 64
HEAD_DIM = 128
MAX_GROUP = 16


def min_tiles_per_cta(items: int = 0, ctas: int = 1) -> int:
    """Default work floor per CTA (in tiles) of a plan of `items` (request, KV head) items on `ctas` CTAs (the same
    for BF16 and FP8 KV since the thirtieth session)."""
    return MIN_TILES_PER_CTA_MANY if 4 * items >= ctas else MIN_TILES_PER_CTA


def task_cost_tiles(kv_dtype=None) -> int:
    """Default per-item fixed cost (in tiles) of a plan serving KV of `kv_dtype` (None: BF16)."""
    return TASK_COST_TILES_FP8 if kv_dtype == torch.float8_e4m3fn else TASK_COST_TILES_BF16


def num_ctas(num_sms: int) -> int:
    """Persistent CTAs of the decode kernel for a device with `num_sms` SMs."""
    return max(1, int(num_sms) * CTAS_PER_SM)


def combine_ctas(num_sms: int) -> int:
    """Fixed grid of the combine kernel (units are strided over it, so any size is correct)."""
    return max(1, int(num_sms))


def default_static_splits(batch: int, num_kv_heads: int, num_ctas_: int) -> int:
    """Split-KV baseline: enough splits per (request, head) that the batch fills the CTAs once,
    whatever the lengths (the FlashDecoding rule, which is what the dynamic plan beats)."""
    return max(1, math.ceil(num_ctas_ / max(1, batch * num_kv_heads)))
