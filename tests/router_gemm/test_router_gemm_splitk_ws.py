"""Cluster-free split-K of the BF16x2 kernel (paths <tile>_ws and <tile>_wsp, a global
workspace with self-resetting counters): FP64 accuracy, the same bits as the cluster plan
with the same split, determinism, graph replay == eager, counters left at zero, the capture
fallback and the all-reduce mode's residency guard. CPU tests of the planner pieces."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal
from hpc_common.testing.strategies import dim, seeds
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import (
    SHAPES, assert_graph_replays, check_against_fp64, check_plan_and_twins,
    launch_poisoned, make_inputs, router_weight,
)

# ----------------------------------------------------------------------------- CPU tests


def test_ws_paths_map_to_tiles_and_modes():
    assert Plan("wide96_ws", 4).tile == heuristics.TILE_WIDE96 and Plan("wide96_ws", 4).ws_mode == 1
    assert Plan("wide_wsp", 4).tile == heuristics.TILE_WIDE and Plan("wide_wsp", 4).ws_mode == 2
    assert Plan("narrow_ws", 1).ws_mode == 0  # no split: nothing to reduce
    assert Plan("wide96", 4).ws_mode == 0 and Plan("fp32", 2).tile is None
    assert set(heuristics.WS_PATHS) <= set(heuristics.PATHS)
    assert Plan("wide96_wspm", 4).multicast and Plan("wide96_wspm", 4).ws_mode == 2
    assert Plan("wide_wsm", 1).multicast and Plan("wide_wsm", 1).ws_mode == 0
    assert not Plan("wide96_wsp", 4).multicast and not Plan("wide96", 1).multicast
    # Multicast pads an odd M tile count: 3 tiles of 128 rows -> 4, times 8 N tiles.
    assert heuristics.bf16x2_tiles(heuristics.TILE_WIDE96, 300, 768, multicast=True) == 32
    assert heuristics.bf16x2_tiles(heuristics.TILE_WIDE96, 300, 768) == 24
    assert heuristics.ws_launch_mode(Plan("wide96_wspm", 4), 300, 768, 132) == 2
    assert heuristics.ws_launch_mode(Plan("wide96_wspm", 4), 300, 768, 120) == 1


def test_ws_splits_fill_one_wave():
    wide96, wide = heuristics.TILE_WIDE96, heuristics.TILE_WIDE
    # Chat M=512: 32 wide96 tiles x 4 = 128 CTAs (clusters of 4 would need two waves).
    assert heuristics.ws_splits(wide96, 512, 768, 6144, 132) == 4
    # Lite M=1024: 32 tiles x 4; K=4096 M=4096: 64 tiles x 2, or 32 wide tiles x 4.
    assert heuristics.ws_splits(wide96, 1024, 384, 3072, 132) == 4
    assert heuristics.ws_splits(wide96, 4096, 192, 4096, 132) == 2
    assert heuristics.ws_splits(wide, 4096, 192, 4096, 132) == 4
    # Never more splits than K blocks.
    assert heuristics.ws_splits(heuristics.TILE_NARROW, 64, 64, 128, 264) <= 2
    forced = heuristics.choose_plan(512, 768, 6144, lambda t, s: 132 // s, path="wide96_wsp")
    assert forced == Plan("wide96_wsp", 4)


def test_ws_launch_mode_guard():
    p = Plan("wide96_wsp", 4)
    assert heuristics.ws_launch_mode(p, 512, 768, 132) == 2  # 128 CTAs fit at once
    assert heuristics.ws_launch_mode(p, 512, 768, 100) == 1  # they do not: last arrival
    assert heuristics.ws_launch_mode(Plan("wide96_ws", 4), 512, 768, 132) == 1
    assert heuristics.ws_launch_mode(Plan("wide96", 4), 512, 768, 132) == 0


def test_table_picks_workspace_split_where_measured():
    # The cluster-free split wins where S=4/8 clusters would not fit at once.
    pick = lambda M, N, K: heuristics.choose_plan(M, N, K, lambda t, s: 132 // s)  # noqa: E731
    # The fused-product tile (wide96f, same bits) where it measured faster.
    assert pick(512, 768, 6144) == Plan("wide96f_wsp", 4)
    assert pick(256, 768, 6144) == Plan("wide128f", 8)  # 12 clusters of 8, one wave
    # Lite M=1024 on the 128-column tile, a 4-CTA cluster split in one wave (no workspace).
    assert pick(1024, 384, 3072) == Plan("wide128f", 4)
    assert pick(512, 384, 3072) == Plan("wide96f4", 4)
    assert pick(1024, 192, 4096) == Plan("wide96_wsp", 8)
    assert pick(2048, 192, 4096) == Plan("wide96f_wsp", 4)
    assert pick(4096, 192, 4096) == Plan("wide96f", 2)  # S=2: the cluster reduction is cheaper
    assert pick(1024, 768, 6144) == Plan("wide96f", 2)


def test_workspace_floats():
    from hpc_router_gemm.split_workspace import _pow2_at_least, workspace_floats

    assert workspace_floats(32, 4, 128, 96) == 32 * 4 * 128 * 96
    assert _pow2_at_least(1000, 256) == 1024 and _pow2_at_least(3, 256) == 256


# ----------------------------------------------------------------------------- GPU tests

gpu = pytest.mark.gpu
_WS = sorted(heuristics.WS_PATHS)


def _cluster_twin(plan: Plan) -> Plan:
    return Plan(plan.path.rsplit("_", 1)[0], plan.splits)


def _counters_are_zero():
    from hpc_router_gemm.split_workspace import _cache

    torch.cuda.synchronize()
    for ws in _cache.values():
        assert int(ws.counters.abs().sum()) == 0, "an arrival counter was left non-zero"


def _router_weight(K: int, N: int):
    return router_weight(K, N, seed=K + 3 * N)


@gpu
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), M=dim(1, 4096), path=st.sampled_from(_WS), splits=st.sampled_from([2, 4, 8]),
       seed=seeds())
@example(shape=SHAPES[1], M=512, path="wide96_ws", splits=4, seed=0)
@example(shape=SHAPES[1], M=512, path="wide96_wsp", splits=4, seed=1)
@example(shape=SHAPES[2], M=1024, path="wide96_wsp", splits=4, seed=2)
@example(shape=SHAPES[0], M=4096, path="wide_wsp", splits=4, seed=3)
@example(shape=SHAPES[0], M=4095, path="wide96_ws", splits=2, seed=4)
@example(shape=SHAPES[0], M=129, path="narrow_wsp", splits=8, seed=5)
@example(shape=SHAPES[1], M=300, path="wide96_wspm", splits=4, seed=6)  # 3 M tiles: a phantom one
@example(shape=SHAPES[2], M=1024, path="wide96_wspm", splits=4, seed=7)
@example(shape=SHAPES[0], M=4096, path="wide96_wsm", splits=2, seed=8)
@example(shape=SHAPES[0], M=100, path="wide_wspm", splits=8, seed=9)
@example(shape=SHAPES[0], M=4096, path="wide96_wspm", splits=2, seed=10)
@example(shape=SHAPES[0], M=4096, path="widers_wspm", splits=4, seed=11)
@example(shape=SHAPES[2], M=1000, path="widers_wsm", splits=8, seed=12)
# One-warpgroup tiles (narrow, narrow48f) at S = 2, 4 and 8 against their cluster twins
@example(shape=SHAPES[1], M=16, path="narrow48f_wsp", splits=8, seed=13)
@example(shape=SHAPES[0], M=40, path="narrow_ws", splits=4, seed=14)
@example(shape=SHAPES[2], M=64, path="narrow_wsp", splits=2, seed=15)
@example(shape=SHAPES[1], M=77, path="narrow48f_ws", splits=4, seed=16)
def test_ws_matches_fp64_and_cluster_bits(shape, M, path, splits, seed):
    K, N = shape
    rw = _router_weight(K, N)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
    plan = Plan(path, splits)
    repro = f"repro: shape={shape} M={M} {path} S={splits} seed={seed}"
    check_plan_and_twins(x, rw, plan, tag=repro, twins=[("rerun", plan), ("cluster twin", _cluster_twin(plan))])
    _counters_are_zero()


@gpu
@pytest.mark.parametrize("path", ["wide96_ws", "wide96_wsp", "wide_wsp", "wide96_wspm"])
def test_ws_graph_replay_equals_eager(path):
    K, N, M = 6144, 768, 512
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=21)
    plan = Plan(path, 4)
    assert_graph_replays(x, rw, plan, launch_poisoned(x, rw, plan), name="graph replay", replays=3)
    _counters_are_zero()


@gpu
def test_ws_capture_without_workspace_falls_back_to_the_cluster_bits():
    from hpc_router_gemm.router_gemm import launch

    K, N, M = 3072, 384, 1024
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=22)
    plan = Plan("wide96_ws", 4)
    eager = launch_poisoned(x, rw, plan)
    out = torch.empty(M, N, device="cuda")
    from hpc_router_gemm import split_workspace

    s = torch.cuda.Stream()
    key = (torch.cuda.current_device(), s.cuda_stream)
    split_workspace._cache.pop(key, None)  # torch pools streams: make sure this one has none
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            launch(x, rw, out, plan)
    torch.cuda.current_stream().wait_stream(s)
    assert key not in split_workspace._cache, "a workspace was allocated during capture"
    g.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, eager, name="capture fallback")


@gpu
def test_wsp_with_too_few_sms_uses_last_arrival():
    import hpc_common

    K, N, M = 4096, 192, 4096
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=23)
    plan = Plan("wide96_wsp", 2)
    full = launch_poisoned(x, rw, plan)
    try:
        hpc_common.set_num_sms(16)  # 128 CTAs can no longer be assumed resident: mode 1
        assert_bitwise_equal(launch_poisoned(x, rw, plan), full, name="guarded wsp")
    finally:
        hpc_common.set_num_sms(None)
    _counters_are_zero()


@gpu
@pytest.mark.parametrize("pdl", [False, True])
def test_ws_pdl_back_to_back(pdl):
    """Two calls in a row share the counters: the second must see them back at zero."""
    from hpc_router_gemm.router_gemm import launch

    K, N, M = 6144, 768, 512
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=24)
    plan = Plan("wide96_wsp", 4)
    ref = launch_poisoned(x, rw, plan)
    outs = [torch.empty(M, N, device="cuda") for _ in range(4)]
    for o in outs:
        launch(x, rw, o, plan, pdl=pdl)
    torch.cuda.synchronize()
    for o in outs:
        assert_bitwise_equal(o, ref, name=f"back to back pdl={pdl}")
    _counters_are_zero()


@gpu
@pytest.mark.parametrize("K,N,M", [(6144, 768, 4096), (3072, 384, 333), (4096, 192, 64)])
@pytest.mark.parametrize("path", ["wide_wspm", "wide96_wspm", "widers_wspm"])
def test_multicast_without_split_matches_plain_tile(K, N, M, path):
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + 25)
    out = launch_poisoned(x, rw, Plan(path, 1))
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag=f"{path} S=1 M={M}")
    assert_bitwise_equal(launch_poisoned(x, rw, Plan(path.rsplit("_", 1)[0], 1)), out, name=f"{path} S=1 vs plain")
