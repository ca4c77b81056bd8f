"""`gemvrw2` (router_gemv_fp32_window.cuh) streams each thread's rows through 2 row buffers. It
changes only when the weight is requested, so it must give gemvr's bits for the same split, with
and without the L2 evict_first policy, at any grid size (more rows per CTA than row buffers: the
streaming loop runs several rounds), under graph replay and with PDL. CPU tests of the plan
plumbing down to the extension call."""

from __future__ import annotations

import importlib
import types

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal
from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import SHAPES, assert_graph_replays, check_against_fp64, launch_poisoned, make_inputs, router_weight

VARIANTS = ("gemvrw2",)


def _clusters(tile, s):  # the H200's measured residency
    return {1: 132, 2: 66, 4: 30, 8: 15}[s]


# ----------------------------------------------------------------------------- CPU tests


def test_window_path_is_a_gemv_path():
    assert set(VARIANTS) < set(heuristics.GEMVR_PATHS) and set(heuristics.GEMVR_PATHS) <= set(heuristics.GEMV_PATHS)
    assert set(heuristics.GEMV_PATHS) <= set(heuristics.PATHS)
    # The dispatch table uses it where it measured fastest: Chat M=1.
    used = {(key, r[0], r[1]) for key, rows in heuristics.TABLE.items() for r in rows if r[1] in VARIANTS}
    assert used == {((6144, 768), 1, "gemvrw2")}
    assert Plan("gemvrw2", 1, True).name == "gemvrw2_s1_ef"


@pytest.mark.parametrize("K,N", SHAPES + [(1024, 320), (8192, 128)])
@pytest.mark.parametrize("path", VARIANTS)
def test_variant_split_is_gemvr_split(K, N, path):
    ref = heuristics.choose_plan(1, N, K, _clusters, path="gemvr")
    assert heuristics.choose_plan(1, N, K, _clusters, path=path) == Plan(path, ref.splits)


@pytest.mark.parametrize("path", ("gemvr", *VARIANTS))
@pytest.mark.parametrize("ef", (False, True))
def test_launch_passes_the_variant(monkeypatch, path, ef):
    # The module, not the function of the same name that the package exports.
    rg = importlib.import_module("hpc_router_gemm.router_gemm")

    calls = []

    class FakeExt:
        GemvFp32Params = types.SimpleNamespace

        def gemv_fp32(self, kind, params, pdl, stream):
            calls.append((kind, params, pdl))

    monkeypatch.setattr(rg._ext, "load", lambda: FakeExt())
    monkeypatch.setattr(rg, "_scaled_max_clusters", lambda device: _clusters)
    monkeypatch.setattr(rg, "get_num_sms", lambda device: 132)
    monkeypatch.setattr(rg, "stream_ptr", lambda device: 0)
    x = torch.zeros(1, 6144, dtype=torch.bfloat16)
    rw = types.SimpleNamespace(weight=torch.zeros(768, 6144))
    rg.launch(x, rw, torch.empty(1, 768), Plan(path, 1, ef), pdl=False)
    ((kind, p, pdl),) = calls
    assert kind == {"gemvr": 1, "gemvrw2": 2}[path]
    assert p.clusters == 132 and not pdl and p.w_evict_first == int(ef) and (p.M, p.N, p.K, p.splits) == (1, 768, 6144, 1)


# ----------------------------------------------------------------------------- GPU tests

GENERAL = [(64, 64), (1024, 320), (640, 1024), (8192, 128)]


@pytest.mark.gpu
@pytest.mark.parametrize("K,N", SHAPES + GENERAL)
@pytest.mark.parametrize("splits", heuristics.GEMV_SPLITS)
@pytest.mark.parametrize("ef", (False, True))
@pytest.mark.parametrize("path", VARIANTS)
def test_gemvr_variant_same_bits_as_gemvr(path, ef, splits, K, N):
    if not heuristics.gemv_fits(1, K, splits, path):
        pytest.skip(f"{path} S={splits} does not serve K={K}")
    rw = router_weight(K, N, seed=K + 3 * N)
    x, _ = make_inputs(1, K, N, seed=K + N + splits)
    base = launch_poisoned(x, rw, Plan("gemvr", splits))
    got = launch_poisoned(x, rw, Plan(path, splits, ef))
    tag = f"{path} S={splits} ef={ef} K={K} N={N}"
    assert_bitwise_equal(got, base, name=f"{tag} vs gemvr")
    check_against_fp64(got, x, rw.weight, strict_top8=(K, N) in SHAPES, tag=tag)


@pytest.mark.gpu
@pytest.mark.parametrize("K,N", SHAPES)
@pytest.mark.parametrize("path", VARIANTS)
def test_gemvr_variant_grid_size_graph_pdl(path, K, N):
    import hpc_common

    rw = router_weight(K, N, seed=K + 3 * N)
    x, _ = make_inputs(1, K, N, seed=77)
    for splits in heuristics.GEMV_SPLITS:
        if not heuristics.gemv_fits(1, K, splits, path):
            continue
        plan = Plan(path, splits, evict_first=True)
        first = launch_poisoned(x, rw, Plan("gemvr", splits))
        tag = f"{path} S={splits} K={K} N={N}"
        try:  # 7 SMs: 27-110 rows per CTA, many rounds of the row ring
            for sms in (7, 50, 131):
                hpc_common.set_num_sms(sms)
                assert_bitwise_equal(launch_poisoned(x, rw, plan), first, name=f"{tag} num_sms={sms}")
        finally:
            hpc_common.set_num_sms(None)
        for pdl in (False, True):
            assert_bitwise_equal(launch_poisoned(x, rw, plan, pdl=pdl), first, name=f"{tag} pdl={pdl}")
        assert_graph_replays(x, rw, plan, first, name=f"{tag} graph replay")


@pytest.mark.gpu
@pytest.mark.parametrize("path", VARIANTS)
def test_gemvr_variant_strided_x_and_out(path):
    from hpc_common.testing import poisoned_empty
    from hpc_router_gemm import RouterWeight

    xw, w = make_inputs(3, 6144 + 64, 768, seed=31)
    x = xw[1:2, 64:]  # row offset and a 128-byte column offset
    rw = RouterWeight(w[:, :6144].contiguous())
    big = poisoned_empty(3, 1024, dtype=torch.float32, device="cuda")
    out = big[1:2, :768]
    for splits in heuristics.GEMV_SPLITS:
        launch_poisoned(x, rw, Plan(path, splits), out=out)
        check_against_fp64(out, x, rw.weight, strict_top8=True, tag=f"strided {path} S={splits}")
        assert torch.isnan(big[:, 768:]).all() and torch.isnan(big[0]).all(), f"{path} wrote outside out"
