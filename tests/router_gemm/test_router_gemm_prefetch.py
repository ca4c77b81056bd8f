"""The `pf` paths (wide96pf, widerspf, ...): the same kernels with an L2 prefetch of the x and
weight boxes K blocks ahead of the TMA loads. Prefetch changes no arithmetic: the same bits as
the path without it, for cluster, workspace and multicast splits, short K (fewer blocks than
the prefetch distance), graph replay. CPU tests of the planner entries."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import capture_on_side_stream, check_against_fp64, launch_poisoned, make_inputs, router_weight


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
    tag = f"{path} S={plan.splits} M={M} K={K} N={N}"
    out = launch_poisoned(x, rw, plan)
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag=tag)
    assert_bitwise_equal(launch_poisoned(x, rw, _no_pf(plan)), out, name=f"without prefetch {tag}")


@gpu
@pytest.mark.parametrize("plan", [Plan("wide96pf_wsp", 2), Plan("wide96pf_wsp", 4), Plan("wide96pf_wspm", 2),
                                  Plan("wide96pf_ws", 4), Plan("widerspf_wsp", 4), Plan("wide96rspf_wsp", 8)])
@pytest.mark.parametrize("K,N,M", [(4096, 192, 4096), (3072, 384, 1024), (6144, 768, 300)])
def test_pf_workspace_and_multicast_same_bits(plan, K, N, M):
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + 11)
    tag = f"{plan.path} S={plan.splits} M={M} K={K} N={N}"
    out = launch_poisoned(x, rw, plan)
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag=tag)
    assert_bitwise_equal(launch_poisoned(x, rw, _no_pf(plan)), out, name=f"without prefetch {tag}")
    assert_bitwise_equal(launch_poisoned(x, rw, plan), out, name=f"rerun {tag}")


@gpu
def test_pf_graph_replay_equals_eager():
    from hpc_router_gemm.router_gemm import launch

    K, N, M = 4096, 192, 4096
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=41)
    plan = Plan("wide96pf", 2)
    eager = launch_poisoned(x, rw, plan)
    out = torch.empty(M, N, device="cuda")
    g = capture_on_side_stream(lambda: launch(x, rw, out, plan))
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, eager, name="graph replay wide96pf")
