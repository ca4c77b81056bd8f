"""The KV loads' L2 policy (PagedDecodeParams::kv_l2_normal_tiles; GPU): evict_first or the normal policy changes
where the KV lines sit in the L2, never a result. Both producers, both KV dtypes, split and whole items, and a
threshold between the call's tiles and one tile more (the kernel compares the plan's total tiles with it): every
setting gives the plain call's bits, which match the float64 reference."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import heuristics
from hpc_attention import paged_decode as dec
from hpc_common.testing import assert_bitwise_equal, poisoned_empty

from ._cases import FP8, check_accuracy, make_case
from .test_decode import check_counters_zero, run

pytestmark = pytest.mark.gpu

INT_MAX = 2**31 - 1


def decode_with_threshold(case, plan, tiles, monkeypatch):
    monkeypatch.setitem(dec.DIAG, "kv_l2_normal_tiles", tiles)
    B, Hq = case.q.shape[:2]
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
              k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, out=out)
    return out


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cp_async"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_l2_policy_never_changes_the_result(kv_dtype, tma, monkeypatch):
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", tma)
    lens = [9000, 700, 1, 0, 4096, 129]  # a split item, whole items, an empty one
    case = make_case(lens, 2, 4, kv_dtype, seed=5 + tma)
    total_tiles = 2 * sum((n + 63) // 64 for n in lens)  # the plan's counters[kTotalTiles]: every item's tiles
    plain, plan = run(case)  # the heuristic's threshold (far above this call: evict_first)
    assert int(plan.workspace.counters[3]) == total_tiles
    outs = {tiles: decode_with_threshold(case, plan, tiles, monkeypatch)
            for tiles in (0, total_tiles, total_tiles + 1, INT_MAX)}  # normal, normal, evict_first, evict_first
    torch.cuda.synchronize()
    for tiles, out in outs.items():
        assert_bitwise_equal(out, plain, name=f"kv_l2_normal_tiles={tiles} vs the default [{case.describe()}]")
    check_counters_zero(plan.workspace)
    check_accuracy(plain, case, "default L2 policy")
