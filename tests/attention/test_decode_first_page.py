"""Each bin's first page id taken from the plan (GPU): a plan given the page table hands the decode kernel the
page id of every bin's first tile (pages of >= 64 tokens), which gives the same bits as reading the table, on both
producers, for one-level and two-level merges, and matches the float64 reference."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions
from hpc_common.testing import assert_bitwise_equal

from ._cases import FP8, check_accuracy, make_case
from .test_decode import check_counters_zero, run

pytestmark = pytest.mark.gpu

CASES = {
    "one_level": ([700, 3000, 1, 0, 129], 2, 4),  # split items of 2-16 parts
    "two_level": ([40_000, 64, 5000], 1, 8),  # a long item over > 24 CTAs (two-level merge)
}


@pytest.mark.parametrize("producer", ["cp_async", "tma"])
@pytest.mark.parametrize("page", [16, 64, 128])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_first_page_from_the_plan_same_bits(name, kv_dtype, page, producer):
    """The workspace's entries are set to page 0 first, so a stale entry of an empty bin (most bins here are)
    would read a wrong, NaN-poisoned page."""
    lens, hkv, group = CASES[name]
    case = make_case(lens, hkv, group, kv_dtype, page_size=page, seed=page + len(name))
    base, _ = run(case, producer=producer)
    B, Hq = case.q.shape[:2]
    ws = ha.DecodeWorkspace(B, hkv, Hq, case.max_kv_len)
    ws.bin_first_page.fill_(0)
    for from_plan in (True, False):
        plan = ha.plan_decode(case.kv_lens, hkv, Hq, workspace=ws, page_table=case.page_table, page_size=page,
                              options=DecodeOptions(producer=producer, first_page_from_plan=from_plan))
        assert (plan.first_page_of is not None) == from_plan
        out = ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
                        k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale)
        torch.cuda.synchronize()
        check_counters_zero(ws)
        check_accuracy(out, case, f"{name} {kv_dtype} page={page} {producer} first page from the plan {from_plan}")
        assert_bitwise_equal(out, base, name=f"first page from the plan ({from_plan}) vs from the table")
