"""The gemv paths (router_gemv_fp32.cuh, M <= 8; router_gemv_fp32_ldg.cuh "gemvr", M = 1): FP64 agreement on the listed and general shapes
at every split, bitwise independence of the grid size (set_num_sms), determinism, CUDA-graph
replay and PDL; CPU tests of its split rule and of forced-path errors."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal, poisoned_empty
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_router_gemm import heuristics

from ._cases import SHAPES, check_against_fp64, make_inputs


def _clusters(tile, s):  # the H200's measured residency: 2-CTA clusters 66, 4-CTA clusters 30
    return {1: 132, 2: 66, 4: 30, 8: 15}[s]


# ----------------------------------------------------------------------------- CPU tests


def test_gemv_split_rule():
    # N=192 rows on 132 SMs: S=1 leaves 60 SMs a whole row (16 KB) ahead; S=2 (66 clusters,
    # 2-3 half rows) has the smallest busiest SM; S=4 (30 clusters, 6-7 quarter rows) is worse.
    assert heuristics.gemv_splits(1, 192, 4096, 132, lambda s: _clusters(0, s)) == 2
    # Chat and Lite: whole rows already balance (5-6 and 2-3 rows per SM); ties go to S=1.
    assert heuristics.gemv_splits(1, 768, 6144, 132, lambda s: _clusters(0, s)) == 1
    assert heuristics.gemv_splits(1, 384, 3072, 132, lambda s: _clusters(0, s)) == 1
    # A row slice larger than shared memory forces a split; none fits -> None.
    assert heuristics.gemv_splits(1, 64, 65536, 132, lambda s: _clusters(0, s)) == 2
    assert heuristics.gemv_splits(1, 64, 262144, 132, lambda s: _clusters(0, s)) is None
    assert heuristics.gemv_clusters(2, 132, lambda s: _clusters(0, s)) == 66
    assert heuristics.gemv_clusters(4, 132, lambda s: _clusters(0, s)) == 30
    assert heuristics.gemv_clusters(2, 7, lambda s: _clusters(0, s)) == 3


def test_gemvr_rules():
    assert heuristics.gemv_splits(1, 768, 6144, 132, lambda s: _clusters(0, s), "gemvr") == 1
    assert heuristics.gemv_splits(1, 192, 4096, 132, lambda s: _clusters(0, s), "gemvr") == 2
    assert heuristics.gemv_splits(2, 768, 6144, 132, lambda s: _clusters(0, s), "gemvr") is None
    assert heuristics.gemv_fits(1, 8192, 1, "gemvr") and not heuristics.gemv_fits(1, 8256, 1, "gemvr")
    assert heuristics.gemv_splits(1, 192, 16384, 132, lambda s: _clusters(0, s), "gemvr") == 2
    with pytest.raises(ValueError, match="gemvr path serves M = 1"):
        heuristics.choose_plan(2, 192, 4096, _clusters, path="gemvr")
    # gemvrw2 takes gemvr's rules (same grid, same slice limit).
    for path in heuristics.GEMVR_PATHS:
        assert heuristics.gemv_fits(1, 8192, 1, path) and not heuristics.gemv_fits(1, 8256, 1, path)
        assert heuristics.gemv_splits(1, 192, 4096, 132, lambda s: _clusters(0, s), path) == 2
        with pytest.raises(ValueError, match=f"{path} path serves M = 1"):
            heuristics.choose_plan(2, 768, 6144, _clusters, path=path)


def test_gemv_forced_path():
    plan = heuristics.choose_plan(1, 768, 6144, _clusters, path="gemv")
    assert plan == heuristics.Plan("gemv", 1) and plan.tile is None
    with pytest.raises(ValueError, match="gemv path serves M <= 8"):
        heuristics.choose_plan(9, 192, 4096, _clusters, path="gemv")
    with pytest.raises(ValueError, match="gemv path serves M <= 8"):
        heuristics.choose_plan(1, 64, 262144, _clusters, path="gemv")


def test_table_small_m_rows():
    # Runs 1 and 2 (DESIGN.md): gemvr S=1 at M=1 on the three listed shapes, fp32 above it.
    for K, N in SHAPES:
        # Chat with the L2 evict_first policy on the weight and the 2-row load window (gemvrw2).
        chat = (K, N) == (6144, 768)
        assert heuristics.choose_plan(1, N, K, _clusters) == heuristics.Plan("gemvrw2" if chat else "gemvr", 1, chat)
        assert heuristics.choose_plan(2, N, K, _clusters).path == "fp32"
        assert heuristics.choose_plan(8, N, K, _clusters).path == "fp32"
    # Unlisted shapes and num_sms overrides keep the fp32 rule (gemvr is not measured there).
    assert heuristics.choose_plan(1, 320, 1024, _clusters).path == "fp32"
    assert heuristics.choose_plan(1, 768, 6144, _clusters, num_sms=66).path == "fp32"


# ----------------------------------------------------------------------------- GPU tests

GENERAL = [(64, 64), (1024, 320), (640, 1024), (8192, 128)]


def _gemv(x, rw, splits, out=None, path="gemv"):
    from hpc_router_gemm.heuristics import Plan
    from hpc_router_gemm.router_gemm import launch

    out = poisoned_empty(x.shape[0], rw.weight.shape[0], dtype=torch.float32, device=x.device) if out is None else out
    launch(x, rw, out, Plan(path, splits))
    return out


# gemvr and gemvrw2 (router_gemv_fp32_window.cuh) serve one token only.
PATH_M = [("gemv", 1), ("gemv", 3), ("gemv", 8), ("gemvr", 1), ("gemvrw2", 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("K,N", SHAPES + GENERAL)
@pytest.mark.parametrize("splits", heuristics.GEMV_SPLITS)
@pytest.mark.parametrize("path,M", PATH_M)
def test_gemv_matches_fp64(K, N, splits, path, M):
    from hpc_router_gemm import RouterWeight

    x, w = make_inputs(M, K, N, seed=K + N + M + splits)
    out = _gemv(x, RouterWeight(w), splits, path=path)
    check_against_fp64(out, x, w, strict_top8=(K, N) in SHAPES, tag=f"{path} S={splits} M={M} K={K} N={N}")


@pytest.mark.gpu
@pytest.mark.parametrize("K,N", SHAPES)
@pytest.mark.parametrize("path,M", [("gemv", 1), ("gemv", 5), ("gemvr", 1), ("gemvrw2", 1)])
def test_gemv_grid_size_deterministic_graph_pdl(K, N, path, M):
    import hpc_common
    from hpc_router_gemm import RouterWeight

    x, w = make_inputs(M, K, N, seed=21 + M)
    rw = RouterWeight(w)
    for splits in heuristics.GEMV_SPLITS:
        tag = f"{path} S={splits}"
        first = _gemv(x, rw, splits, path=path)
        for _ in range(3):
            assert_bitwise_equal(_gemv(x, rw, splits, path=path), first, name=f"{tag} rerun")
        try:  # fewer clusters own more rows each; every row's sum order stays the same
            for sms in (7, 50, 131):
                hpc_common.set_num_sms(sms)
                assert_bitwise_equal(_gemv(x, rw, splits, path=path), first, name=f"{tag} num_sms={sms}")
        finally:
            hpc_common.set_num_sms(None)
        for pdl in (False, True):
            with hpc_common.pdl_enabled(pdl):
                assert_bitwise_equal(_gemv(x, rw, splits, path=path), first, name=f"{tag} pdl={pdl}")
        out = poisoned_empty(M, N, dtype=torch.float32, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            _gemv(x, rw, splits, out=out, path=path)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                _gemv(x, rw, splits, out=out, path=path)
        torch.cuda.current_stream().wait_stream(s)
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(out, first, name=f"{tag} graph replay")


@pytest.mark.gpu
def test_gemv_strided_x_and_out():
    from hpc_router_gemm import RouterWeight

    xw, w = make_inputs(6, 6144 + 64, 768, seed=31)
    x = xw[:, 64:]  # row stride 6208, offset 128 bytes
    big = poisoned_empty(6, 1024, dtype=torch.float32, device="cuda")
    out = big[:, :768]
    rw = RouterWeight(w[:, :6144].contiguous())
    for splits in heuristics.GEMV_SPLITS:
        _gemv(x, rw, splits, out=out)
        check_against_fp64(out, x, w[:, :6144], strict_top8=True, tag=f"strided S={splits}")
        assert torch.isnan(big[:, 768:]).all(), "wrote outside out"
        one = big[2:3, :768]  # one token at a row offset of the strided input and output
        _gemv(x[2:3], rw, splits, out=one, path="gemvr")
        check_against_fp64(one, x[2:3], w[:, :6144], strict_top8=True, tag=f"strided gemvr S={splits}")
        assert torch.isnan(big[:, 768:]).all(), "gemvr wrote outside out"


_weights: dict = {}


@pytest.mark.gpu
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=st.sampled_from(SHAPES), M=st.integers(1, heuristics.GEMV_MAX_M),
       splits=st.sampled_from(heuristics.GEMV_SPLITS), path=st.sampled_from(heuristics.GEMV_PATHS),
       seed=st.integers(0, 2**31 - 1))
@example(shape=SHAPES[1], M=1, splits=1, path="gemv", seed=0)
@example(shape=SHAPES[2], M=1, splits=1, path="gemvr", seed=1)
@example(shape=SHAPES[0], M=1, splits=2, path="gemvr", seed=2)
@example(shape=SHAPES[1], M=8, splits=1, path="gemv", seed=3)  # x of 8 tokens shrinks the stage ring
def test_gemv_random_m(shape, M, splits, path, seed):
    from hpc_router_gemm import RouterWeight

    K, N = shape
    M = 1 if path in heuristics.GEMVR_PATHS else M
    if shape not in _weights:
        _weights[shape] = RouterWeight(make_inputs(1, K, N, seed=K + N)[1])
    rw = _weights[shape]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=gen).to(torch.bfloat16)
    out = _gemv(x, rw, splits, path=path)
    repro = f"repro: shape={shape} M={M} splits={splits} path={path} seed={seed}"
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag=repro)
    assert_bitwise_equal(_gemv(x, rw, splits, path=path), out, name=repro)
