"""The decode kernel's prologue and split-item arrival (GPU): the first task taken from the
planner's bin_first copy, and the release/acquire arrival through one thread, give the same bits
as version 4's first-task load and per-thread SC fences (benchmark diag bits 4 and 8), on both
producers, for one-level and two-level merges, dynamic and static plans; and match the float64
reference."""

from __future__ import annotations

import pytest
import torch

from hpc_attention import heuristics
from hpc_attention import paged_decode as dec
from hpc_common.testing import assert_bitwise_equal

from ._cases import FP8, check_accuracy, make_case
from .test_decode import check_counters_zero, run

pytestmark = pytest.mark.gpu

CASES = {
    "one_level": ([700, 3000, 1, 0, 129], 2, 4),  # split items of 2-16 parts
    "two_level": ([40_000, 64, 5000], 1, 8),  # a long item over > 16 CTAs (two-level merge)
}


@pytest.mark.parametrize("tma", [False, True], ids=["cp_async", "tma"])
@pytest.mark.parametrize("static_splits", [None, 5], ids=["dynamic", "static5"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_prologue_and_arrival_match_version_4(name, kv_dtype, static_splits, tma, monkeypatch):
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", tma)
    monkeypatch.setattr(heuristics, "MERGE_IN_DECODE", True)
    lens, hkv, group = CASES[name]
    case = make_case(lens, hkv, group, kv_dtype, seed=len(name))
    outs = {}
    for flags in (0, 4, 8, 12):
        monkeypatch.setitem(dec.DIAG, "flags", flags)
        out, plan = run(case, static_splits=static_splits)
        torch.cuda.synchronize()
        check_counters_zero(plan.workspace)
        outs[flags] = out
    monkeypatch.setitem(dec.DIAG, "flags", 0)
    check_accuracy(outs[0], case, f"{name} {kv_dtype} static={static_splits} tma={tma}")
    for flags in (4, 8, 12):
        assert_bitwise_equal(outs[flags], outs[0], name=f"diag flags {flags} vs default")


@pytest.mark.parametrize("tma", [False, True], ids=["cp_async", "tma"])
@pytest.mark.parametrize("page", [16, 64, 128])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_first_page_from_the_plan_same_bits(name, kv_dtype, page, tma, monkeypatch):
    """A plan given the page table hands each bin's first page id to the decode kernel (pages of
    >= 64 tokens): same bits as reading the table, and the reference. The workspace's entries are
    set to page 0 first, so a stale entry of an empty bin (most bins here are) would read a wrong,
    NaN-poisoned page."""
    import hpc_attention as ha

    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", tma)
    lens, hkv, group = CASES[name]
    case = make_case(lens, hkv, group, kv_dtype, page_size=page, seed=page + len(name))
    base, _ = run(case)
    B, Hq = case.q.shape[:2]
    ws = ha.DecodeWorkspace(B, hkv, Hq, case.max_kv_len)
    ws.bin_first_page.fill_(0)
    plan = ha.plan_decode(case.kv_lens, hkv, Hq, workspace=ws, page_table=case.page_table, page_size=page)
    out = ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
                    k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale)
    assert dec.LAST_PRODUCER["first_page"] == (page >= 64)
    torch.cuda.synchronize()
    check_counters_zero(ws)
    check_accuracy(out, case, f"{name} {kv_dtype} page={page} tma={tma} first page from the plan")
    assert_bitwise_equal(out, base, name="first page from the plan vs from the table")
