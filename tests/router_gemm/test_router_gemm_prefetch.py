"""The `pf` paths (wide96pf, widerspf, ...): the same kernels with an L2 prefetch of the x and
weight boxes K blocks ahead of the TMA loads. Prefetch changes no arithmetic: the same bits as
the path without it, for cluster, workspace and multicast splits, short K (fewer blocks than
the prefetch distance), graph replay. CPU tests of the planner entries."""

from __future__ import annotations

import pytest

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import assert_graph_replays, check_plan_and_twins, launch_poisoned, make_inputs, router_weight


def test_pf_paths_carry_the_prefetch_distance():
    assert Plan("wide96pf", 2).prefetch == heuristics.PREFETCH_BLOCKS > 0
    assert Plan("wide96pf", 2).tile == heuristics.TILE_WIDE96
    assert Plan("widerspf_wsp", 4).tile == heuristics.TILE_WIDE_RS and Plan("widerspf_wsp", 4).prefetch
    assert Plan("wide96pf_wspm", 2).multicast and Plan("wide96pf_wspm", 2).ws_mode == 2
    assert Plan("wide96_wsp", 2).prefetch == 0 and Plan("wide96rs", 2).prefetch == 0
    assert set(heuristics.PF_TILES) <= set(heuristics.PATHS)


gpu = pytest.mark.gpu


def _router_weight(K: int, N: int):
    return router_weight(K, N, seed=K + 7 * N)


def _no_pf(plan: Plan) -> Plan:
    base, sep, suffix = plan.path.partition("_")
    return Plan(base[:-2] + sep + suffix, plan.splits)


@gpu
@pytest.mark.parametrize("path", sorted(heuristics.PF_TILES))
@pytest.mark.parametrize("splits", [1, 2])
@pytest.mark.parametrize("K,N,M", [(4096, 192, 4096), (3072, 384, 1000), (6144, 768, 100), (64, 64, 3), (192, 128, 200),
                                   (640, 1024, 129)])
def test_pf_same_bits_as_without(path, splits, K, N, M):
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + K + splits)
    plan = Plan(path, min(splits, K // 64))
    check_plan_and_twins(x, rw, plan, tag=f"{path} S={plan.splits} M={M} K={K} N={N}",
                         twins=[("without prefetch", _no_pf(plan))])


@gpu
@pytest.mark.parametrize("plan", [Plan("wide96pf_wsp", 2), Plan("wide96pf_wsp", 4), Plan("wide96pf_wspm", 2),
                                  Plan("wide96pf_ws", 4), Plan("widerspf_wsp", 4), Plan("wide96rspf_wsp", 8)])
@pytest.mark.parametrize("K,N,M", [(4096, 192, 4096), (3072, 384, 1024), (6144, 768, 300)])
def test_pf_workspace_and_multicast_same_bits(plan, K, N, M):
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + 11)
    check_plan_and_twins(x, rw, plan, tag=f"{plan.path} S={plan.splits} M={M} K={K} N={N}",
                         twins=[("without prefetch", _no_pf(plan)), ("rerun", plan)])


@gpu
def test_pf_graph_replay_equals_eager():
    K, N, M = 4096, 192, 4096
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=41)
    plan = Plan("wide96pf", 2)
    assert_graph_replays(x, rw, plan, launch_poisoned(x, rw, plan), name="graph replay wide96pf")
