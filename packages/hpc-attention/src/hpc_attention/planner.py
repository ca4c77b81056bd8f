"""The decode planner's plain-Python twin and the workspace bounds.

`plan_tables` computes, with Python integers, exactly the tables that the CUDA planner
(include/hpc_attention/decode_plan.cuh) writes on the device; the GPU tests compare the two
and the CPU tests check the plan's properties on this twin. See decode_plan.cuh for the
scheme. Tables:

- tasks: (item, tile_begin, token_end, slot) with item = b * Hkv + h; tiles [tile_begin,
  ceil(token_end / 64)) of the item; slot -1 means "write the final output".
- bin_start: C + 1 offsets; bin c (persistent CTA c) runs tasks[bin_start[c]:bin_start[c+1]].
- combine: (item, first slot, parts, 0) for items split in several parts, and
  (item, 0, 0, 0) for empty items (their output is zero).
- counters: num_tasks, num_combine, budget, total_tiles, num_slots, bins_used, num_clamped, 0.
- slot_meta: per slot (num_slots entries), (first slot, parts) of the split item owning it;
  the decode kernel's in-kernel merge finds an item's parts and
  its arrival counters from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .heuristics import TILE_TOKENS

NUM_COUNTERS = 8


@dataclass(frozen=True)
class WorkspaceCaps:
    tasks: int
    combine: int
    slots: int


def workspace_caps(max_batch: int, num_kv_heads: int, num_ctas: int, static_splits: int = 0,
                   max_tail_bins: int = 0) -> WorkspaceCaps:
    """Table sizes that hold any plan of at most `max_batch` requests, whatever the lengths.

    Dynamic: each of the C + T - 1 bin boundaries (C owned bins, at most T claimable tail bins)
    splits at most one item, so tasks <= N + C + T - 1, split items <= C + T - 1 and their parts
    (= slots) <= 2 (C + T - 1); combine entries are the split items plus the empty ones (<= N).
    Static: S parts per item at most.
    """
    n = max_batch * num_kv_heads
    c = num_ctas + max(0, max_tail_bins)
    if static_splits > 0:
        return WorkspaceCaps(tasks=max(1, n * static_splits), combine=max(1, n), slots=max(1, n * static_splits))
    return WorkspaceCaps(tasks=n + c, combine=n + c, slots=max(1, 2 * c))


@dataclass
class PlanTables:
    tasks: list[tuple[int, int, int, int]]
    bin_start: list[int]
    combine: list[tuple[int, int, int, int]]
    counters: list[int] = field(default_factory=list)
    slot_meta: list[tuple[int, int]] = field(default_factory=list)
    # Device plans only: the copy of each non-empty bin's first task (rows of empty bins are stale).
    bin_first: list[tuple[int, int, int, int]] = field(default_factory=list)


def first_pages(tables: PlanTables, page_table: Sequence[Sequence[int]], page_size: int,
                num_kv_heads: int) -> list[int | None]:
    """The device planner's bin_first_page (plans given a page table): for each bin with tasks, the
    raw page id of its first task's first tile, page_table[b][tile * 64 // page_size]; None for
    empty bins (their device entries are stale)."""
    out: list[int | None] = []
    for c in range(len(tables.bin_start) - 1):
        if tables.bin_start[c] < tables.bin_start[c + 1]:
            item, tile = tables.tasks[tables.bin_start[c]][:2]
            out.append(int(page_table[item // num_kv_heads][tile * TILE_TOKENS // page_size]))
        else:
            out.append(None)
    return out


def _tiles(length: int) -> int:
    return (length + TILE_TOKENS - 1) // TILE_TOKENS


def plan_tables(kv_lens: Sequence[int], num_kv_heads: int, num_ctas: int, min_tiles: int,
                static_splits: int = 0, max_len: int | None = None, task_cost: int = 0,
                tail_percent: int = 0, tail_bin: int = 0, max_tail_bins: int = 0,
                head_major: bool = False, cut_to_heads: bool = True, cost_cap: bool = False) -> PlanTables:
    """The plan, computed the way the CUDA planner does (same integer arithmetic, same order).

    task_cost: tiles' worth of fixed cost charged on the work line (dynamic mode) to every
    non-empty item no longer than the tiles-only budget (n * nb0 <= total tiles, nb0 the bin
    count without costs): the line holds, per charged item, `task_cost` units of fixed cost
    followed by the item's tiles, and the bins cut that line. 0 gives the plain tile line.
    cost_cap: an item's charge is at most q_t - n, q_t = total tiles // nb0 (the tiles-only budget), so
    the charge never makes an item that fits one bin by its tiles longer than that budget (the CUDA
    planner's DecodePlanParams::cost_cap; heuristics.TASK_COST_CAP says why).

    Claimable tail (dynamic mode, when all C owned bins are used): of
    T = min(line * tail_percent // 100, line - C * min_tiles) units, ne = T // tb bins of tb = max(tail_bin, ceil(T / max_tail_bins)) units each end the
    line (bins C .. C + ne - 1); the C owned bins share the rest. bin_start has
    C + max_tail_bins + 1 entries; counters[7] = ne.

    head_major (dynamic mode, Hkv > 1; the CUDA planner's set_line_order): the line holds the
    items head by head (all requests of KV head 0, then of head 1, ...) instead of request by
    request, and is cut into at most C rounded down to a multiple of Hkv bins, so every head's
    stretch of the line is cut at the same token positions and the CTAs that run in step read all
    KV heads of the same pages together (bins from there to C stay empty)."""
    if max_len is None:
        max_len = max([0, *kv_lens])
    raw = [int(x) for x in kv_lens]
    lens = [min(max(x, 0), max_len) for x in raw]
    clamped = sum(1 for x in raw if x < 0 or x > max_len)
    hkv, C = num_kv_heads, num_ctas
    head_major = bool(head_major) and hkv > 1 and static_splits <= 0 and len(raw) > 0
    # bins the line may be cut into (set_line_order)
    c_cut = C - C % hkv if head_major and cut_to_heads and C >= hkv else C
    ntiles = [_tiles(x) for x in lens]
    total_tiles = sum(ntiles) * hkv
    cost = max(0, int(task_cost)) if static_splits <= 0 else 0
    # Charged items: non-empty and no longer than the tiles-only budget (total / nb0 tiles).
    nb0 = min(c_cut, max(1, total_tiles // max(1, min_tiles)))

    q_t = total_tiles // nb0  # nb0 >= 1

    def cost_of(n: int) -> int:
        if n <= 0 or n * nb0 > total_tiles:
            return 0
        return min(cost, q_t - n) if cost_cap else cost

    total = total_tiles + hkv * sum(cost_of(n) for n in ntiles)
    dynamic = static_splits <= 0
    nb = 1
    if dynamic and total > 0:
        nb = min(c_cut, max(1, total // max(1, min_tiles)))
    # Claimable tail: ne bins of tb units at the end of the line, the nb owned bins over [0, x1).
    tb, ne = 1, 0
    if dynamic and total > 0 and nb == c_cut and tail_percent > 0 and tail_bin > 0 and max_tail_bins > 0:
        tail = min(total * int(tail_percent) // 100, total - nb * max(1, min_tiles))  # owned bins keep the floor
        if tail > 0:
            tb = max(int(tail_bin), -(-tail // max_tail_bins))
            ne = tail // tb
    x1 = total - ne * tb

    def start(c: int) -> int:
        return c * x1 // nb if c <= nb else x1 + (c - nb) * tb

    def bin_of(x: int) -> int:
        return ((x + 1) * nb + x1 - 1) // x1 - 1 if x < x1 else nb + (x - x1) // tb

    def parts_of(s: int, n: int) -> int:
        if n == 0:
            return 0
        if dynamic:
            return bin_of(s + n - 1) - bin_of(s) + 1
        chunk = -(-n // static_splits)
        return -(-n // chunk)

    # Items in order, with the start of their fixed cost (s0) and of their tiles (s) on the line.
    items = []
    pos = 0
    order = ([(b, h) for h in range(hkv) for b in range(len(ntiles))] if head_major
             else [(b, h) for b in range(len(ntiles)) for h in range(hkv)])
    for b, h in order:
        n = ntiles[b]
        s0 = pos
        s = s0 + cost_of(n)
        items.append((b * hkv + h, lens[b], n, s, parts_of(s, n), s0))
        pos = s + n
    num_tasks = sum(it[4] for it in items)

    tasks: list = [None] * num_tasks
    n_bins = C + max(0, max_tail_bins)
    bin_start = [0] * (n_bins + 1)
    combine = []
    per_bin, extra = divmod(num_tasks, C)

    def static_base(c: int) -> int:
        return c * per_bin + min(c, extra)

    slot_meta: list = []
    task = slot = 0
    for item, length, n, s, parts, s0 in items:
        if parts != 1:
            combine.append((item, slot if parts > 1 else 0, parts, 0))
        if parts > 1:
            slot_meta += [(slot, parts)] * parts
        if dynamic:
            first_bin = bin_of(s) if parts > 0 else 0
            # Bins that start inside this item's fixed cost hold no tile of it before its first
            # task: they begin at that task (a bin lying wholly inside the fixed cost is empty).
            if parts > 0:
                for c in range(bin_of(s0), first_bin):
                    if start(c) >= s0:
                        bin_start[c] = task
            for q in range(parts):
                c = first_bin + q
                cs, ce = start(c), start(c + 1)
                gb, ge = max(s, cs), min(s + n, ce)
                tasks[task] = (item, gb - s, min(length, (ge - s) * TILE_TOKENS), slot + q if parts > 1 else -1)
                if cs >= s0:
                    bin_start[c] = task
                task += 1
        else:
            ch = -(-n // static_splits) if n > 0 else 0
            for q in range(parts):
                tb, te = q * ch, min(n, q * ch + ch)
                pos = static_base(task % C) + task // C
                tasks[pos] = (item, tb, min(length, te * TILE_TOKENS), slot + q if parts > 1 else -1)
                task += 1
        if parts > 1:
            slot += parts

    nb_used = (nb + ne if total > 0 else 0) if dynamic else min(num_tasks, C)
    for c in range(n_bins + 1):
        if not dynamic:
            bin_start[c] = static_base(c) if c <= C else num_tasks
        elif c >= nb_used:
            bin_start[c] = num_tasks
    budget = (-(-x1 // nb) if x1 > 0 else 0) if dynamic else 0
    counters = [num_tasks, len(combine), budget, total_tiles, slot, nb_used, clamped, ne]
    return PlanTables(tasks=tasks, bin_start=bin_start, combine=combine, counters=counters, slot_meta=slot_meta)
