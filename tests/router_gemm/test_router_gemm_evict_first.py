"""Plan.evict_first: the weight loads of every kernel with an L2 evict_first cache policy
(sm90::l2_evict_first_policy; ld.global.nc.L2::cache_hint in gemvr / fp32, the .L2::cache_hint
operand of the bulk and tensor copies in gemv and the wgmma tiles). A cache policy changes no
arithmetic: every path gives the same bits with and without it (cluster, workspace and
multicast splits, graph replay). CPU tests of the plan and table plumbing."""

from __future__ import annotations

import dataclasses

import pytest
from hpc_common.testing import assert_bitwise_equal

from hpc_router_gemm import heuristics
from hpc_router_gemm.heuristics import Plan

from ._cases import assert_graph_replays, check_against_fp64, launch_poisoned, make_inputs, router_weight


def _clusters(tile, s):
    return {1: 132, 2: 66, 4: 30, 8: 15}[s]


def test_plan_name_and_default():
    assert not Plan("gemvr", 1).evict_first
    assert Plan("gemvr", 1).name == "gemvr_s1" and Plan("gemvr", 1, True).name == "gemvr_s1_ef"
    assert Plan("narrow", 8, evict_first=True) != Plan("narrow", 8)
    # Forced paths (tests, benchmarks) come without the policy; the table decides for itself.
    assert not heuristics.choose_plan(1, 768, 6144, _clusters, path="gemvr").evict_first


def test_table_evict_first_rows():
    # The policy where it won in the same process as
    # cuBLAS (Chat M <= 8 and M=17..64); the 3.1 and 4.7 MB weights keep plain loads. Chat
    # M=9..24 runs narrow48f with the policy (13.92 against 14.40
    # without it at M=16).
    assert heuristics.choose_plan(1, 768, 6144, _clusters) == Plan("gemvrw2", 1, True)  # the 2-row window
    assert heuristics.choose_plan(2, 768, 6144, _clusters) == Plan("fp32", 2, True)
    assert heuristics.choose_plan(8, 768, 6144, _clusters) == Plan("fp32", 2, True)
    assert heuristics.choose_plan(64, 768, 6144, _clusters) == Plan("narrow", 8, True)
    assert heuristics.choose_plan(17, 768, 6144, _clusters).evict_first
    assert heuristics.choose_plan(16, 768, 6144, _clusters) == Plan("narrow48f", 8, True)
    assert heuristics.choose_plan(24, 768, 6144, _clusters) == Plan("narrow48f", 8, True)
    assert heuristics.choose_plan(25, 768, 6144, _clusters) == Plan("narrow", 8, True)
    for M in (65, 4096):
        assert not heuristics.choose_plan(M, 768, 6144, _clusters).evict_first
    for K, N in ((4096, 192), (3072, 384)):
        for M in (1, 16, 64, 4096):
            assert not heuristics.choose_plan(M, N, K, _clusters).evict_first


def test_table_rows_carry_the_option(monkeypatch):
    table = dict(heuristics.TABLE)
    table[(1024, 320)] = [(1, "gemvr", 1, "ef"), (8, "fp32", 2), (1 << 30, "narrow", 8, "ef")]
    monkeypatch.setattr(heuristics, "TABLE", table)
    assert heuristics.choose_plan(1, 320, 1024, _clusters) == Plan("gemvr", 1, True)
    assert heuristics.choose_plan(5, 320, 1024, _clusters) == Plan("fp32", 2, False)
    assert heuristics.choose_plan(64, 320, 1024, _clusters) == Plan("narrow", 8, True)


gpu = pytest.mark.gpu


def _router_weight(K: int, N: int):
    return router_weight(K, N, seed=K + 3 * N)


# (path, splits, M): the small-M kernels at each split they serve, and one case of every wgmma
# family (cluster split, workspace split, multicast) so the policy is exercised in each copy.
CASES = [("gemvr", 1, 1), ("gemvr", 2, 1), ("gemvr", 4, 1), ("gemvrw2", 1, 1), ("gemvrw2", 2, 1),
         ("gemv", 1, 1), ("gemv", 2, 5),
         ("fp32", 1, 1), ("fp32", 2, 1), ("fp32", 8, 1), ("fp32", 2, 7), ("fp32", 4, 64),
         ("narrow", 1, 16), ("narrow", 8, 16), ("narrow", 8, 64), ("narrow", 4, 100),
         ("wide96", 2, 300), ("widers", 1, 200), ("wide96_wsp", 4, 256), ("wide96_ws", 2, 129),
         ("wide96_wspm", 2, 300), ("wide_wsm", 1, 200)]


@gpu
@pytest.mark.parametrize("path,splits,M", CASES)
@pytest.mark.parametrize("K,N", [(4096, 192), (6144, 768), (3072, 384), (1024, 320)])
def test_evict_first_same_bits(path, splits, M, K, N):
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=M + K + splits)
    plain = Plan(path, splits)
    if plain.path in heuristics.GEMV_PATHS and not heuristics.gemv_fits(M, K, splits, path):
        pytest.skip(f"{path} S={splits} does not serve M={M} K={K}")
    base = launch_poisoned(x, rw, plain)
    ef = launch_poisoned(x, rw, dataclasses.replace(plain, evict_first=True))
    tag = f"{path} S={splits} M={M} K={K} N={N}"
    assert_bitwise_equal(ef, base, name=f"{tag} evict_first vs plain")
    check_against_fp64(ef, x, rw.weight, strict_top8=False, tag=tag)


@gpu
@pytest.mark.parametrize("path,splits,M", [("gemvr", 1, 1), ("fp32", 2, 1), ("fp32", 2, 8), ("narrow", 8, 64)])
def test_evict_first_graph_replay_and_table_plan(path, splits, M):
    import hpc_common
    from hpc_router_gemm import router_gemm

    K, N = 6144, 768
    rw = _router_weight(K, N)
    x, _ = make_inputs(M, K, N, seed=5 + M)
    plan = Plan(path, splits, evict_first=True)
    first = launch_poisoned(x, rw, Plan(path, splits))
    assert_graph_replays(x, rw, plan, first, name=f"{path} S={splits} M={M} evict_first graph replay")
    for pdl in (False, True):
        with hpc_common.pdl_enabled(pdl):
            assert_bitwise_equal(launch_poisoned(x, rw, plan), first, name=f"{path} S={splits} M={M} pdl={pdl}")
    # The public op, whatever the table chooses at this M (with or without the policy), gives
    # the bits of that plan without the policy.
    from hpc_router_gemm import plan_for

    chosen = plan_for(M, N, K, x.device)
    assert_bitwise_equal(router_gemm(x, rw), launch_poisoned(x, rw, dataclasses.replace(chosen, evict_first=False)),
                         name=f"router_gemm M={M} (plan {chosen.name})")
