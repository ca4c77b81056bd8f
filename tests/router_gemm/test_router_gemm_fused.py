"""The tiles with both products in one wgmma (paths wide96f / wide96rsf, wide96f4 with a 4-stage
ring, wide128f: m64n192k16 / m64n256k16 over the W_hi tile followed by the W_lo tile): FP64 accuracy and the same bits as the two-wgmma twin
(wide96 / wide96rs) for every split mode (cluster, workspace last-arrival, workspace all-reduce),
awkward shapes, graph replay == eager, PDL on == off. CPU tests of the planner entries."""

from __future__ import annotations

import pytest

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import (
    SHAPES, assert_pdl_and_graph_equal_eager, check_plan_and_twins, make_inputs, router_weight, twin_plan,
)

# ----------------------------------------------------------------------------- CPU tests


def test_fused_paths_are_tiles_with_workspace_variants():
    for fused, twin in heuristics.FUSED_TWIN.items():
        # every element's K chain and split order depend only on the rows per tile and the split
        assert heuristics.TILE_SHAPES[heuristics.TILES[fused]][0] == heuristics.TILE_SHAPES[heuristics.TILES[twin]][0]
        assert f"{fused}_ws" in heuristics.WS_PATHS and f"{fused}_wsp" in heuristics.WS_PATHS
        assert Plan(f"{fused}_wsp", 2).ws_mode == 2 and Plan(f"{fused}_ws", 4).tile == heuristics.TILES[fused]
    assert len(set(heuristics.TILES.values())) == len(heuristics.TILES)
    assert heuristics.choose_plan(4096, 192, 4096, lambda t, s: 132 // s, path="wide96f") == Plan("wide96f", 2)


# ----------------------------------------------------------------------------- GPU tests

gpu = pytest.mark.gpu


def _twin(plan: Plan) -> list[tuple[str, Plan]]:
    return [("two-wgmma twin", twin_plan(plan, heuristics.FUSED_TWIN))]


_CASES = [(shape, M) for shape in SHAPES for M in (1, 129, 1000)] + [((4096, 192), 4096)]


@gpu
@pytest.mark.parametrize("path", sorted(heuristics.FUSED_TWIN))
@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("shape,M", _CASES)
def test_fused_matches_fp64_and_two_wgmma_twin_bits(path, splits, shape, M):
    K, N = shape
    rw = router_weight(K, N, seed=K + 7 * N)
    x, _ = make_inputs(M, K, N, seed=M + splits)
    plan = Plan(path, splits)
    check_plan_and_twins(x, rw, plan, tag=f"{path} S={splits} M={M} K={K} N={N}", twins=_twin(plan))


@gpu
@pytest.mark.parametrize("path", ["wide96f_ws", "wide96f_wsp", "wide96rsf_wsp", "wide128f_wsp"])
@pytest.mark.parametrize("splits", [2, 4, 8])
@pytest.mark.parametrize("shape,M", [((4096, 192), 4096), ((6144, 768), 512), ((4096, 192), 333)])
def test_fused_workspace_split_matches_twins(path, splits, shape, M):
    K, N = shape
    rw = router_weight(K, N, seed=K + 7 * N)
    x, _ = make_inputs(M, K, N, seed=M + 3 * splits)
    plan = Plan(path, splits)
    check_plan_and_twins(x, rw, plan, tag=f"{path} S={splits} M={M} K={K} N={N}",
                         twins=[("rerun", plan), *_twin(plan), ("cluster twin", Plan(path.rsplit("_", 1)[0], splits))])


@gpu
@pytest.mark.parametrize("K,N", [(64, 64), (192, 128), (1024, 320), (640, 1024)])
@pytest.mark.parametrize("path", sorted(heuristics.FUSED_TWIN))
@pytest.mark.parametrize("M", [3, 200])
def test_fused_general_shapes(K, N, path, M):
    from hpc_router_gemm.router_gemm import plan_for

    rw = router_weight(K, N, seed=K + N)
    x, _ = make_inputs(M, K, N, seed=K + N + M)
    plan = plan_for(M, N, K, x.device, path=path)
    check_plan_and_twins(x, rw, plan, tag=f"{path} M={M} K={K} N={N}", twins=_twin(plan))


@gpu
@pytest.mark.parametrize("plan", [Plan("wide96f", 2), Plan("wide96f_wsp", 4), Plan("wide96rsf", 2), Plan("wide128f", 4)])
def test_fused_graph_replay_and_pdl_equal_eager(plan):
    K, N, M = 4096, 192, 2048
    x, _ = make_inputs(M, K, N, seed=37)
    assert_pdl_and_graph_equal_eager(x, router_weight(K, N, seed=41), plan)


@gpu
def test_tile_shapes_match_the_kernels():
    from hpc_router_gemm import _ext

    ext = _ext.load()
    for name, tile in heuristics.TILES.items():
        assert tuple(ext.bf16x2_tile_shape(tile)) == heuristics.TILE_SHAPES[tile], name
