"""The wide tiles with the x fragments in registers (paths wide96rs / widers, wgmma with A from
registers): FP64 accuracy and the same bits as the shared-memory twin (wide96 / wide) for
every split mode (cluster, workspace last-arrival, workspace all-reduce), awkward shapes,
graph replay == eager, PDL on == off. CPU tests of the planner entries."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import poisoned_empty

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import (
    SHAPES, assert_pdl_and_graph_equal_eager, check_against_fp64, check_plan_and_twins, make_inputs, router_weight,
    twin_plan,
)

# ----------------------------------------------------------------------------- CPU tests


def test_rs_paths_are_tiles_with_workspace_variants():
    for rs, twin in heuristics.RS_TWIN.items():
        assert heuristics.TILE_SHAPES[heuristics.TILES[rs]] == heuristics.TILE_SHAPES[heuristics.TILES[twin]]
        assert f"{rs}_ws" in heuristics.WS_PATHS and f"{rs}_wsp" in heuristics.WS_PATHS
        assert not Plan(f"{rs}_wsp", 2).multicast and Plan(f"{rs}_wsp", 2).ws_mode == 2
        assert Plan(f"{rs}_ws", 4).tile == heuristics.TILES[rs]
    assert heuristics.TILE_GEMV not in heuristics.TILES.values()
    forced = heuristics.choose_plan(4096, 192, 4096, lambda t, s: 132 // s, path="wide96rs")
    assert forced == Plan("wide96rs", 2)
    # Runs C-E: widers S=1 102-103.5 us against wide S=1 106.6-109.7 at Chat M=4096 (same bits).
    assert heuristics.choose_plan(4096, 768, 6144, lambda t, s: 132 // s) == Plan("widers", 1)
    assert heuristics.choose_plan(2048, 768, 6144, lambda t, s: 132 // s) == Plan("widers", 1)


# ----------------------------------------------------------------------------- GPU tests

gpu = pytest.mark.gpu


def _router_weight(K: int, N: int):
    return router_weight(K, N, seed=K + 5 * N)


def _twin(plan: Plan) -> Plan:
    return twin_plan(plan, heuristics.RS_TWIN)


_CASES = [(shape, M) for shape in SHAPES for M in (1, 100, 129, 1000)] + [((4096, 192), 4096), ((3072, 384), 1024)]


@gpu
@pytest.mark.parametrize("path", sorted(heuristics.RS_TWIN))
@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("shape,M", _CASES)
def test_rs_matches_fp64_and_smem_twin_bits(path, splits, shape, M):
    K, N = shape
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + splits)
    plan = Plan(path, splits)
    check_plan_and_twins(x, rw, plan, tag=f"{path} S={splits} M={M} K={K} N={N}", twins=[("smem twin", _twin(plan))])


@gpu
@pytest.mark.parametrize("path", ["wide96rs_ws", "wide96rs_wsp", "widers_wsp"])
@pytest.mark.parametrize("splits", [2, 4, 8])
@pytest.mark.parametrize("shape,M", [((4096, 192), 4096), ((3072, 384), 1024), ((6144, 768), 512), ((4096, 192), 333)])
def test_rs_workspace_split_matches_twin_and_cluster(path, splits, shape, M):
    K, N = shape
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + 3 * splits)
    plan = Plan(path, splits)
    check_plan_and_twins(x, rw, plan, tag=f"{path} S={splits} M={M} K={K} N={N}",
                         twins=[("rerun", plan), ("smem twin", _twin(plan)),
                                ("cluster twin", Plan(path.rsplit("_", 1)[0], splits))])


@gpu
@pytest.mark.parametrize("K,N", [(64, 64), (192, 128), (1024, 320), (640, 1024)])
@pytest.mark.parametrize("path", sorted(heuristics.RS_TWIN))
@pytest.mark.parametrize("M", [3, 200])
def test_rs_general_shapes(K, N, path, M):
    from hpc_router_gemm.router_gemm import plan_for

    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=K + N + M)
    plan = plan_for(M, N, K, x.device, path=path)
    check_plan_and_twins(x, rw, plan, tag=f"{path} M={M} K={K} N={N}", twins=[("smem twin", _twin(plan))])


@gpu
@pytest.mark.parametrize("plan", [Plan("wide96rs", 2), Plan("wide96rs_wsp", 4), Plan("widers", 1)])
def test_rs_graph_replay_and_pdl_equal_eager(plan):
    K, N, M = 4096, 192, 2048
    x, _ = make_inputs(M, K, N, seed=31)
    assert_pdl_and_graph_equal_eager(x, _router_weight(K, N), plan)


@gpu
def test_rs_strided_x_and_out():
    from hpc_router_gemm.router_gemm import launch

    xw, w = make_inputs(300, 4096 + 64, 192, seed=33)
    x = xw[:, 64:]
    rw = _router_weight(4096, 192)
    big = poisoned_empty(300, 256, dtype=torch.float32, device="cuda")
    out = big[:, :192]
    launch(x, rw, out, Plan("wide96rs", 2))
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag="strided wide96rs")
    assert torch.isnan(big[:, 192:]).all(), "wrote outside out"
