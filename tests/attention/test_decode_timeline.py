"""The decode kernel's per-CTA timeline diagnostics (GPU): with paged_decode.DIAG["timeline"] set
the outputs keep their bits, the stamps are ordered within each CTA, and the merges counted add
up to the plan's split items; on both producers and all three merge paths."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import heuristics
from hpc_attention import paged_decode as dec
from hpc_common.testing import assert_bitwise_equal

from ._cases import FP8, make_case
from .test_decode import check_counters_zero, run

pytestmark = pytest.mark.gpu

SLOTS = dec.TIMELINE_SLOTS
ENTRY, PDL, BIN, ISSUE, DATA, LAST, CEND, HEND, MERGE_NS, COUNTS, PEND, SMID, HCOUNTS = range(13)
PROD_START, PROD_TABLES, PROD_EMPTY = 16, 17, 18  # TMA producer only
END_MERGED, END_STORED, END_HANDED, END_RING = 19, 20, 21, 22  # the last task's end steps
END_ROW_SCALARS = 23  # the fold's row scalars done (decode_task_fold.cuh)
M_DESC, M_ARRIVED, M_LOADED, M_STORED, M_ARRIVED2, M_END, M_PARTS, M_NEED, M_L2_MERGED = range(24, 33)  # helpers' last merge
PEEKS = 33  # consumer thread 0: split arrivals the arrival peek skipped


@pytest.mark.parametrize("merge", ["combine", "consumers", "helpers"])
@pytest.mark.parametrize("tma", [False, True], ids=["cp_async", "tma"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_timeline_keeps_bits_and_adds_up(kv_dtype, tma, merge, monkeypatch):
    monkeypatch.setattr(heuristics, "USE_TMA_PRODUCER", tma)
    monkeypatch.setattr(heuristics, "MERGE_IN_DECODE", merge != "combine")
    monkeypatch.setattr(heuristics, "MERGE_ON_HELPER_WARPS", merge == "helpers")
    case = make_case([40_000, 64, 5000, 0, 700], 1, 8, kv_dtype, seed=3)  # two-level merge, empty item
    ref, _ = run(case)
    num_ctas = 16
    tl = torch.zeros(num_ctas * SLOTS, dtype=torch.int64, device="cuda")
    monkeypatch.setitem(dec.DIAG, "timeline", tl)
    out, plan = run(case, num_ctas=num_ctas)
    torch.cuda.synchronize()
    monkeypatch.setitem(dec.DIAG, "timeline", None)
    check_counters_zero(plan.workspace)
    base, _ = run(case, num_ctas=num_ctas)
    assert_bitwise_equal(out, base, name="timeline on vs off")
    tables = plan.tables()
    a = tl.view(num_ctas, SLOTS).cpu().tolist()
    merges = 0
    for c, r in enumerate(a):
        t_b, t_e = tables.bin_start[c], tables.bin_start[c + 1]
        mine = tables.tasks[t_b:t_e]
        n_tiles = sum((t[2] + 63) // 64 - t[1] for t in mine)
        assert r[ENTRY] > 0 and r[ENTRY] <= r[PDL] <= r[BIN], (c, r)
        assert r[CEND] >= r[BIN] and r[PEND] >= r[BIN], (c, r)
        if n_tiles:
            assert r[BIN] <= r[ISSUE] <= r[DATA] <= r[LAST] <= r[CEND], (c, r)
            if tma:
                assert r[PDL] <= r[PROD_START] <= r[PROD_TABLES] <= r[PROD_EMPTY] <= r[ISSUE], (c, r)
            assert r[LAST] <= r[END_MERGED] <= r[END_ROW_SCALARS] <= r[END_STORED] <= r[END_HANDED] <= r[END_RING]
            assert r[END_RING] <= r[CEND], (c, r)
        merges += r[COUNTS] + r[HCOUNTS]
        if merge == "helpers" and tma:
            assert r[HEND] >= r[BIN], (c, r)
            if r[HCOUNTS]:  # the last merge that merged, by step
                assert r[BIN] <= r[M_DESC] <= r[M_ARRIVED] <= r[M_LOADED] <= r[M_STORED] <= r[M_END] <= r[HEND], (c, r)
                assert r[M_ARRIVED2] == 0 or r[M_STORED] <= r[M_ARRIVED2] <= r[M_L2_MERGED] <= r[M_END], (c, r)
                assert r[M_PARTS] > 1 and 1 <= r[M_NEED] <= r[M_PARTS], (c, r)
            else:
                assert r[M_DESC] == 0 and r[M_END] == 0, (c, r)
    if merge != "combine":
        # Every split item is merged once at one level, or 8 groups + 1 at two levels (> 24 parts).
        parts = [e[2] for e in tables.combine if e[2] > 1]
        assert merges == sum(1 if p <= 24 else 9 for p in parts), (merges, parts)
        # The arrival peek only skips arrivals of the consumers' merges (it counts the split tasks it decided).
        peeks = sum(r[PEEKS] for r in a)
        assert 0 <= peeks <= sum(r[COUNTS] for r in a), peeks


# The planner's per-warp step stamps (decode_plan_timeline.cuh): slots of each warp's 16.
PLAN_SLOTS, PLAN_WARPS = 16, 16
P_ENTRY, P_PDL, P_LENS, P_SCAN1, P_SCAN2, P_WRITTEN, P_FENCED = range(7)


@pytest.mark.parametrize("hkv", [1, 8])
def test_plan_timeline_keeps_tables_and_orders_steps(hkv, monkeypatch):
    """With DIAG["plan_timeline"] set the planner (diagnostics build) writes the same tables as the
    library build, and each warp of CTA 0 stamps its steps in order. Batch 256 at 64/8 takes the
    aligned plan on a grid of CTAs; 8/1 the row plan (decode_plan_rows.cuh) on one."""
    kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
    kv_lens[::7] = 100
    ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)
    base = ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False).tables()
    for t in (ws.tasks, ws.bin_start, ws.bin_first, ws.combine, ws.counters, ws.slot_meta):
        t.fill_(-7)  # poison: the diag build must rewrite every entry the library build wrote
    tl = torch.zeros(16 * PLAN_WARPS * PLAN_SLOTS, dtype=torch.int64, device="cuda")
    monkeypatch.setitem(dec.DIAG, "plan_timeline", tl)
    plan = ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)
    torch.cuda.synchronize()
    monkeypatch.setitem(dec.DIAG, "plan_timeline", None)
    got = plan.tables()
    used = base.counters[5]  # bins used: bin_first is written for those only
    assert used > 0 and got.bin_first[:used] == base.bin_first[:used]
    for name in ("tasks", "bin_start", "combine", "counters", "slot_meta"):
        assert getattr(got, name) == getattr(base, name), name
    # CTA 0's warps that planned requests (the row plan at 8/1 leaves warps past the batch's 8 rows idle)
    rows = [r for r in tl.view(-1, PLAN_SLOTS).cpu().tolist()[:PLAN_WARPS] if r[P_LENS]]
    assert len(rows) >= 8
    for w, r in enumerate(rows):
        steps = [r[s] for s in (P_ENTRY, P_PDL, P_LENS, P_SCAN1, P_SCAN2, P_WRITTEN, P_FENCED)]
        assert all(s > 0 for s in steps), (w, r)
        assert steps == sorted(steps), (w, r)
