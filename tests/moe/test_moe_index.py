"""Properties of the routing index's Python twin (hpc_moe.index) and of its task lists (CPU).

Hypothesis draws sizes, EP settings, a routing skew and a seed, never tensor contents; the ids
come from a seeded generator, so a failure reprints as a one-line repro."""

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_common.testing.strategies import dim, seeds
from hpc_moe.index import (GATE_UP_CHUNK, W13_TILE_ROWS, W2_TILE_ROWS, build_index, down_chunk_tokens, down_tasks,
                           gate_up_tasks)

SKEWS = ("uniform", "one_expert", "none_local", "mostly_minus_one", "hot_expert")


def _ids(T, k, E, E_local, ep_rank, skew, seed):
    g = torch.Generator().manual_seed(seed)
    start = ep_rank * E_local
    if skew == "uniform":
        ids = torch.randint(-1, E, (T, k), generator=g)
    elif skew == "one_expert":
        ids = torch.full((T, k), start + int(torch.randint(0, E_local, (1,), generator=g)))
    elif skew == "none_local":  # other ranks' experts and -1 only
        other = [e for e in range(E) if not start <= e < start + E_local] + [-1]
        ids = torch.tensor(other)[torch.randint(0, len(other), (T, k), generator=g)]
    elif skew == "mostly_minus_one":
        ids = torch.where(torch.rand(T, k, generator=g) < 0.8, -1, torch.randint(0, E, (T, k), generator=g))
    else:  # a router's top-k: distinct ids per row, one expert of the rank in most rows
        logits = torch.randn(T, E, generator=g)
        logits[:, start] += 3.0
        ids = logits.topk(min(k, E), dim=1).indices
        if k > E:
            ids = torch.cat([ids, torch.full((T, k - E), -1)], 1)
    return ids.to(torch.int32 if seed % 2 else torch.int64)


def _check(ids, E_local, start, I, H):
    T, k = ids.shape
    idx = build_index(ids, start, E_local)
    local = (ids.long() >= start) & (ids.long() < start + E_local)
    S = int(local.sum())
    # counts and contiguous ranges in expert order
    assert idx.counts.tolist() == [int((ids.long() == start + e).sum()) for e in range(E_local)]
    assert idx.offsets[0] == 0 and idx.num_slots == S
    assert torch.equal(idx.offsets[1:] - idx.offsets[:-1], idx.counts)
    # every routed (token, k) pair in exactly one slot, inside its expert's range; the others in none
    slots = idx.slot_of[local]
    assert torch.equal(torch.sort(slots).values, torch.arange(S))  # duplicate-free, nothing missing
    assert bool((idx.slot_of[~local] == -1).all())
    for e in range(E_local):
        lo, hi = idx.expert_range(e)
        pos = (ids.long() == start + e).reshape(-1).nonzero().flatten()
        # the expert's slots, in (token, k) order
        assert torch.equal(idx.slot_of.reshape(-1)[pos], torch.arange(lo, hi))
        assert torch.equal(idx.slot_token[lo:hi] * k + idx.slot_k[lo:hi], pos)
    # Gate-Up tasks: each active expert's slots once per w13 tile, in chunks of <= GATE_UP_CHUNK, in order
    tasks = gate_up_tasks(idx, I)
    assert tasks == sorted(tasks)  # expert, then tile, then chunk
    assert len({(e, t, s) for e, t, s, _ in tasks}) == len(tasks)
    for e in range(E_local):
        lo, hi = idx.expert_range(e)
        for tile in range(I // W13_TILE_ROWS):
            mine = [(s, end) for ee, t, s, end in tasks if ee == e and t == tile]
            covered = [v for s, end in mine for v in range(s, end)]
            assert covered == list(range(lo, hi))
            assert all(0 < end - s <= GATE_UP_CHUNK for s, end in mine)
    assert {e for e, *_ in tasks} == set(idx.active_experts)
    # Down tasks: every (token, H tile) once
    dt = down_tasks(T, H, k)
    cells = [(u, t) for u, s, end in dt for t in range(s, end)]
    assert sorted(cells) == [(u, t) for u in range(H // W2_TILE_ROWS) for t in range(T)]
    assert all(0 < end - s <= down_chunk_tokens(k) for _, s, end in dt)
    return idx


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=dim(1, 300), k=st.integers(1, 16), E_local=st.integers(1, 32), ep_size=st.sampled_from([1, 2, 3, 8]),
       rank_frac=st.floats(0, 0.999), skew=st.sampled_from(SKEWS), seed=seeds())
@example(T=1, k=1, E_local=1, ep_size=1, rank_frac=0.0, skew="uniform", seed=0)
@example(T=1, k=16, E_local=32, ep_size=1, rank_frac=0.0, skew="hot_expert", seed=1)
@example(T=256, k=8, E_local=24, ep_size=8, rank_frac=0.5, skew="hot_expert", seed=2)
@example(T=257, k=8, E_local=24, ep_size=8, rank_frac=0.9, skew="one_expert", seed=3)
@example(T=33, k=8, E_local=4, ep_size=2, rank_frac=0.0, skew="none_local", seed=4)
@example(T=17, k=16, E_local=16, ep_size=1, rank_frac=0.0, skew="one_expert", seed=5)
def test_index_properties(T, k, E_local, ep_size, rank_frac, skew, seed):
    ep_rank = int(rank_frac * ep_size)
    E = E_local * ep_size
    ids = _ids(T, k, E, E_local, ep_rank, skew, seed)
    repro = f"T={T} k={k} E_local={E_local} ep_size={ep_size} ep_rank={ep_rank} skew={skew} seed={seed}"
    try:
        idx = _check(ids, E_local, ep_rank * E_local, 64, 128)
    except AssertionError as err:
        raise AssertionError(f"repro: {repro}") from err
    if skew == "none_local":
        assert idx.num_slots == 0 and gate_up_tasks(idx, 64) == []
    if skew == "one_expert":
        assert len(idx.active_experts) == 1 and idx.num_slots == T * k


def test_all_tokens_to_one_expert_chunks():
    T, k, E_local = 40, 4, 8
    ids = torch.full((T, k), 5, dtype=torch.int32)
    idx = _check(ids, E_local, 0, 192, 256)
    assert idx.expert_range(5) == (0, T * k)
    tasks = gate_up_tasks(idx, 192)
    assert len(tasks) == (192 // W13_TILE_ROWS) * (-(-T * k // GATE_UP_CHUNK))
    assert tasks[0] == (5, 0, 0, GATE_UP_CHUNK)


def test_ep_filtering_and_minus_one():
    ids = torch.tensor([[3, 4, -1], [5, 2, 7], [-1, -1, -1]])
    idx = build_index(ids, 4, 2)  # rank owning experts 4, 5
    assert idx.counts.tolist() == [1, 1]
    assert idx.slot_of.tolist() == [[-1, 0, -1], [1, -1, -1], [-1, -1, -1]]
    assert idx.slot_token.tolist() == [0, 1] and idx.slot_k.tolist() == [1, 0]


def test_repeated_id_in_a_row_gets_two_slots():
    idx = build_index(torch.tensor([[1, 1], [0, 1]]), 0, 2)
    assert idx.counts.tolist() == [1, 3]
    assert idx.slot_of.tolist() == [[1, 2], [0, 3]]


def test_down_chunk_matches_the_kernels():
    kernels = pytest.importorskip("hpc_moe.kernels")
    if not hasattr(kernels, "down_chunk_tokens"):
        pytest.skip("hpc_moe.kernels has no down_chunk_tokens")
    assert [kernels.down_chunk_tokens(k) for k in range(1, 17)] == [down_chunk_tokens(k) for k in range(1, 17)]
