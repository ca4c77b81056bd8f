"""Scheduling defaults of the decode attention: pure functions of the plan's shape and device.

`plan_decode` calls `resolve` once per step; whatever a `DecodeOptions` leaves as None comes from
here, and the result is frozen into the `DecodePlan` that every layer's `decode` executes. Nothing
here is read at call time and nothing is meant to be overwritten: a benchmark or test that wants
another policy passes `DecodeOptions`. Each value carries the measurement behind it (H200; the
package's DESIGN.md has the tables).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

TILE_TOKENS = 64
HEAD_DIM = 128
MAX_GROUP = 16

# One CTA per SM: the kernel keeps 4-9 stages of K+V in ~190 KB of shared memory, which already holds
# 112-128 KB of KV in flight per SM (Little's law at ~32 GB/s per SM and 1-2 us of loaded DRAM latency
# needs ~64 KB).
CTAS_PER_SM = 1

# Work floor per CTA in 64-token tiles. Each task pays a Q load, a 4-warp fold and a partial write or
# merge; at 4 tiles that overhead is a few percent, while a higher floor leaves SMs idle on small batches.
# Plans with at least a quarter as many (request, KV head) items as CTAs take 8: fewer, longer parts mean
# fewer split merges at the call's end (~2 us each on its critical path). Measured, floor 8 against 4
# (us): 8/1 BF16 64x0.5K 12.90 / 14.88, 128x0.5K 17.54 / 20.70, 64/8 8x0.5K 12.77 / 15.14; with few
# items the parallelism matters more (FP8 8/1 1x1K 12.3 / 10.8 with 8 / 4), hence the gate.
MIN_TILES_PER_CTA = 4
MIN_TILES_PER_CTA_MANY = 8

# Fixed cost of a task in tiles' worth of streaming, charged per non-empty item no longer than the
# tiles-only budget when the planner cuts the work line, so a CTA that gets many short items gets fewer
# of them: each task pays a start chain (descriptor -> page id -> first bytes) and a fold that do not
# overlap its own tiles (~1.4 BF16 / ~3.7 FP8 tiles per item measured at 64/8 32x128+32x4K; rounded).
# With the cost against without, 32x128+32x4K: 64/8 BF16 150.3 vs 210.1 us, FP8 110.2 vs 249.0;
# 8/1 BF16 30.8 vs 37.2, FP8 26.0 vs 37.6.
TASK_COST_TILES_BF16 = 2
TASK_COST_TILES_FP8 = 4
MAX_TASK_COST = 64

# The charge is capped at q_t - n units for an item of n tiles (q_t: total tiles over the bins of a plan
# without charges), so no item whose tiles fit one bin is cut for the charge's sake: equal short items
# that fill the budget (8/1 64x0.5K FP8) were otherwise each cut in two, with a split merge per item
# (whole items 11.0 against 12.4 us). No other brief case changes.
TASK_COST_CAP = True

# Claimable tail (decode_bin_ring.cuh): the last tail_percent % of the work line cut into small bins that
# CTAs claim once their own bin is done. Measured slower everywhere (20 %: +3-7 us at 8/1, 0-5 us at
# 64/8, 8-tile bins cost least), so off by default; the planner and both kernels support it.
TAIL_PERCENT = 0
TAIL_BIN_TILES = 4
MAX_TAIL_BINS_PER_CTA = 2
MAX_TAIL_PERCENT = 50

# Dynamic plans with Hkv > 1 lay the items on the line head by head and cut it into a multiple of Hkv
# bins, so every head's stretch is cut at the same token positions: CTAs that run in step read all KV
# heads of the same pages together and whole items fit the bins more often. 64/8 FP8 160.0 -> 156.6 us
# (1x128K+31x4K), 40.1 -> 36.4 (64x0.5K), 98.4 -> 94.1 (32x128+32x4K); BF16 64x0.5K 49.3 -> 45.2; no
# case slower. Plans with a claimable tail keep the request-major line.
HEAD_MAJOR_LINE = True
HEAD_MAJOR_CUT_TO_HEADS = True

# Head-major plans cut into a multiple of Hkv bins are dealt so that CTAs c .. c + Hkv - 1 run the Hkv
# heads' bins of the same stretch (own_bin, decode_config.cuh): neighbouring CTAs read the Hkv rows of
# the same tokens together. 64/8 FP8 64x4K 153.9 -> 149.4 us, 1x128K+31x4K 155.6 -> 150.8,
# 2x32K+30x4K 117.6 -> 113.8; BF16 -1.9 (64x4K) to +0.7 (64x0.5K). Same bits either way.
BINS_BY_HEAD = True

# Producer of the decode kernel: tensor-map (TMA) copies from one warp, or 16-byte cp.async from four
# warps. TMA at every head count: 64/8 faster on 11 of 12 rows (BF16 -1.5 to -8.4 %, FP8 -3 to -7.6 %);
# 8/1 FP8 faster on 5 of 6 cases (1x128K+31x4K 35.0 vs 37.7 us, 64x4K 34.7 vs 37.7; 64x0.5K +0.4), 8/1
# BF16 net -3.8 us over the six. Identical outputs. Pages under 16 tokens always use cp.async (a tile
# then takes more than 8 boxes per K and V).
PRODUCER = "tma"
TMA_MIN_PAGE = 16

# Split items are merged inside the decode kernel by the last of their parts to finish (no combine
# launch; the launch cost 3.2 us of 16.8 on 8/1 BF16 64x0.5K and 5.5 of 52.3 on 1x128K+31x4K), and in
# the TMA kernel by its two idle producer warps ("helpers"): the consumers hand each split task over
# through shared memory instead of waiting for a GPU-scope fence and an atomic round trip (8/1 FP8 64x4K
# 36.2 vs 40.5 us, 64/8 FP8 185.1 vs 189.4; BF16 equal or better). The cp.async kernel has no spare
# warps and merges on its consumers. "combine" launches the separate combine kernel. Identical bits.
MERGE = "helpers"
MERGE_MODES = ("helpers", "consumers", "combine")

# With the page table given to plan_decode, the planner also writes each bin's first page id, which the
# kernel loads with its bin: the first KV copies go out one dependent round trip earlier (decode -0.04 to
# -0.59 us per call at 8/1 FP8, planner +1.0-1.4 us per step). Pages of >= 64 tokens only.
FIRST_PAGE_FROM_PLAN = True


def min_tiles_per_cta(items: int, ctas: int) -> int:
    """Work floor per CTA (tiles) of a plan of `items` (request, KV head) items on `ctas` CTAs."""
    return MIN_TILES_PER_CTA_MANY if 4 * items >= ctas else MIN_TILES_PER_CTA


def task_cost_tiles(kv_dtype: torch.dtype | None) -> int:
    """Per-item fixed cost (tiles) of a plan serving KV of `kv_dtype` (None: BF16)."""
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


@dataclass(frozen=True)
class Policy:
    """Every scheduling choice of one plan, resolved (see `resolve`)."""

    min_tiles: int
    task_cost: int
    cost_cap: bool
    tail_percent: int
    tail_bin: int
    head_major: bool
    cut_to_heads: bool
    bins_by_head: bool
    producer: str
    merge: str
    first_page_from_plan: bool


def resolve(options, batch: int, num_kv_heads: int, num_ctas_: int, static_splits: int,
            kv_dtype: torch.dtype | None) -> Policy:
    """The plan's policy: `options` (a DecodeOptions or None) where it gives a value, the defaults above
    elsewhere, with the choices that do not apply to the plan's kind switched off (static plans have no
    task cost, tail or head-major line; a head-major line needs Hkv > 1 and no tail)."""
    def pick(name, default):
        v = getattr(options, name, None) if options is not None else None
        return default if v is None else v

    dynamic = static_splits == 0
    tail = int(pick("tail_percent", TAIL_PERCENT)) if dynamic else 0
    head_major = bool(pick("head_major", HEAD_MAJOR_LINE)) and num_kv_heads > 1 and dynamic and tail == 0
    return Policy(
        min_tiles=int(pick("min_tiles", min_tiles_per_cta(batch * num_kv_heads, num_ctas_))),
        task_cost=int(pick("task_cost", task_cost_tiles(kv_dtype))) if dynamic else 0,
        cost_cap=bool(pick("cost_cap", TASK_COST_CAP)) and dynamic,
        tail_percent=tail,
        tail_bin=int(pick("tail_bin", TAIL_BIN_TILES)),
        head_major=head_major,
        cut_to_heads=bool(pick("cut_to_heads", HEAD_MAJOR_CUT_TO_HEADS)),
        bins_by_head=bool(pick("bins_by_head", BINS_BY_HEAD)),
        producer=str(pick("producer", PRODUCER)),
        merge=str(pick("merge", MERGE)),
        first_page_from_plan=bool(pick("first_page_from_plan", FIRST_PAGE_FROM_PLAN)),
    )
