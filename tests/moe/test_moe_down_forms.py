"""The two Down forms on the CPU: the host-side choice (hpc_moe.heuristics, kernels.window_down_form), the
workspace buffers of the expert form, and a Python emulation of the expert form's index, tasks,
partials and reduce that follows moe_gate_up.cuh (write_down_index), moe_down_experts.cuh and
moe_topk_reduce.cuh step by step: every local pair's row of y written exactly once per H row, no other
row written, the tasks within the grid's bound, and the result equal to the reference.

Hypothesis draws sizes, EP settings, a routing skew and a seed, never tensor contents."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_moe import MoEWorkspace, heuristics
from hpc_moe.heuristics import DOWN_EXPERT, DOWN_TILE
from hpc_moe.index import build_index

# ---- the choice ----------------------------------------------------------------------------------


def test_down_form_hy3_tp8():
    # E = 192, top-8, I = 192: the H200's crossover (heuristics.py): FP8 from T = 64 (512 pairs, 2.67 per
    # expert), BF16 from T = 96 (4 per expert)
    assert heuristics.down_form(63 * 8, 192, 192, True) == DOWN_TILE  # under 512 pairs
    assert heuristics.down_form(64 * 8, 192, 192, True) == DOWN_EXPERT
    assert heuristics.down_form(64 * 8, 192, 192, False) == DOWN_TILE
    assert heuristics.down_form(95 * 8, 192, 192, False) == DOWN_TILE
    assert heuristics.down_form(96 * 8, 192, 192, False) == DOWN_EXPERT
    for fp8 in (True, False):
        assert heuristics.down_form(128 * 8, 192, 192, fp8) == DOWN_EXPERT
        assert heuristics.down_form(256 * 8, 192, 192, fp8) == DOWN_EXPERT
        assert heuristics.down_form(8192, 192, 192, fp8) == DOWN_EXPERT
    assert heuristics.down_form(1 * 8, 192, 192, True) == DOWN_TILE
    assert heuristics.down_form(16 * 8, 192, 192, True) == DOWN_TILE
    # FP8 needs 2.5 pairs per expert: 600 pairs over 256 experts (2.34) stay on the tile form
    assert heuristics.down_form(600, 256, 192, True) == DOWN_TILE
    assert heuristics.down_form(640, 256, 192, True) == DOWN_EXPERT


def test_down_form_needs_min_pairs_and_small_tiles():
    assert heuristics.down_form(511, 8, 192, True) == DOWN_TILE  # few experts: the pair floor decides
    assert heuristics.down_form(512, 8, 192, True) == DOWN_EXPERT
    # tile bytes: FP8 I <= 768, BF16 I <= 384 (Hy3 EP8's I = 1536 stays on the tile form)
    assert heuristics.down_form(8192, 192, 768, True) == DOWN_EXPERT
    assert heuristics.down_form(8192, 192, 832, True) == DOWN_TILE
    assert heuristics.down_form(8192, 192, 384, False) == DOWN_EXPERT
    assert heuristics.down_form(8192, 192, 448, False) == DOWN_TILE
    assert heuristics.down_form(8192, 192, 1536, True) == DOWN_TILE


@pytest.mark.parametrize("I,fp8,tiles", [(192, True, 16), (192, False, 8), (64, True, 16), (384, False, 4),
                                         (768, True, 4), (320, False, 4), (448, True, 4)])
def test_block_tiles(I, fp8, tiles):
    assert heuristics.expert_down_supported(I, fp8)
    assert tiles <= 16 and -(-I // 128) <= 8  # the kernel's kExpertDownMaxBlockTiles, kExpertDownScaleWords / 4
    assert heuristics.expert_down_block_tiles(I, fp8) == tiles
    # a block's weights stay within the 48 KB per CTA the shared-memory budget assumes
    assert heuristics.expert_down_block_tiles(I, fp8) * heuristics.w2_tile_bytes(I, fp8) <= 48 << 10


def _smem_bytes(I, fp8, max_active):
    """ExpertDownSmem::layout of moe_down_experts.cuh."""
    tiles = heuristics.expert_down_block_tiles(I, fp8)
    weights = tiles * heuristics.w2_tile_bytes(I, fp8)
    stage_stride = (tiles * 16 + 8) * 2
    return weights + 32 * I + 16 * stage_stride + 4 * 8 + 16 * 4 + 32 * 4 + 2 * (max_active + 1) * 4


@pytest.mark.parametrize("fp8", [True, False])
def test_expert_form_shared_memory_leaves_two_ctas_per_sm(fp8):
    # 228 KB per SM, 1 KB reserved per CTA; E_local up to 512 experts. Three at I = 192 (Hy3 / Qwen3 TP8).
    for I in range(64, 4097, 64):
        if heuristics.expert_down_supported(I, fp8):
            assert 2 * (_smem_bytes(I, fp8, 512) + 1024) <= 228 << 10, I
    assert 3 * (_smem_bytes(192, fp8, 512) + 1024) <= 228 << 10


def test_task_bound():
    S = heuristics.EXPERT_DOWN_SLAB_PAIRS
    assert heuristics.expert_down_task_bound(2048, 192) == 2048 // S + 192
    assert heuristics.expert_down_task_bound(5, 192) == 5  # at most one task per pair
    assert heuristics.expert_down_task_bound(1, 1) == 1
    # the bound holds for the worst splits: one expert with everything, every expert one slab and a bit
    for counts in ([8192], [S + 1] * 40, [1] * 192, [S] * 64, [2 * S - 1, 1, S + 1]):
        tasks = sum(math.ceil(c / S) for c in counts)
        assert tasks <= heuristics.expert_down_task_bound(sum(counts), len(counts)), counts
    assert heuristics.expert_down_task_bound(8192, 8192) < 65536  # gridDim.y


def _weights(I=192, quant="fp8_block", E=192):
    return SimpleNamespace(quant=quant, intermediate_size=I, hidden_size=256, num_experts=E)


def test_window_down_form_checks():
    from hpc_moe import kernels

    w = _weights()
    ws = MoEWorkspace(256, 8, 256, 192, fp8=True)
    out = torch.empty(256, 256, dtype=torch.bfloat16)
    assert kernels.window_down_form(w, 2048, out, ws) == DOWN_EXPERT
    assert kernels.window_down_form(w, 16, out, ws) == DOWN_TILE
    assert kernels.window_down_form(w, 16, out, ws, down="expert") == DOWN_EXPERT
    assert kernels.window_down_form(w, 2048, out, ws, down="tile") == DOWN_TILE
    misaligned = torch.empty(256 * 256 + 1, dtype=torch.bfloat16)[1:].view(256, 256)
    assert kernels.window_down_form(w, 2048, misaligned, ws) == DOWN_TILE  # the reduce stores 16 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        kernels.window_down_form(w, 2048, misaligned, ws, down="expert")
    with pytest.raises(ValueError, match="down must be None, 'tile' or 'expert'"):
        kernels.window_down_form(w, 2048, out, ws, down="fast")
    with pytest.raises(ValueError, match="w2 tile of at most"):
        kernels.window_down_form(_weights(I=1536), 2048, out, ws, down="expert")
    small = SimpleNamespace(y=torch.empty(100, 256, dtype=torch.bfloat16),
                            down_index=torch.empty(heuristics.index_words(2048), dtype=torch.int32))
    with pytest.raises(ValueError, match="workspace.y"):
        kernels.window_down_form(w, 2048, out, small)
    short = SimpleNamespace(y=ws.y, down_index=torch.empty(10, dtype=torch.int32))
    with pytest.raises(ValueError, match="workspace.down_index"):
        kernels.window_down_form(w, 2048, out, short)


def test_down_tile_splits():
    # H200 (132 SMs, 3 resident tile-form CTAs each = 396): H = 4096 (256 CTAs per chunk) is never split,
    # H = 2048 (128) into 3, H = 256 (16) up to the cap; never more split groups than active-expert groups
    assert heuristics.down_tile_splits(1, 4096, 4 * 8, 192, 132) == 1  # Hy3 T = 4: one wave, no split
    assert heuristics.down_tile_splits(1, 4096, 16 * 8, 192, 132) == 3  # Hy3 T = 16: two full waves
    assert heuristics.down_tile_splits(2, 4096, 256 * 8, 192, 132) == 1  # 512 CTAs already
    assert heuristics.down_tile_splits(1, 7168, 64 * 8, 256, 132) == 1
    assert heuristics.down_tile_splits(1, 2048, 16 * 8, 128, 132) == 3
    assert heuristics.down_tile_splits(2, 2048, 200 * 8, 128, 132) == 3  # two chunks: 256 CTAs, two waves
    assert heuristics.down_tile_splits(1, 2048, 8, 128, 132) == 2  # T = 1, top-8: two groups of 4 experts
    assert heuristics.down_tile_splits(1, 2048, 4, 128, 132) == 1
    assert heuristics.down_tile_splits(1, 256, 4096, 64, 132) == heuristics.MAX_DOWN_TILE_SPLITS
    assert heuristics.down_tile_splits(1, 2048, 128, 2, 132) == 1  # EP: 2 local experts
    for chunks in (1, 2, 5):
        for H in (128, 2048, 4096, 8192):
            for pairs in (1, 8, 64, 1024):
                s = heuristics.down_tile_splits(chunks, H, pairs, 128, 132)
                assert 1 <= s <= heuristics.MAX_DOWN_TILE_SPLITS
                assert s == 1 or chunks * H // 16 * s <= 2 * 3 * 132  # at most two waves of resident CTAs


def test_window_down_splits_checks():
    from hpc_moe import kernels

    w = SimpleNamespace(quant="bf16", intermediate_size=768, hidden_size=2048, num_experts=128, num_local_experts=128)
    ws = MoEWorkspace(64, 8, 2048, 768, fp8=False)
    out = torch.empty(64, 2048, dtype=torch.bfloat16)
    assert kernels.window_down_splits(w, 16, 8, out, ws, 132) == 3
    assert kernels.window_down_splits(w, 16, 8, out, ws, 132, splits=5) == 5
    misaligned = torch.empty(64 * 2048 + 1, dtype=torch.bfloat16)[1:].view(64, 2048)
    assert kernels.window_down_splits(w, 16, 8, misaligned, ws, 132) == 1  # the reduce stores 16 bytes
    with pytest.raises(ValueError, match="16-byte aligned"):
        kernels.window_down_splits(w, 16, 8, misaligned, ws, 132, splits=2)
    small = SimpleNamespace(y=torch.empty(100, 2048, dtype=torch.bfloat16))
    assert kernels.window_down_splits(w, 16, 8, out, small, 132) == 1
    with pytest.raises(ValueError, match="workspace.y"):
        kernels.window_down_splits(w, 16, 8, out, small, 132, splits=2)
    for bad in (0, 9, 2.0):
        with pytest.raises(ValueError, match="down_splits must be an int"):
            kernels.window_down_splits(w, 16, 8, out, ws, 132, splits=bad)


@pytest.mark.parametrize("max_tokens,top_k", [(1, 1), (33, 4), (256, 8), (1024, 8), (8192, 8), (700, 3), (5000, 16)])
def test_workspace_holds_every_window(max_tokens, top_k):
    """Any call the workspace accepts (T <= max_tokens, k <= top_k) has windows whose partials fit."""
    ws = MoEWorkspace(max_tokens, top_k, 128, 64, fp8=False)
    for k in range(1, top_k + 1):
        for T in {1, max_tokens, max(1, max_tokens // 2)}:
            win = heuristics.window_tokens(k)
            for t0 in range(0, T, win):
                pairs = min(win, T - t0) * k
                assert pairs <= ws.y.shape[0] and heuristics.index_words(pairs) <= ws.down_index.numel()


# ---- the expert form, emulated -------------------------------------------------------------------


def _down_index_words(ids, expert_start, E, cap, g):
    """write_down_index of the Gate-Up kernel's CTA 0: its shared-memory index (expert ranges in expert
    order; inside a range the order of the shared atomics, here a seeded shuffle)."""
    idx = build_index(ids, expert_start, E)
    active = idx.active_experts
    words = torch.full((heuristics.index_words(cap),), -(2**31), dtype=torch.int64)
    words[0] = len(active)
    pos = idx.slot_token * ids.shape[1] + idx.slot_k  # pair index of each slot
    for a, e in enumerate(active):
        lo, hi = idx.expert_range(e)
        words[1 + a] = e
        words[1 + cap + a] = lo
        pos[lo:hi] = pos[lo:hi][torch.randperm(hi - lo, generator=g)]
    words[1 + cap + len(active)] = idx.num_slots
    words[2 + 2 * cap: 2 + 2 * cap + idx.num_slots] = pos
    return words


def _emulate_down_experts(words, cap, w2, inter, H, I, E, fp8):
    """moe_down_experts_kernel over its whole grid: y (float32 values of the BF16 partials) and the number
    of times each y element was written; the tasks that ran."""
    tpw = heuristics.expert_down_tiles_per_warp(I, fp8)
    block = 4 * tpw
    S = heuristics.EXPERT_DOWN_SLAB_PAIRS
    bound = heuristics.expert_down_task_bound(cap, E)
    h_tiles = H // 16
    y = torch.full((cap, H), float("nan"))
    writes = torch.zeros(cap, H, dtype=torch.int64)
    max_active = min(E, cap)
    nact = max(0, min(int(words[0]), max_active))
    start = [int(words[1 + cap + a]) for a in range(nact + 1)]
    slabs = [-(-(start[a + 1] - start[a]) // S) for a in range(nact)]
    task_start = [sum(slabs[:a]) for a in range(nact + 1)]
    ran = 0
    for task in range(bound):
        if task >= task_start[nact]:
            continue
        a = max(i for i in range(nact) if task_start[i] <= task)  # the kernel's binary search
        e = int(words[1 + a])
        b0 = start[a] + (task - task_start[a]) * S
        b1 = min(b0 + S, start[a + 1])
        assert b0 < b1
        ran += 1
        for bx in range(-(-h_tiles // block)):
            tile0 = bx * block
            nt = min(block, h_tiles - tile0)
            covered = []
            for warp in range(4):
                covered += list(range(warp * nt // 4, (warp + 1) * nt // 4))
            assert covered == list(range(nt))  # the warps' slices partition the block
            rows = slice(tile0 * 16, (tile0 + nt) * 16)
            for c0 in range(b0, b1, 16):
                pairs = words[2 + 2 * cap + c0: 2 + 2 * cap + min(c0 + 16, b1)].long()
                assert bool(((pairs >= 0) & (pairs < cap)).all())
                part = inter[pairs].float() @ w2[e, rows].float().T  # [n, rows]
                y[pairs, rows] = part.to(torch.bfloat16).float()
                writes[pairs, rows] += 1
    assert ran == task_start[nact] <= bound
    return y, writes


def _emulate_reduce(y, ids, wts, expert_start, E, shared):
    T, K = ids.shape
    out = torch.zeros(T, y.shape[1])
    local = ids.long() - expert_start
    for j in range(K):  # j order, FP32
        ok = (local[:, j] >= 0) & (local[:, j] < E)
        rows = torch.arange(T) * K + j
        out[ok] += wts[ok, j, None] * y[rows[ok]]
    if shared is not None:
        out += shared.float()
    return out.to(torch.bfloat16)


SKEWS = ("router", "one_expert", "none_local", "mostly_minus_one", "duplicates", "hot")


def _case(T, K, E, ep_size, ep_rank, skew, seed, H, I):
    g = torch.Generator().manual_seed(seed)
    E_local = E // ep_size
    start = ep_rank * E_local
    if skew == "one_expert":
        ids = torch.full((T, K), -1)
        ids[:, 0] = start
    elif skew == "none_local":
        other = [e for e in range(E) if not start <= e < start + E_local] + [-1]
        ids = torch.tensor(other)[torch.randint(0, len(other), (T, K), generator=g)]
    elif skew == "mostly_minus_one":
        ids = torch.where(torch.rand(T, K, generator=g) < 0.8, -1, torch.randint(0, E, (T, K), generator=g))
    elif skew == "duplicates":  # every pair of every token to one local expert: > 128 pairs, several slabs
        ids = torch.full((T, K), start + E_local - 1)
    else:
        logits = torch.randn(T, E, generator=g)
        if skew == "hot":
            logits[:, start] += 4.0
        ids = logits.topk(min(K, E), dim=1).indices
        if K > E:
            ids = torch.cat([ids, torch.full((T, K - E), -1)], 1)
        ids = torch.where(torch.rand(T, K, generator=g) < 0.05, -1, ids)
    ids = ids.to(torch.int32 if seed % 2 else torch.int64)
    wts = torch.rand(T, K, generator=g)
    inter = torch.randn(T * K, I, generator=g).to(torch.bfloat16)
    w2 = (torch.randn(E_local, H, I, generator=g) / math.sqrt(I)).to(torch.bfloat16)
    shared = torch.randn(T, H, generator=g).to(torch.bfloat16) if seed % 3 == 0 else None
    return SimpleNamespace(ids=ids, wts=wts, inter=inter, w2=w2, shared=shared, start=start, E_local=E_local, g=g)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(T=st.integers(1, 90), K=st.integers(1, 16), E=st.sampled_from([4, 8, 16, 48]),
       ep=st.sampled_from([(1, 0), (2, 1), (4, 3)]), skew=st.sampled_from(SKEWS),
       shape=st.sampled_from([(128, 64), (256, 192), (384, 128), (640, 64)]), fp8=st.booleans(),
       seed=st.integers(0, 2**20))
@example(T=90, K=16, E=4, ep=(1, 0), skew="duplicates", shape=(256, 192), fp8=True, seed=1)  # 1440 pairs: 12 slabs
@example(T=33, K=8, E=48, ep=(1, 0), skew="router", shape=(384, 128), fp8=False, seed=2)  # 264 pairs: not 16 | T*K
@example(T=20, K=4, E=16, ep=(4, 3), skew="none_local", shape=(128, 64), fp8=True, seed=3)
@example(T=1, K=1, E=4, ep=(1, 0), skew="router", shape=(128, 64), fp8=False, seed=4)
def test_expert_form_emulated(T, K, E, ep, skew, shape, fp8, seed):
    H, I = shape
    ep_size, ep_rank = ep
    c = _case(T, K, E, ep_size, ep_rank, skew, seed, H, I)
    repro = f"repro: T={T} K={K} E={E} ep={ep} skew={skew} H={H} I={I} fp8={fp8} seed={seed}"
    cap = T * K
    words = _down_index_words(c.ids, c.start, c.E_local, cap, c.g)
    y, writes = _emulate_down_experts(words, cap, c.w2, c.inter, H, I, c.E_local, fp8)
    local = ((c.ids.long() >= c.start) & (c.ids.long() < c.start + c.E_local)).reshape(-1)
    assert bool((writes[local] == 1).all()), f"{repro}: a local pair's row not written exactly once"
    assert bool((writes[~local] == 0).all()), f"{repro}: a foreign pair's row written"
    got = _emulate_reduce(y, c.ids, c.wts, c.start, c.E_local, c.shared)
    # float64 reference from the same BF16 intermediate
    ref = torch.zeros(T, H, dtype=torch.float64)
    loc = c.ids.long() - c.start
    for e in range(c.E_local):
        t, j = (loc == e).nonzero(as_tuple=True)
        part = c.inter[t * K + j].double() @ c.w2[e].double().T
        ref.index_add_(0, t, part * c.wts[t, j].double()[:, None])
    if c.shared is not None:
        ref += c.shared.double()
    assert not got.isnan().any(), repro
    err = (got.double() - ref).abs().max().item()
    assert err <= 0.02 * max(ref.abs().max().item(), 1e-6) + 1e-3, f"{repro}: max error {err}"
