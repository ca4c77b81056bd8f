"""Decode attention on hypothesis-drawn batches (GPU): lengths 1 to 128K, skewed and uniform,
every GQA group, both KV dtypes, pages in random order, dynamic and static plans, small and
full grids. Draws shapes and seeds, never tensor contents."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import hpc_attention as ha
from hpc_common.testing import poisoned_empty

from ._cases import FP8, check_accuracy, make_case

pytestmark = pytest.mark.gpu

TOKEN_BUDGET = 700_000  # sum of length x KV heads per example, keeps the float64 reference quick


@st.composite
def batches(draw):
    shape = draw(st.sampled_from(["uniform", "skewed", "tiny", "awkward"]))
    B = draw(st.integers(1, 48))
    if shape == "uniform":
        L = draw(st.integers(1, 8192))
        lens = [L] * B
    elif shape == "skewed":
        lens = [draw(st.integers(32_768, 131_072))] + [draw(st.integers(1, 4096)) for _ in range(B - 1)]
    elif shape == "tiny":
        lens = [draw(st.integers(0, 130)) for _ in range(B)]
    else:
        lens = [draw(st.sampled_from([1, 63, 64, 65, 127, 128, 129, 799, 1023, 4095, 4097])) for _ in range(B)]
    hkv = draw(st.sampled_from([1, 2, 4, 8]))
    while sum(lens) * hkv > TOKEN_BUDGET and hkv > 1:
        hkv //= 2
    if sum(lens) * hkv > TOKEN_BUDGET:
        lens = lens[: max(1, len(lens) // 2)]
        lens = [min(x, TOKEN_BUDGET // len(lens)) for x in lens]
    return lens, hkv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=batches(), group=st.sampled_from([1, 2, 4, 8, 16]), fp8=st.booleans(),
       seed=st.integers(0, 2**31 - 1), mode=st.sampled_from(["dynamic", "dynamic", "static"]),
       num_ctas=st.sampled_from([None, None, 5, 64]), tma=st.booleans())
@example(batch=([131072] + [4096] * 31, 1), group=8, fp8=True, seed=1, mode="dynamic", num_ctas=None, tma=True)
@example(batch=([512] * 64, 1), group=8, fp8=False, seed=2, mode="dynamic", num_ctas=None, tma=True)
@example(batch=([1], 8), group=16, fp8=False, seed=3, mode="static", num_ctas=None, tma=False)
def test_decode_matches_float64(batch, group, fp8, seed, mode, num_ctas, tma):
    lens, hkv = batch
    case = make_case(lens, hkv, group, FP8 if fp8 else torch.bfloat16, seed=seed)
    B, Hq = case.q.shape[:2]
    static = "auto" if mode == "static" else None
    ws = ha.DecodeWorkspace(B, hkv, Hq, case.max_kv_len, num_ctas=num_ctas, static_splits=static)
    plan = ha.plan_decode(case.kv_lens, hkv, Hq, workspace=ws, static_splits=static,
                          options=ha.DecodeOptions(producer="tma" if tma else "cp_async"))
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
              k_scale=case.k_scale, v_scale=case.v_scale, out=out)
    check_accuracy(out, case, f"{mode} decode (seed={seed}, num_ctas={num_ctas}, tma={tma})")
