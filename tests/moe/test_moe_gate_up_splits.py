"""The Gate-Up split-K on the CPU: the host-side choice and checks (hpc_moe.heuristics, kernels.window_gate_up_splits),
its workspace buffers, and a Python emulation of moe_gate_up.cuh / moe_gate_up_split.cuh's bookkeeping: CTA c takes
tasks c, c + grid, ..., a task is (active expert, tile, part), the warps' K stages of the parts cover every K stage
of a tile exactly once, partial rows are written once each, the part that arrives last (in an arbitrary arrival
order) sums the parts in part order and resets the counter, every local pair's inter row is written exactly once,
and the result equals the float64 reference and is bitwise the same for every arrival order and every order of
pairs inside an expert's range.

Hypothesis draws sizes, EP settings, a routing skew, the split and a seed, never tensor contents."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_moe import MoEWorkspace, heuristics, kernels

# ---- the choice and its checks --------------------------------------------------------------------------------


def test_gate_up_splits_is_off_until_measured():
    for pairs in (1, 8, 16, 40, 128, 129, 8192):
        for fp8 in (True, False):
            assert heuristics.gate_up_splits(pairs, 192, 192, 4096, 132, fp8) == 1


def test_predicted_splits_hy3_tp8():
    # E = 192, top-8, I = 192, H = 4096 on 132 SMs: FP8 3 CTAs per SM (396), BF16 2 (264)
    pred = heuristics.predicted_gate_up_splits
    assert [pred(8 * T, 192, 192, 4096, 132, True) for T in (1, 2, 3, 4, 5, 16)] == [2, 1, 2, 1, 1, 1]
    assert [pred(8 * T, 192, 192, 4096, 132, False) for T in (1, 2, 3, 4, 5, 16)] == [4, 2, 4, 1, 1, 1]
    assert pred(129, 192, 192, 4096, 132, True) == 1  # above GATE_UP_SPLIT_MAX_PAIRS
    assert pred(1, 1, 64, 128, 132, True) == 1  # one K stage: nothing to split
    assert pred(1, 1, 64, 1 << 16, 132, True) == heuristics.GATE_UP_MAX_SPLITS


def test_busiest_sm_bytes_model():
    # the table of DESIGN.md: Hy3 TP8 T = 1, 192 tasks of 64 KB FP8 / 128 KB BF16 tiles on 132 SMs
    fp8 = [heuristics.gate_up_busiest_sm_bytes(192, s, 64 << 10, 132, 3) >> 10 for s in (1, 2, 4, 8)]
    bf16 = [heuristics.gate_up_busiest_sm_bytes(192, s, 128 << 10, 132, 2) >> 10 for s in (1, 2, 4, 8)]
    assert fp8 == [128, 96, 96, 96] and bf16 == [256, 256, 192, 192]
    # grid capped at the resident CTAs: 3 per SM, each of 1000 tasks' CTAs taking ceil(1000 / 396) = 3
    assert heuristics.gate_up_busiest_sm_bytes(1000, 1, 64, 132, 3) == 3 * 3 * 64


@pytest.mark.parametrize("splits,pairs,H,fp8,match", [
    (0, 8, 4096, True, "1..8"), (16, 8, 4096, True, "1..8"), (2.0, 8, 4096, True, "1..8"),
    (True, 8, 4096, True, "1..8"), (2, 8, 128, True, "divide the 1 K stages"), (8, 8, 512, True, "divide the 4"),
    (3, 8, 4096, False, "divide the 64"), (2, 129, 4096, True, "129 pairs cannot split")])
def test_split_problems_are_named(splits, pairs, H, fp8, match):
    problem = heuristics.gate_up_split_problem(splits, pairs, H, fp8)
    assert problem is not None and match in problem


def test_split_problem_none_when_it_runs():
    assert heuristics.gate_up_split_problem(1, 8192, 128, True) is None  # no split: any window, any H
    assert heuristics.gate_up_split_problem(8, 128, 1024, True) is None
    assert heuristics.gate_up_split_problem(8, 128, 512, False) is None  # BF16: H / 64 stages


def _weights(quant="fp8_block", H=4096, I=192, E_local=192):
    return SimpleNamespace(quant=quant, hidden_size=H, intermediate_size=I, num_local_experts=E_local)


def test_window_gate_up_splits_checks():
    w = _weights()
    ws = MoEWorkspace(16, 8, 4096, 192)
    assert kernels.window_gate_up_splits(w, 8, ws, 132) == 1  # the heuristic
    assert kernels.window_gate_up_splits(w, 128, ws, 132, 8) == 8
    with pytest.raises(ValueError, match="gate_up_splits = 3: must divide the 32 K stages"):
        kernels.window_gate_up_splits(w, 8, ws, 132, 3)
    with pytest.raises(ValueError, match="gate_up_splits = 2: a window of 256 pairs"):
        kernels.window_gate_up_splits(w, 256, MoEWorkspace(32, 8, 4096, 192), 132, 2)
    small = MoEWorkspace(1, 8, 4096, 192)  # partials for 8 parts of 8 pairs
    assert kernels.window_gate_up_splits(w, 8, small, 132, 8) == 8
    with pytest.raises(ValueError, match="split_partials .* cannot hold 8 parts of 16 pairs"):
        kernels.window_gate_up_splits(w, 16, small, 132, 8)
    short = MoEWorkspace.view(ws.inter, ws.xq, ws.xs, ws.y, ws.down_index, ws.split_partials,
                              ws.split_counters[:10], 16, 8, 4096)
    with pytest.raises(ValueError, match="split_counters holds 10 words, the window needs 192"):
        kernels.window_gate_up_splits(w, 8, short, 132, 2)


@pytest.mark.parametrize("max_tokens,top_k", [(1, 1), (1, 8), (5, 8), (16, 8), (17, 8), (300, 16)])
def test_workspace_holds_every_split(max_tokens, top_k):
    I = 192
    ws = MoEWorkspace(max_tokens, top_k, 256, I, fp8=False)
    pairs_max = min(max_tokens * top_k, heuristics.GATE_UP_SPLIT_MAX_PAIRS)
    for S in range(1, heuristics.GATE_UP_MAX_SPLITS + 1):
        if 4 % S == 0:  # H = 256 BF16: 4 stages
            assert kernels.window_gate_up_splits(_weights("bf16", 256, I, 512), pairs_max, ws, 132, S) == S
    assert ws.split_partials.shape == (heuristics.GATE_UP_MAX_SPLITS * pairs_max, 2 * I)
    assert ws.split_counters.numel() >= pairs_max * (I // 8) and not ws.split_counters.any()


# ---- emulation of the kernel ---------------------------------------------------------------------------------


def _ranges_in_cta_order(ids, start, E_local, g):
    """(counts, per-expert pair lists) with each expert's pairs in a random order: the shared-memory atomics'
    order, which differs in every CTA."""
    flat = ids.reshape(-1).long() - start
    lists = []
    for e in range(E_local):
        pairs = (flat == e).nonzero().flatten()
        lists.append(pairs[torch.randperm(pairs.numel(), generator=g)].tolist())
    return [len(p) for p in lists], lists


def _task_expert(tstart, E, base):
    """moe_index.cuh task_expert: the last e with tstart[e] <= base."""
    lo, hi = 0, E - 1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if tstart[mid] <= base:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _emulate(c, S, grid, arrival_seed):
    """The split-K Gate-Up of one window as moe_gate_up.cuh runs it, tasks completing in a random order."""
    T, K = c.ids.shape
    E, tiles, I = c.E_local, c.I // 8, c.I
    stages = heuristics.gate_up_k_stages(c.H, c.fp8)
    kel = 128 if c.fp8 else 64  # K elements per stage
    part_stages = stages // S
    g = torch.Generator().manual_seed(arrival_seed)
    cnt, _ = _ranges_in_cta_order(c.ids, c.start, E, g)
    tstart, acc = [], 0
    for e in range(E):
        tstart.append(acc)
        acc += tiles if cnt[e] else 0
    tstart.append(acc)
    total = tstart[E] * S
    assert total <= tiles * min(E, T * K) * S  # the grid's bound (moe.cu)
    work = [(cta, task) for cta in range(grid) for task in range(cta, total, grid)]
    order = torch.randperm(len(work), generator=g).tolist()

    rows_cap = heuristics.split_partial_rows(T, K)
    partials = torch.full((rows_cap * 2 * I,), float("nan"), dtype=torch.float32)
    part_writes = torch.zeros_like(partials, dtype=torch.int32)
    counters = torch.zeros(heuristics.split_counter_words(T, K, I), dtype=torch.int32)
    inter = torch.full((T * K, I), float("nan"), dtype=torch.float32)
    inter_writes = torch.zeros(T * K, I, dtype=torch.int32)
    k_cover = torch.zeros(E, tiles, stages, dtype=torch.int32)
    for i in order:
        cta, task = work[i]
        _, lists = _ranges_in_cta_order(c.ids, c.start, E, g)  # this CTA's own slot order
        base, part = divmod(task, S)
        e = _task_expert(tstart, E, base)
        t = base - tstart[e]
        assert cnt[e] > 0 and 0 <= t < tiles
        rows = torch.cat([torch.arange(8 * t, 8 * t + 8), I + torch.arange(8 * t, 8 * t + 8)])
        for c0 in range(0, cnt[e], 16):
            pairs = lists[e][c0:c0 + 16]
            x = c.x[torch.tensor(pairs) // K]  # [n, H] float64
            red = torch.zeros(16, len(pairs), dtype=torch.float32)
            for warp in range(4):  # warp order, FP32, like the shared-memory reduce
                s0 = part * part_stages + warp * part_stages // 4
                s1 = part * part_stages + (warp + 1) * part_stages // 4
                if c0 == 0:
                    k_cover[e, t, s0:s1] += 1
                ks = slice(s0 * kel, s1 * kel)
                red += (c.w13[e, rows, ks] @ x[:, ks].T).float()
            for col, pair in enumerate(pairs):
                at = ((part * T * K + pair) * tiles + t) * 16  # split_partial_row
                partials[at:at + 16] = red[:, col]
                part_writes[at:at + 16] += 1
        counters[base] += 1  # split_arrive
        if int(counters[base]) == S:
            counters[base] = 0
            stride = T * K * tiles * 16
            for pair in lists[e]:  # split_finish, in this CTA's slot order
                at = (pair * tiles + t) * 16
                gate = torch.zeros(8, dtype=torch.float32)
                up = torch.zeros(8, dtype=torch.float32)
                for k in range(S):  # part order
                    gate += partials[at + k * stride: at + k * stride + 8]
                    up += partials[at + k * stride + 8: at + k * stride + 16]
                inter[pair, 8 * t:8 * t + 8] = torch.nn.functional.silu(gate) * up
                inter_writes[pair, 8 * t:8 * t + 8] += 1
    return SimpleNamespace(inter=inter, inter_writes=inter_writes, part_writes=part_writes, counters=counters,
                           k_cover=k_cover, cnt=cnt)


def _case(T, K, E, ep, skew, H, I, fp8, seed):
    g = torch.Generator().manual_seed(seed)
    ep_size, ep_rank = ep
    E_local = E // ep_size
    start = ep_rank * E_local
    if skew == "one_expert":  # every pair of every token to one local expert: several 16-pair chunks
        ids = torch.full((T, K), start + E_local - 1)
    elif skew == "none_local":
        other = [e for e in range(E) if not start <= e < start + E_local] + [-1]
        ids = torch.tensor(other)[torch.randint(0, len(other), (T, K), generator=g)]
    else:
        ids = torch.rand(T, E, generator=g).topk(min(K, E), dim=1).indices
        if K > E:
            ids = torch.cat([ids, torch.full((T, K - E), -1)], 1)
        ids = torch.where(torch.rand(T, K, generator=g) < 0.1, -1, ids)
    x = torch.randn(T, H, generator=g, dtype=torch.float64)
    w13 = torch.randn(E_local, 2 * I, H, generator=g, dtype=torch.float64) / math.sqrt(H)
    return SimpleNamespace(ids=ids, x=x, w13=w13, start=start, E_local=E_local, H=H, I=I, fp8=fp8)


def _valid_splits(H, fp8):
    stages = heuristics.gate_up_k_stages(H, fp8)
    return [s for s in (2, 4, 8) if stages % s == 0]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 16), K=st.integers(1, 8), E=st.sampled_from([4, 8, 16]),
       ep=st.sampled_from([(1, 0), (2, 1), (4, 3)]), skew=st.sampled_from(["router", "router", "one_expert",
                                                                            "none_local"]),
       shape=st.sampled_from([(256, 64), (512, 128), (1024, 64), (384, 192)]), fp8=st.booleans(),
       pick=st.integers(0, 2), grid_frac=st.sampled_from([1, 2, 3, 100]), seed=st.integers(0, 2**20))
@example(T=1, K=8, E=16, ep=(1, 0), skew="router", shape=(1024, 64), fp8=True, pick=2, grid_frac=100, seed=1)
@example(T=16, K=8, E=4, ep=(1, 0), skew="one_expert", shape=(512, 128), fp8=False, pick=2, grid_frac=3, seed=2)
@example(T=5, K=3, E=8, ep=(2, 1), skew="none_local", shape=(256, 64), fp8=True, pick=0, grid_frac=1, seed=3)
def test_split_gate_up_emulated(T, K, E, ep, skew, shape, fp8, pick, grid_frac, seed):
    H, I = shape
    splits = _valid_splits(H, fp8)
    if T * K > heuristics.GATE_UP_SPLIT_MAX_PAIRS or not splits:
        return
    S = splits[pick % len(splits)]
    c = _case(T, K, E, ep, skew, H, I, fp8, seed)
    repro = f"repro: T={T} K={K} E={E} ep={ep} skew={skew} H={H} I={I} fp8={fp8} S={S} grid_frac={grid_frac} seed={seed}"
    tiles = I // 8
    bound = tiles * min(c.E_local, T * K) * S
    grid = max(1, min(bound, (bound + grid_frac - 1) // grid_frac))  # the launcher caps at the resident CTAs
    a = _emulate(c, S, grid, seed + 1)
    b = _emulate(c, S, max(1, grid // 2 + 1), seed + 2)  # another grid, arrival order and slot order
    active = [e for e in range(c.E_local) if a.cnt[e]]
    assert bool((a.k_cover[active] == 1).all()), f"{repro}: a K stage of a tile not covered exactly once"
    assert bool((a.k_cover[[e for e in range(c.E_local) if not a.cnt[e]]] == 0).all()), repro
    assert not a.counters.any(), f"{repro}: a counter left non-zero"
    assert bool((a.part_writes <= 1).all()), f"{repro}: a partial row written twice"
    flat = c.ids.reshape(-1).long() - c.start
    local = (flat >= 0) & (flat < c.E_local)
    assert bool((a.inter_writes[local] == 1).all()), f"{repro}: a local pair's inter row not written exactly once"
    assert bool((a.inter_writes[~local] == 0).all()), f"{repro}: a foreign pair's inter row written"
    assert int(a.part_writes.sum()) == int(local.sum()) * 2 * I * S, repro
    assert torch.equal(a.inter[local], b.inter[local]), f"{repro}: depends on arrival or slot order"
    ref = torch.zeros(T * K, I, dtype=torch.float64)
    for p in local.nonzero().flatten().tolist():
        h = c.w13[flat[p]] @ c.x[p // K]
        ref[p] = torch.nn.functional.silu(h[:I]) * h[I:]
    err = (a.inter[local].double() - ref[local]).abs().max().item() if local.any() else 0.0
    assert err <= 1e-4 * max(ref.abs().max().item(), 1.0), f"{repro}: max error {err}"
