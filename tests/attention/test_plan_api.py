"""plan_decode's scheduling arguments on the CPU (runs in CI): the per-item task cost, the work floor and the
bin-first-task table reach the planner binding, and bad values name the argument."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions, heuristics

from .test_decode_api import fake  # noqa: F401  (the stand-in extension fixture)

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize("kv_dtype, want", [(None, heuristics.TASK_COST_TILES_BF16),
                                            (torch.bfloat16, heuristics.TASK_COST_TILES_BF16),
                                            (FP8, heuristics.TASK_COST_TILES_FP8)])
def test_task_cost_follows_the_kv_dtype(fake, kv_dtype, want):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, kv_dtype=kv_dtype)
    kw = fake.calls[0][1]
    assert kw["task_cost"] == want and plan.task_cost == want
    nbins = 132 + heuristics.MAX_TAIL_BINS_PER_CTA * 132  # owned + claimable tail bins
    assert kw["bin_first"] == ws.bin_first.data_ptr() and ws.bin_first.shape == (nbins, 4)
    assert ws.bin_start.shape == (nbins + 1,) and kw["max_tail_bins"] == ws.max_tail_bins == nbins - 132


@pytest.mark.parametrize("batch, kv_dtype, want", [(3, None, heuristics.MIN_TILES_PER_CTA),
                                                   (16, torch.bfloat16, heuristics.MIN_TILES_PER_CTA),
                                                   (17, None, heuristics.MIN_TILES_PER_CTA_MANY),
                                                   (40, torch.bfloat16, heuristics.MIN_TILES_PER_CTA_MANY),
                                                   (3, FP8, heuristics.MIN_TILES_PER_CTA),  # few items
                                                   (16, FP8, heuristics.MIN_TILES_PER_CTA),  # 32 items < 132 / 4
                                                   (17, FP8, heuristics.MIN_TILES_PER_CTA_MANY),  # 34 items
                                                   (40, FP8, heuristics.MIN_TILES_PER_CTA_MANY)])
def test_work_floor_follows_the_kv_dtype_and_item_count(fake, batch, kv_dtype, want):  # noqa: F811
    lens = torch.full((batch,), 300, dtype=torch.int32)
    ws = ha.DecodeWorkspace(batch, 2, 8, 512, "cpu")  # 2 KV heads: 2 * batch items on 132 CTAs
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, kv_dtype=kv_dtype)
    assert fake.calls[-1][1]["min_tiles"] == want and plan.min_tiles == want
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, kv_dtype=kv_dtype,
                          options=DecodeOptions(min_tiles=3))  # an explicit floor wins
    assert fake.calls[-1][1]["min_tiles"] == 3 and plan.min_tiles == 3


def test_tail_arguments_reach_the_planner(fake):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", max_tail_bins=7)
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    kw = fake.calls[-1][1]
    assert kw["tail_percent"] == heuristics.TAIL_PERCENT == plan.tail_percent
    assert kw["tail_bin"] == heuristics.TAIL_BIN_TILES and kw["max_tail_bins"] == 7
    assert ws.bin_start.shape == (132 + 7 + 1,) and ws.claim_counter.shape == (1,) and not ws.claim_counter.any()
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(tail_percent=0, tail_bin=9))
    assert fake.calls[-1][1]["tail_percent"] == 0 and fake.calls[-1][1]["tail_bin"] == 9 and plan.tail_percent == 0
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto")
    assert plan.tail_percent == 0 and fake.calls[-1][1]["tail_percent"] == 0  # static plans have no tail


def test_task_cost_override_and_static_plans(fake):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    assert ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(task_cost=0)).task_cost == 0
    assert fake.calls[-1][1]["task_cost"] == 0
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto")
    assert plan.task_cost == 0  # static plans do not use it


def test_cost_cap_reaches_the_planner(fake):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)
    assert fake.calls[-1][1]["cost_cap"] == int(heuristics.TASK_COST_CAP) and plan.cost_cap is heuristics.TASK_COST_CAP
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(cost_cap=False))
    assert fake.calls[-1][1]["cost_cap"] == 0 and plan.cost_cap is False
    assert ha.plan_decode(lens, 2, 8, workspace=ws, options=DecodeOptions(cost_cap=True)).cost_cap is True
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto", options=DecodeOptions(cost_cap=True))
    assert plan.cost_cap is False and fake.calls[-1][1]["cost_cap"] == 0  # static plans charge nothing


def test_bad_scheduling_arguments_name_the_argument(fake):  # noqa: F811
    lens = torch.tensor([5, 9], dtype=torch.int32)
    ws = ha.DecodeWorkspace(2, 1, 8, 64, "cpu")
    with pytest.raises(ValueError, match="kv_dtype"):
        ha.plan_decode(lens, 1, 8, workspace=ws, kv_dtype=torch.float16)
    with pytest.raises(ValueError, match="task_cost"):
        ha.plan_decode(lens, 1, 8, workspace=ws, options=DecodeOptions(task_cost=-1))
    with pytest.raises(ValueError, match="task_cost"):
        ha.plan_decode(lens, 1, 8, workspace=ws, options=DecodeOptions(task_cost=heuristics.MAX_TASK_COST + 1))
    with pytest.raises(ValueError, match="tail_percent"):
        ha.plan_decode(lens, 1, 8, workspace=ws, options=DecodeOptions(tail_percent=heuristics.MAX_TAIL_PERCENT + 1))
    with pytest.raises(ValueError, match="tail_bin"):
        ha.plan_decode(lens, 1, 8, workspace=ws, options=DecodeOptions(tail_bin=0))
    with pytest.raises(ValueError, match="max_tail_bins"):
        ha.DecodeWorkspace(2, 1, 8, 64, "cpu", max_tail_bins=-1)


def test_first_page_ids_reach_the_planner_and_the_decode(fake):  # noqa: F811
    """A plan given the page table writes each bin's first page id, and `decode` hands it to the kernel only for
    that same table with pages of >= 64 tokens; DecodeOptions(first_page_from_plan=False) writes none."""
    from .test_decode_api import inputs

    q, k, v, pt, lens = inputs(page=64)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, page_table=pt, page_size=64)
    kw = fake.calls[-1][1]
    assert kw["page_table"] == pt.data_ptr() and kw["page_size_log2"] == 6
    assert kw["bin_first_page"] == ws.bin_first_page.data_ptr() and kw["page_table_stride"] == pt.stride(0)
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[-1][1]["bin_first_page"] == ws.bin_first_page.data_ptr()
    ha.decode(q, k, v, pt.clone(), lens, plan)  # another table: read it
    assert fake.calls[-1][1]["bin_first_page"] == 0
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, page_table=pt, page_size=64,
                          options=DecodeOptions(first_page_from_plan=False))
    assert fake.calls[-1][1]["page_table"] == 0 and plan.first_page_of is None
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[-1][1]["bin_first_page"] == 0
    plan = ha.plan_decode(lens, 2, 8, workspace=ws)  # no table: nothing written, nothing used
    assert fake.calls[-1][1]["page_table"] == 0
    ha.decode(q, k, v, pt, lens, plan)
    assert fake.calls[-1][1]["bin_first_page"] == 0
    q, k, v, pt, lens = inputs(page=32, pages=40)
    pt = torch.zeros(3, 8, dtype=torch.int32)
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, page_table=pt, page_size=32)
    ha.decode(q, k, v, pt, lens, plan)  # pages of 32 tokens: a tile spans two pages
    assert fake.calls[-1][1]["bin_first_page"] == 0
    with pytest.raises(ValueError, match="page_size"):
        ha.plan_decode(lens, 2, 8, workspace=ws, page_table=pt)
    with pytest.raises(ValueError, match="does not cover"):
        ha.plan_decode(lens, 2, 8, workspace=ws, page_table=pt[:, :2], page_size=32)


def test_resolve_is_a_pure_function_of_the_shape():
    """heuristics.resolve: the same arguments give the same policy; options win where given; the choices that do not
    apply to a plan's kind are off (static plans: no task cost, tail, cap or head-major line; head-major needs Hkv > 1
    and no tail)."""
    r = heuristics.resolve
    assert r(None, 64, 8, 132, 0, FP8) == r(None, 64, 8, 132, 0, FP8)
    dyn = r(None, 64, 8, 132, 0, FP8)
    assert dyn.task_cost == heuristics.TASK_COST_TILES_FP8 and dyn.head_major and dyn.min_tiles == 8
    assert r(None, 3, 1, 132, 0, None).min_tiles == heuristics.MIN_TILES_PER_CTA
    static = r(DecodeOptions(task_cost=5, tail_percent=20, cost_cap=True), 64, 8, 132, 22, FP8)
    assert (static.task_cost, static.tail_percent, static.cost_cap, static.head_major) == (0, 0, False, False)
    assert not r(DecodeOptions(tail_percent=20), 64, 8, 132, 0, None).head_major
    assert not r(None, 64, 1, 132, 0, None).head_major
    got = r(DecodeOptions(min_tiles=2, producer="cp_async", merge="combine"), 64, 8, 132, 0, None)
    assert (got.min_tiles, got.producer, got.merge) == (2, "cp_async", "combine")
