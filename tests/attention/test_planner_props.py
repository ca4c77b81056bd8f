"""Properties of the decode plan, on the planner's plain-Python twin (CPU, runs in CI).

The GPU test test_decode.py::test_planner_matches_python_twin shows the CUDA planner writes
the same tables."""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpc_attention.planner import first_pages, plan_tables, workspace_caps
from hpc_attention.reference import decode_reference, execute_plan

T = 64


def tiles(n: int) -> int:
    return (n + T - 1) // T


def lengths_strategy(max_batch: int = 64, max_len: int = 140_000):
    small = st.integers(0, 300)
    big = st.integers(0, max_len)
    return st.one_of(
        st.lists(small, min_size=1, max_size=max_batch),
        st.lists(st.one_of(small, big), min_size=1, max_size=max_batch),
        st.lists(st.sampled_from([0, 1, 63, 64, 65, 127, 128, 129, 4096]), min_size=1, max_size=max_batch),
    )


def cut_bins(C, hkv, head_major):
    """Bins a plan may cut its line into: C, or C rounded down to a multiple of Hkv on the
    head-major line."""
    return C - C % hkv if head_major and hkv > 1 and C >= hkv else C


def charge_of(n: int, total: int, nb0: int, cost: int, cost_cap: bool) -> int:
    """The fixed cost charged to an item of n tiles (planner.plan_tables): `cost` when 1 <= n <= total // nb0 (the
    tiles-only budget), with cost_cap at most that budget minus n; else 0."""
    if n <= 0 or n * nb0 > total:
        return 0
    return min(cost, total // nb0 - n) if cost_cap else cost


def check_bin_cut(t, per_bin, lens, hkv, C, floor, cost, cost_cap=False) -> int:
    """The bins of a dynamic plan with at most C bins (a non-empty batch): the line they cut is the
    tiles plus each charged item's charge (<= cost); used bins come first, each within one tile of the budget
    (plus or minus one task cost: an item's cost may sit just before the boundary of the bin
    holding its first tile); idle bins only when the floor caps the bin count. Returns the line."""
    _, _, budget, total, _, nb, _, _ = t.counters
    nb0 = min(C, max(1, total // floor))
    line = total + hkv * sum(charge_of(tiles(x), total, nb0, cost, cost_cap) for x in lens)
    assert nb == min(C, max(1, line // floor))
    assert budget == -(-line // nb)
    assert all(budget - 1 - cost <= x <= budget + cost for x in per_bin[:nb]), (per_bin[:nb], budget)
    assert all(x == 0 for x in per_bin[nb:])
    return line


def check_plan(lens, hkv, C, floor, splits=0, cost=0, tail=(0, 0, 0), head_major=False, cost_cap=False):
    pct, tbin, max_tail = tail
    t = plan_tables(lens, hkv, C, floor, static_splits=splits, task_cost=cost, tail_percent=pct, tail_bin=tbin,
                    max_tail_bins=max_tail, head_major=head_major, cost_cap=cost_cap)
    num_tasks, num_comb, budget, total, num_slots, nb_used, clamped, _ = t.counters
    ntiles = [tiles(x) for x in lens]
    assert total == sum(ntiles) * hkv
    assert num_tasks == len(t.tasks) and num_comb == len(t.combine) and clamped == 0
    caps = workspace_caps(len(lens), hkv, C, splits, max_tail_bins=max_tail)
    assert num_tasks <= caps.tasks and num_comb <= caps.combine and num_slots <= caps.slots

    # Every tile of every item assigned exactly once; tasks never empty; token_end consistent.
    seen: dict[int, list[tuple[int, int]]] = {}
    for item, tb, tok_end, slot in t.tasks:
        b = item // hkv
        te = tiles(tok_end)
        assert 0 <= tb < te <= ntiles[b], (item, tb, tok_end)
        assert tok_end == min(lens[b], te * T)
        seen.setdefault(item, []).append((tb, te))
    for item in range(len(lens) * hkv):
        n = ntiles[item // hkv]
        ranges = sorted(seen.get(item, []))
        covered = [x for a, e in ranges for x in range(a, e)]
        assert covered == list(range(n)), f"item {item}: tiles {covered} != 0..{n - 1}"

    # Bins: contiguous task ranges covering the list once.
    bs = t.bin_start
    NB = C + max_tail  # owned bins, then claimable tail bins
    assert len(bs) == NB + 1 and bs[0] == 0 and bs[-1] == num_tasks
    assert all(a <= b for a, b in zip(bs, bs[1:]))
    per_bin = []
    for c in range(NB):
        per_bin.append(sum(tiles(tok_end) - tb for _, tb, tok_end, _ in t.tasks[bs[c]:bs[c + 1]]))
    assert sum(per_bin) == total
    # Work per bin on the planner's line: tiles plus the charge of each charged item starting
    # there (charged: no longer than the tiles-only budget, total / nb0; charge_of).
    if splits == 0:
        nb0 = min(cut_bins(C, hkv, head_major), max(1, total // floor))
        per_bin = [x + sum(charge_of(ntiles[item // hkv], total, nb0, cost, cost_cap)
                           for item, tb, _, _ in t.tasks[bs[c]:bs[c + 1]] if tb == 0)
                   for c, x in enumerate(per_bin)]

    # Slots: each split item owns consecutive, disjoint slots; combine lists exactly the split
    # and the empty items, in item order (line order: head by head on the head-major line).
    parts: dict[int, list[int]] = {}
    for item, _, _, slot in t.tasks:
        parts.setdefault(item, []).append(slot)
    expect_comb = []
    used_slots = []
    for item in range(len(lens) * hkv):
        sl = parts.get(item, [])
        if not sl:
            expect_comb.append((item, 0, 0, 0))
        elif len(sl) == 1:
            assert sl == [-1]
        else:
            assert sorted(sl) == list(range(min(sl), min(sl) + len(sl)))
            expect_comb.append((item, min(sl), len(sl), 0))
            used_slots += sl
    line_key = (lambda c: (c[0] % hkv, c[0] // hkv)) if head_major else (lambda c: c[0])
    assert t.combine == sorted(expect_comb, key=line_key)
    assert sorted(used_slots) == list(range(num_slots))
    # slot_meta: (first slot, parts) of the owning split item, for every slot.
    assert len(t.slot_meta) == num_slots
    for item, sl in parts.items():
        if len(sl) > 1:
            assert all(t.slot_meta[x] == (min(sl), len(sl)) for x in sl), item
    simulate_in_kernel_merge(t, random.Random(len(lens) * 7919 + C))
    return t, per_bin


def simulate_in_kernel_merge(t, rng: random.Random, rounds: int = 2):
    """The arrival protocol of the merge inside the decode kernel (decode.cuh,
    merge_split_task), replayed with the parts finishing in random orders and the counters
    kept across calls like the workspace's: every split item is merged exactly once, after all
    its parts (one level for P <= 16; for P > 16 each residue group g after its parts, the final
    fold after the 8 groups), counters of different items never overlap, and every counter is
    back to zero after each call."""
    num_slots = t.counters[4]
    counts = [0] * max(1, num_slots)
    split = [task for task in t.tasks if task[3] >= 0]
    for _ in range(rounds):
        order = split[:]
        rng.shuffle(order)
        done: set[int] = set()
        merged: dict[int, int] = {}
        groups_merged: dict[int, set[int]] = {}
        owner: dict[int, int] = {}
        for item, _, _, slot in order:
            f, P = t.slot_meta[slot]
            done.add(slot)
            g = (slot - f) & 7
            grouped = P > 16
            ctr = f + 1 + g if grouped else f
            need = (P - g + 7) // 8 if grouped else P
            assert f <= ctr < f + P and owner.setdefault(ctr, item) == item
            counts[ctr] += 1
            if counts[ctr] != need:
                continue
            counts[ctr] = 0
            if not grouped:
                assert done >= set(range(f, f + P))
                merged[item] = merged.get(item, 0) + 1
                continue
            assert done >= {f + q for q in range(g, P, 8)}
            groups_merged.setdefault(item, set()).add(g)
            assert owner.setdefault(f, item) == item
            counts[f] += 1
            if counts[f] == 8:
                counts[f] = 0
                assert groups_merged[item] == set(range(8))
                merged[item] = merged.get(item, 0) + 1
        assert not any(counts)
        split_items = {c[0] for c in t.combine if c[2] > 1}
        assert merged == {item: 1 for item in split_items}


@settings(max_examples=300, deadline=None)
@given(lens=lengths_strategy(), hkv=st.sampled_from([1, 2, 8]), C=st.sampled_from([1, 2, 7, 66, 132, 264]),
       floor=st.sampled_from([1, 4, 8, 16]), cost=st.sampled_from([0, 0, 2, 4, 7]), cap=st.booleans())
@example(lens=[512] * 64, hkv=1, C=132, floor=8, cost=4, cap=True)  # the cap binds: whole items
@example(lens=[512] * 128, hkv=1, C=132, floor=8, cost=4, cap=False)  # nearly every item split
@example(lens=[0], hkv=1, C=132, floor=4, cost=0, cap=False)
@example(lens=[1], hkv=8, C=132, floor=4, cost=0, cap=False)
@example(lens=[0, 1, 0, 1], hkv=2, C=3, floor=1, cost=0, cap=False)
@example(lens=[131072] + [4096] * 31, hkv=1, C=132, floor=4, cost=0, cap=False)
@example(lens=[512] * 64, hkv=1, C=132, floor=4, cost=0, cap=False)
@example(lens=[1] * 10, hkv=1, C=132, floor=1, cost=7, cap=False)  # bins wholly inside a task cost: empty
@example(lens=[128] * 32 + [4096] * 32, hkv=8, C=132, floor=4, cost=2, cap=False)
@example(lens=[0, 5, 0, 70000, 0], hkv=2, C=132, floor=1, cost=4, cap=False)
def test_dynamic_plan_properties(lens, hkv, C, floor, cost, cap):
    t, per_bin = check_plan(lens, hkv, C, floor, cost=cost, cost_cap=cap)
    num_tasks, _, budget, total, _, nb, _, _ = t.counters
    if total == 0:
        assert num_tasks == 0 and nb == 0 and all(x == 0 for x in t.bin_start)
        return
    # At least `floor` per used bin unless the batch has less in total.
    line = check_bin_cut(t, per_bin, lens, hkv, C, floor, cost, cap)
    if line >= floor:
        assert min(per_bin[:nb]) >= floor - cost
    # Request order kept: tasks sorted by (item, first tile), and so is every bin.
    keys = [(item, tb) for item, tb, _, _ in t.tasks]
    assert keys == sorted(keys)


@settings(max_examples=300, deadline=None)
@given(lens=lengths_strategy(), hkv=st.sampled_from([2, 4, 8, 16]), C=st.sampled_from([1, 2, 7, 16, 66, 132, 264]),
       floor=st.sampled_from([1, 4, 8, 16]), cost=st.sampled_from([0, 2, 4, 7]), cap=st.booleans())
@example(lens=[512] * 128, hkv=2, C=132, floor=8, cost=4, cap=True)  # the cap binds
@example(lens=[512] * 64, hkv=8, C=132, floor=4, cost=4, cap=False)  # 128 bins of whole items: no split
@example(lens=[131072] + [4096] * 31, hkv=8, C=132, floor=4, cost=4, cap=False)
@example(lens=[128] * 32 + [4096] * 32, hkv=8, C=132, floor=4, cost=4, cap=False)
@example(lens=[0, 5, 0, 70000, 0], hkv=2, C=7, floor=1, cost=4, cap=False)
def test_head_major_plan_properties(lens, hkv, C, floor, cost, cap):
    """The head-major line (the default from 2 KV heads): every check of the request-major plan
    (tiles once, bins within one tile of the budget, slots, merge protocol), at most C rounded
    down to a multiple of Hkv bins, request order kept within each head, and, when the bin
    count is a multiple of Hkv, every head's bins hold the same requests and tile ranges."""
    t, per_bin = check_plan(lens, hkv, C, floor, cost=cost, head_major=True, cost_cap=cap)
    num_tasks, _, budget, total, _, nb, _, _ = t.counters
    if total == 0:
        assert num_tasks == 0 and nb == 0
        return
    check_bin_cut(t, per_bin, lens, hkv, cut_bins(C, hkv, True), floor, cost, cap)
    keys = [(item % hkv, item // hkv, tb) for item, tb, _, _ in t.tasks]
    assert keys == sorted(keys)
    if nb % hkv == 0:
        per = nb // hkv
        bs = t.bin_start
        for c in range(nb):
            mine = t.tasks[bs[c]:bs[c + 1]]
            head0 = t.tasks[bs[c % per]:bs[c % per + 1]]
            assert all(item % hkv == c // per for item, _, _, _ in mine), c
            assert [(i // hkv, tb, te) for i, tb, te, _ in mine] == [(i // hkv, tb, te) for i, tb, te, _ in head0], c
        check_head_copies(t, hkv, per)


def check_head_copies(t, hkv, per):
    """What the CUDA planner's aligned head-major plan (decode_plan_aligned.cuh) writes without
    planning heads 1.. at all: head h's tables are head 0's shifted, bins by h * per, tasks /
    slots / combine entries by h times head 0's counts, items by h (item = request * Hkv + head)."""
    num_tasks, num_comb, _, _, num_slots, _, _, _ = t.counters
    assert num_tasks % hkv == 0 and num_slots % hkv == 0 and num_comb % hkv == 0
    t1, s1, k1 = num_tasks // hkv, num_slots // hkv, num_comb // hkv
    for h in range(hkv):
        for j in range(per + 1):
            assert t.bin_start[h * per + j] == h * t1 + t.bin_start[j], (h, j)
        for k in range(t1):
            item, tb, te, slot = t.tasks[k]
            assert t.tasks[h * t1 + k] == (item + h, tb, te, slot + h * s1 if slot >= 0 else -1), (h, k)
        for k in range(s1):
            first, parts = t.slot_meta[k]
            assert t.slot_meta[h * s1 + k] == (first + h * s1, parts), (h, k)
        for k in range(k1):
            item, first, parts, z = t.combine[k]
            assert t.combine[h * k1 + k] == (item + h, first + h * s1 if parts else first, parts, z), (h, k)


@settings(max_examples=300, deadline=None)
@given(lens=lengths_strategy(), hkv=st.sampled_from([1, 2, 8]), C=st.sampled_from([1, 2, 7, 132]),
       floor=st.sampled_from([1, 4]), cost=st.sampled_from([0, 2, 4]), pct=st.sampled_from([1, 20, 50]),
       tbin=st.sampled_from([1, 4, 8]), per_cta=st.sampled_from([0, 1, 2]))
@example(lens=[131072] + [4096] * 31, hkv=1, C=132, floor=4, cost=4, pct=20, tbin=4, per_cta=2)
@example(lens=[4096] * 64, hkv=8, C=132, floor=4, cost=2, pct=20, tbin=4, per_cta=2)  # bins grow past tbin
@example(lens=[512] * 64, hkv=1, C=132, floor=4, cost=2, pct=20, tbin=4, per_cta=2)  # nb < C: no tail
@example(lens=[1] * 40, hkv=1, C=2, floor=1, cost=7, pct=50, tbin=1, per_cta=2)  # tail bins inside costs
@example(lens=[1], hkv=1, C=1, floor=4, cost=0, pct=1, tbin=1, per_cta=1)  # line short of the floor: no tail
def test_tail_plan_properties(lens, hkv, C, floor, cost, pct, tbin, per_cta):
    """The claimable tail: without it (line short of C bins, or no tail bins allowed) the plan
    is the plain one; with it the C owned bins share line - T units like before and the ne tail
    bins hold tb units each, T = min(line * pct // 100, line - C * floor) (the owned bins keep the
    floor), tb = max(tbin, ceil(T / max_tail_bins))."""
    max_tail = per_cta * C
    t, per_bin = check_plan(lens, hkv, C, floor, cost=cost, tail=(pct, tbin, max_tail))
    num_tasks, _, budget, total, _, nb_used, _, ne = t.counters
    base = plan_tables(lens, hkv, C, floor, task_cost=cost)
    nb0 = min(C, max(1, total // floor))
    line = total + cost * hkv * sum(1 for x in lens if 0 < tiles(x) and tiles(x) * nb0 <= total)
    nb = min(C, max(1, line // floor))
    T = max(0, min(line * pct // 100, line - C * floor))
    if total == 0 or nb < C or max_tail == 0 or T == 0:
        assert ne == 0
        assert (t.tasks, t.combine, t.slot_meta) == (base.tasks, base.combine, base.slot_meta)
        assert t.bin_start == base.bin_start + [num_tasks] * max_tail and t.counters == base.counters
        return
    tb = max(tbin, -(-T // max_tail))
    assert ne == T // tb and ne <= max_tail and nb_used == C + ne
    x1 = line - ne * tb
    assert budget == -(-x1 // C)
    assert all(budget - 1 - cost <= x <= budget + cost for x in per_bin[:C]), (per_bin[:C], budget)
    assert all(x <= tb + cost for x in per_bin[C:C + ne]), (per_bin[C:C + ne], tb)
    assert all(x == 0 for x in per_bin[C + ne:]) and all(b == num_tasks for b in t.bin_start[C + ne:])
    keys = [(item, tb_) for item, tb_, _, _ in t.tasks]
    assert keys == sorted(keys)


@settings(max_examples=200, deadline=None)
@given(lens=lengths_strategy(), hkv=st.sampled_from([1, 4]), C=st.sampled_from([1, 5, 132]),
       splits=st.sampled_from([1, 2, 3, 16, 64]))
@example(lens=[131072] + [4096] * 31, hkv=1, C=132, splits=5)
def test_static_plan_properties(lens, hkv, C, splits):
    t, per_bin = check_plan(lens, hkv, C, 4, splits)
    # Every non-empty item in at most `splits` parts of ceil(n / splits) tiles, round robin.
    for item, tb, tok_end, _ in t.tasks:
        n = tiles(lens[item // hkv])
        assert tiles(tok_end) - tb <= -(-n // splits)
    n_tasks = t.counters[0]
    counts = [t.bin_start[c + 1] - t.bin_start[c] for c in range(C)]
    assert max(counts) - min(counts) <= 1 if n_tasks >= C else max(counts) <= 1


def test_one_request_holds_99_percent():
    lens = [128 * 1024] + [20] * 40  # 2048 tiles against 40
    t, per_bin = check_plan(lens, 1, 132, 4)
    budget = t.counters[2]
    assert t.counters[5] == 132
    long_bins = {c for c in range(132) for task in t.tasks[t.bin_start[c]:t.bin_start[c + 1]] if task[0] == 0}
    assert len(long_bins) >= 125, "the long request must spread over nearly all CTAs"
    assert max(per_bin) <= budget


def test_task_cost_spreads_many_short_items():
    """64/8 heads, 32x128+32x4K: cut on tiles alone, 4 CTAs get all 256 two-tile items (64
    each, a fixed cost per item that dominates: measured 222.6 us against 165.0 static, BF16);
    with a cost of 2 tiles per item the short items spread over twice as many CTAs."""
    lens = [128] * 32 + [4096] * 32

    def short_items_per_bin(cost):
        t = plan_tables(lens, 8, 132, 4, task_cost=cost)
        bs = t.bin_start
        return [sum(1 for item, _, _, _ in t.tasks[bs[c]:bs[c + 1]] if item < 256) for c in range(132)]

    assert max(short_items_per_bin(0)) == 64
    with_cost = short_items_per_bin(2)  # both item lengths are within the budget: both charged
    # (a two-tile item cut by a bin boundary counts in both bins)
    assert max(with_cost) <= 35 and sum(1 for x in with_cost if x) >= 8


def test_task_cost_leaves_items_longer_than_the_budget_alone():
    """64x0.5K with 8/1 heads: 8-tile items against a 4-tile budget are split anyway, so they pay
    no charge and the plan is the tiles-only one (128 bins of exactly 4 tiles, 2 parts per item;
    charging them measured ~2 us slower on the H200)."""
    lens = [512] * 64
    assert plan_tables(lens, 1, 132, 4, task_cost=2) == plan_tables(lens, 1, 132, 4, task_cost=0)
    mixed = [512] * 8 + [64] * 200  # 1-tile items within the budget are charged
    assert plan_tables(mixed, 1, 132, 4, task_cost=2) != plan_tables(mixed, 1, 132, 4, task_cost=0)


def test_capped_charge_keeps_short_items_whole():
    """8/1 FP8 defaults (floor 8, cost 4): equal 0.5K items fill the tiles-only budget (8 tiles) with their tiles,
    so the uncapped charge (12 units per item) cut them in two (64x0.5K: 32 of 64 items; 128x0.5K: 76 of 128); capped,
    every item is one task in a bin of its own. Batches whose items stay well inside the budget plan the same either
    way (the brief's mixes)."""
    for lens in ([512] * 64, [512] * 128, [512] * 48, [512] * 96):
        uncapped = plan_tables(lens, 1, 132, 8, task_cost=4)
        capped = plan_tables(lens, 1, 132, 8, task_cost=4, cost_cap=True)
        assert sum(1 for c in uncapped.combine if c[2] > 1) > len(lens) // 4, len(lens)
        assert capped.combine == [] and capped.counters[0] == len(lens), len(lens)
        assert capped.counters[5] == len(lens)  # one bin per item
    for lens, hkv, hm in (([128] * 32 + [4096] * 32, 8, True), ([128] * 32 + [4096] * 32, 1, False),
                          ([100 if i % 7 == 0 else 4096 for i in range(256)], 1, False), ([512] * 64, 8, True)):
        for cost in (2, 4):
            assert (plan_tables(lens, hkv, 132, 8, task_cost=cost, head_major=hm, cost_cap=True)
                    == plan_tables(lens, hkv, 132, 8, task_cost=cost, head_major=hm)), (len(lens), hkv, cost)


@settings(max_examples=150, deadline=None)
@given(lens=st.lists(st.integers(0, 2000), min_size=1, max_size=300), hkv=st.sampled_from([1, 2, 8]),
       floor=st.sampled_from([1, 4, 8, 12]), cost=st.integers(0, 9), hm=st.booleans())
def test_capped_charge_never_passes_the_tiles_only_budget(lens, hkv, floor, cost, hm):
    """With cost_cap every charged item spans at most q_t = total // nb0 units (its tiles plus its charge), so an item
    whose tiles fit a tiles-only bin is never longer than it; the plan stays a valid plan (check_plan's properties)."""
    t = plan_tables(lens, hkv, 132, floor, task_cost=cost, head_major=hm, cost_cap=True)
    total = t.counters[3]
    nb0 = min(cut_bins(132, hkv, hm), max(1, total // floor))
    line = total + hkv * sum(charge_of(tiles(x), total, nb0, cost, True) for x in lens)
    # the line the bins cut: budget = ceil(line / bins_used) when no tail
    if t.counters[5]:
        assert t.counters[2] == -(-line // t.counters[5])
    check_plan(lens, hkv, 132, floor, cost=cost, head_major=hm, cost_cap=True)


def test_length_clamped_and_counted():
    t = plan_tables([10, 5000, -3], 1, 4, 1, max_len=1024)
    assert t.counters[6] == 2
    assert t.counters[3] == tiles(10) + tiles(1024)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), hkv=st.sampled_from([1, 2]), g=st.sampled_from([1, 4, 16]),
       C=st.sampled_from([1, 3, 8]), splits=st.sampled_from([0, 0, 3]), cost=st.sampled_from([0, 3]),
       tail=st.sampled_from([0, 30]), head_major=st.booleans())
def test_executing_the_plan_equals_one_pass_softmax(seed, hkv, g, C, splits, cost, tail, head_major):
    """Tasks + partials + combine, in float64, give the one-pass softmax (the plan is exact)."""
    rng = random.Random(seed)
    B = rng.randint(1, 5)
    lens = [rng.choice([0, 1, 63, 64, 65, rng.randint(1, 700)]) for _ in range(B)]
    page = 64
    max_pages = max(1, max(tiles(x) for x in lens))
    gen = torch.Generator().manual_seed(seed)
    num_pages = B * max_pages + 3
    k = torch.randn(num_pages, page, hkv, 128, generator=gen, dtype=torch.float64)
    v = torch.randn(num_pages, page, hkv, 128, generator=gen, dtype=torch.float64)
    q = torch.randn(B, hkv * g, 128, generator=gen, dtype=torch.float64)
    pt = torch.randperm(num_pages, generator=gen)[:B * max_pages].view(B, max_pages).int()
    t = plan_tables(lens, hkv, C, 1, static_splits=splits, task_cost=cost, tail_percent=tail, tail_bin=1,
                    max_tail_bins=2 * C, head_major=head_major)
    got = execute_plan(t, q, k, v, pt, lens, sm_scale=0.0883)
    ref = decode_reference(q, k, v, pt, lens, sm_scale=0.0883)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("C", [1, 132])
def test_workspace_caps_hold_worst_cases(C):
    # Many tiny items and one item spanning every boundary.
    for lens in ([1] * 500, [64] * 500, [C * 64 * 4] + [0] * 10, [65] * 3):
        for tail in (0, 50):
            t = plan_tables(lens, 1, C, 1, tail_percent=tail, tail_bin=1, max_tail_bins=2 * C)
            caps = workspace_caps(len(lens), 1, C, max_tail_bins=2 * C)
            assert t.counters[0] <= caps.tasks and t.counters[4] <= caps.slots and t.counters[1] <= caps.combine


@settings(max_examples=60, deadline=None)
@given(lens=lengths_strategy(), hkv=st.sampled_from([1, 2, 8]), num_ctas=st.sampled_from([1, 7, 132]),
       page=st.sampled_from([16, 64, 128]))
@example(lens=[131072] + [4096] * 31, hkv=1, num_ctas=132, page=64)
def test_first_pages_hold_each_bins_first_token(lens, hkv, num_ctas, page):
    """The page id the planner hands the decode kernel for a bin (first_pages, the twin of the
    device's bin_first_page) is the table entry of the page holding the bin's first token, which is
    inside its request's length; empty bins get none."""
    tables = plan_tables(lens, hkv, num_ctas, 4, max_len=max(lens), task_cost=2)
    width = -(-max(max(lens), 1) // page)
    table = [[b * 1_000_000 + j for j in range(width)] for b in range(len(lens))]
    pages = first_pages(tables, table, page, hkv)
    assert len(pages) == len(tables.bin_start) - 1
    for c, pg in enumerate(pages):
        t_b, t_e = tables.bin_start[c], tables.bin_start[c + 1]
        if t_b == t_e:
            assert pg is None
            continue
        item, tile = tables.tasks[t_b][:2]
        b, tok = item // hkv, tile * T
        assert tok < lens[b]
        assert pg // 1_000_000 == b and (pg % 1_000_000) * page <= tok < (pg % 1_000_000 + 1) * page
