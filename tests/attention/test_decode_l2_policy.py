"""The KV loads' L2 policy (GPU): the diagnostic normal policy (PagedDecodeParams::diag bit 6, the benchmarks'
`diag_kv_l2_normal` rows) changes where the KV lines sit in the L2, never a result: both producers, both KV dtypes,
split, whole and empty items give the default call's bits, which match the float64 reference."""

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

NORMAL_L2_POLICY = 64  # DIAG flags bit 6


@pytest.mark.parametrize("tma", [True, False], ids=["tma", "cp_async"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_normal_l2_policy_gives_the_same_bits(kv_dtype, tma, monkeypatch):
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", tma)
    case = make_case([9000, 700, 1, 0, 4096, 129], 2, 4, kv_dtype, seed=5 + tma)  # split, whole and empty items
    plain, plan = run(case)
    monkeypatch.setitem(dec.DIAG, "flags", NORMAL_L2_POLICY)
    B, Hq = case.q.shape[:2]
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
              k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, out=out)
    assert dec.LAST_PRODUCER["name"] == ("tma" if tma else "cp_async")
    torch.cuda.synchronize()
    assert_bitwise_equal(out, plain, name=f"normal L2 policy vs evict_first [{case.describe()}]")
    check_counters_zero(plan.workspace)
    check_accuracy(plain, case, "evict_first")
