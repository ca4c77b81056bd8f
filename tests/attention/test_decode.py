"""Decode attention on the GPU: accuracy against float64, the plan twin, determinism,
CUDA-graph replay with new lengths, PDL on/off, poisoned outputs and pages, bad input."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions
from hpc_attention.planner import first_pages, plan_tables
from hpc_common import pdl_enabled
from hpc_common.testing import assert_bitwise_equal, error_stats, poisoned_empty

from ._cases import FP8, check_accuracy, make_case, reference

pytestmark = pytest.mark.gpu

AWKWARD = [1, 63, 64, 65, 799, 1023, 4097, 0, 239]

# The merge path and producer the `merge_mode` / `producer` fixtures chose for the running test (None: the
# plan's default); `opts` and `run` put them into every plan's DecodeOptions.
CHOSEN: dict[str, str | None] = {"merge": None, "producer": None}


@pytest.fixture(params=["helpers", "consumers", "combine"], ids=["merge_on_helpers", "merge_in_decode", "combine_kernel"])
def merge_mode(request, monkeypatch):
    """Runs a test on each split-merge path: in the decode kernel by the TMA kernel's helper warps
    (the cp.async kernel then merges on its consumers), in the decode kernel by the consumer warps,
    or by the combine kernel (DecodeOptions.merge)."""
    monkeypatch.setitem(CHOSEN, "merge", request.param)
    return request.param


@pytest.fixture(params=["cp_async", "tma"])
def producer(request, monkeypatch):
    """Runs a test with each producer of the decode kernel (DecodeOptions.producer)."""
    monkeypatch.setitem(CHOSEN, "producer", request.param)
    return request.param


def opts(**kw) -> DecodeOptions:
    """DecodeOptions with the fixtures' merge path and producer, and the test's own knobs."""
    return DecodeOptions(**{"merge": CHOSEN["merge"], "producer": CHOSEN["producer"], **kw})


def check_counters_zero(ws):
    assert not ws.merge_counts.any(), "merge counters must be back to zero after every call"
    assert not ws.claim_counter.any(), "the tail-bin claim counter must be back to zero after every call"


def run(case, *, static_splits=None, num_ctas=None, ws=None, out=None, **knobs):
    """Plan and decode `case`; knobs: DecodeOptions fields (min_tiles, task_cost, tail_percent, ...)."""
    B, Hq = case.q.shape[:2]
    Hkv = case.k.shape[2]
    ws = ws or ha.DecodeWorkspace(B, Hkv, Hq, case.max_kv_len, num_ctas=num_ctas, static_splits=static_splits)
    plan = ha.plan_decode(case.kv_lens, Hkv, Hq, workspace=ws, static_splits=static_splits, options=opts(**knobs))
    if CHOSEN["producer"] is not None:
        assert plan.producer == CHOSEN["producer"]
    out = out if out is not None else poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device=case.q.device)
    out = ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
                    k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, out=out)
    return out, plan


@pytest.mark.parametrize("tail", [0, 20, 50], ids=["tail0", "tail20", "tail50"])
@pytest.mark.parametrize("task_cost", [None, 0, 7], ids=["cost_default", "cost0", "cost7"])
@pytest.mark.parametrize("static_splits", [None, 3])
@pytest.mark.parametrize("num_ctas", [1, 7, 132])
def test_planner_matches_python_twin(num_ctas, static_splits, task_cost, tail):
    gen = torch.Generator().manual_seed(num_ctas)
    for trial in range(13):
        # Trials 6-7: more requests than planner threads (several requests per thread). Trial 8: the
        # benchmark's batch-256 plan at 8 KV heads, head-major: the aligned row plan (decode_plan_rows.cuh,
        # decode_plan_rows_aligned_kernel). Trial 9: 600 virtual requests on a line too short to fill the
        # bins: the aligned kernel's fallback (decode_plan_aligned_kernel -> plan_head_major_unaligned)
        # wherever 132 bins are cut. Trial 10: the same for the aligned row plan (100 requests x 8 heads).
        # Trials 11-12: equal short requests whose tiles fill the tiles-only budget at a work floor of 8, where
        # the capped charge binds (ItemCharge; the row plan at one head, the aligned row plan at 8). Trials 5
        # and 7 plan without the cap.
        B = (int(torch.randint(1, 300, (1,), generator=gen)) if trial < 6
             else {6: 1106, 7: 1107, 8: 256, 9: 300, 10: 100, 11: 64, 12: 128}[trial])
        kind = trial % 3
        if trial == 8:
            lens = torch.full((B,), 4096)
            lens[::7] = 100
        elif trial in (9, 10):
            lens = torch.zeros(B, dtype=torch.int64)
            lens[-10:] = 64
        elif trial in (11, 12):
            lens = torch.full((B,), 512)
        elif kind == 0:
            lens = torch.randint(0, 300, (B,), generator=gen)
        elif kind == 1:
            lens = torch.randint(0, 140_000, (B,), generator=gen)
        else:
            lens = torch.full((B,), 20)
            lens[0] = 130_000
        hkv = {9: 2, 10: 8, 11: 1, 12: 8}.get(trial, [1, 2, 8][trial % 3])
        kv_lens = lens.int().cuda()
        ws = ha.DecodeWorkspace(B, hkv, hkv * 4, 140_000, num_ctas=num_ctas, static_splits=static_splits)
        # Odd trials also give a page table (random ids, negatives included: the planner copies them raw).
        page = [16, 64, 128][trial % 3]
        pt = torch.randint(-5, 1 << 20, (B, -(-140_000 // page)), dtype=torch.int32, device="cuda",
                           generator=torch.Generator(device="cuda").manual_seed(trial))
        pt_kw = dict(page_table=pt, page_size=page) if trial % 2 or trial in (8, 10) else {}
        # Trials 0-3, 8 and 9 take the default line order (head-major from 2 KV heads), 4-7 the request-major one.
        default_order = trial < 4 or trial >= 8
        # Trial 3: the head-major line cut into all bins (DecodeOptions.cut_to_heads off).
        options = DecodeOptions(task_cost=task_cost, tail_percent=tail, tail_bin=1 + trial % 5,
                                head_major=None if default_order else False, min_tiles=8 if trial >= 11 else None,
                                cost_cap=trial not in (5, 7), cut_to_heads=trial != 3)
        plan = ha.plan_decode(kv_lens, hkv, hkv * 4, workspace=ws, static_splits=static_splits, options=options,
                              **pt_kw)
        assert plan.cost_cap == (trial not in (5, 7) and not static_splits), trial
        assert plan.cut_to_heads == (trial != 3), trial
        assert plan.head_major == (default_order and hkv > 1 and not static_splits and tail == 0), trial
        got = plan.tables()
        want = plan_tables(lens.tolist(), hkv, num_ctas, plan.min_tiles, static_splits=static_splits or 0,
                           max_len=140_000, task_cost=plan.task_cost, tail_percent=plan.tail_percent,
                           tail_bin=plan.tail_bin, max_tail_bins=ws.max_tail_bins, head_major=plan.head_major,
                           cut_to_heads=plan.cut_to_heads, cost_cap=plan.cost_cap)
        assert got.counters == want.counters, (trial, got.counters, want.counters)
        assert got.bin_start == want.bin_start, trial
        assert got.tasks == want.tasks, trial
        assert got.combine == want.combine, trial
        assert got.slot_meta == want.slot_meta, trial
        # The copy of each non-empty bin's first task that the decode kernel loads at its start.
        for c in range(num_ctas + ws.max_tail_bins):
            if want.bin_start[c] < want.bin_start[c + 1]:
                assert got.bin_first[c] == want.tasks[want.bin_start[c]], (trial, c)
        if pt_kw:  # the page id of each non-empty bin's first tile
            pages = first_pages(want, pt.cpu(), page, hkv)
            dev_pages = ws.bin_first_page.tolist()
            for c, pg in enumerate(pages):
                assert pg is None or dev_pages[c] == pg, (trial, c, dev_pages[c], pg)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("group", [1, 2, 4, 8, 16])
def test_matches_reference(group, kv_dtype, merge_mode, producer):
    case = make_case(AWKWARD, 2, group, kv_dtype, seed=group)
    out, _ = run(case)
    check_accuracy(out, case)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("num_ctas", [1, 3, 17, 400])
def test_any_cta_count(num_ctas, kv_dtype, merge_mode, producer):
    """Small grids split long items over few CTAs; more CTAs than SMs still completes (the
    in-kernel merge never waits on another CTA, so it needs no co-residency)."""
    case = make_case([5000, 64, 1, 300, 0, 2500], 1, 8, kv_dtype, seed=num_ctas)
    out, plan = run(case, num_ctas=num_ctas, min_tiles=1)
    check_accuracy(out, case)
    check_counters_zero(plan.workspace)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("splits", [1, 4, "auto"])
def test_static_split_matches_reference(splits, kv_dtype, merge_mode, producer):
    case = make_case([3000, 1, 65, 0, 700], 2, 4, kv_dtype, seed=7)
    out, plan = run(case, static_splits=splits)
    assert plan.static_splits >= 1
    check_accuracy(out, case, "static decode")
    check_counters_zero(plan.workspace)


@pytest.mark.parametrize("page_size", [8, 16, 32, 128, 256])
def test_other_page_sizes(page_size, producer):
    case = make_case([1, 100, 1000, 4100, 0], 2, 8, torch.bfloat16, page_size=page_size, seed=page_size)
    out, _ = run(case)
    check_accuracy(out, case)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_fp8_q_with_per_token_head_scale(kv_dtype, producer):
    case = make_case([1, 77, 640, 3000], 2, 8, kv_dtype, q_dtype=FP8, seed=11)
    out, _ = run(case)
    check_accuracy(out, case)


def test_fp8_long_context_accuracy(producer):
    """FP8 KV on 128K tokens: relative error <= 0.005 against float32 on the dequantised
    inputs (P V accumulates in FP32 registers, so no drift with length)."""
    case = make_case([128 * 1024, 4096, 17], 1, 8, FP8, seed=5)
    out, _ = run(case)
    ref32 = reference(case, torch.float32)
    err = error_stats(out, ref32)
    assert err["rel_err"] <= 0.005, f"FP8 rel err {err['rel_err']:.4g} (max abs {err['max_abs_err']:.3g})"


def test_kv_scale_as_device_tensor():
    case = make_case([900, 3], 1, 4, FP8, seed=2)
    a, _ = run(case)
    ks = torch.tensor([case.k_scale], device="cuda")
    vs = torch.tensor([case.v_scale], device="cuda")
    ws = ha.DecodeWorkspace(2, 1, 4, case.max_kv_len)
    plan = ha.plan_decode(case.kv_lens, 1, 4, workspace=ws, options=opts())
    b = ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
                  k_scale=ks, v_scale=vs)
    assert_bitwise_equal(b, a)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_bitwise_deterministic(kv_dtype, merge_mode, producer):
    case = make_case([20000, 5, 3000, 64, 900], 2, 8, kv_dtype, seed=3)
    first, plan = run(case)
    ws = plan.workspace
    for _ in range(3):
        again, _ = run(case)
        assert_bitwise_equal(again, first)
        again, _ = run(case, ws=ws)  # the same workspace (counters reused)
        assert_bitwise_equal(again, first)
    check_counters_zero(ws)


# Items split in P parts for P in 2..105: one-level merges (P <= 16, one or two batches of kCombineBatch = 9:
# P = 9 in one; 17-24 in two batches of kWideBatch = 12: P = 20) and two-level ones (P > 24; groups of parts
# g, g + 8, ..., in batches of kGroupBatch = 9: P = 68 gives groups of 8-9 in one batch, P = 80 and 105 groups of
# 10 and 13-14 in two), G = 1, 2, 8, 16. Plans cut on tiles alone (task_cost=0): the per-item cost moves the
# boundaries (e.g. 105 -> 102 parts).
# num_ctas -> parts of the split items of the case below (planner twin): 2 | 8, 2 | 9, 3 | 10 (two
# batches) | 16 (largest one-level) | 20 (two batches of 12) | 54, 14 | 68, 17 | 80, 20 | 105, 27.
MERGE_PARTS = {2: [2], 9: [8, 2], 11: [9, 3], 12: [10, 3], 20: [16, 4], 24: [20, 5], 67: [54, 14], 85: [68, 17],
               100: [80, 20], 132: [105, 27]}


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("num_ctas,group", [(2, 8), (9, 16), (11, 8), (12, 8), (20, 1), (24, 8), (67, 16), (85, 8),
                                            (100, 2), (132, 8)])
def test_merge_in_decode_bitwise_equals_combine_kernel(num_ctas, group, kv_dtype, producer):
    """The in-kernel merge (on the consumers or on the TMA kernel's helper warps) and the combine kernel run the
    same arithmetic (split_merge.cuh) in the same order: identical bits, whichever CTA finishes last."""
    case = make_case([64 * 160, 5, 0, 64 * 40 + 7], 1, group, kv_dtype, seed=num_ctas)
    outs = {}
    for merge in ("combine", "consumers", "helpers", "helpers", "consumers"):
        out, plan = run(case, num_ctas=num_ctas, min_tiles=1, task_cost=0, tail_percent=0, merge=merge)
        check_counters_zero(plan.workspace)
        if merge in outs:
            assert_bitwise_equal(out, outs[merge], name=f"merge {merge}, run to run")
        outs[merge] = out
    parts = [c[2] for c in plan.tables().combine if c[2] > 0]
    assert parts == MERGE_PARTS[num_ctas]
    base = outs["combine"]
    assert_bitwise_equal(outs["consumers"], base, name=f"merge in decode vs combine kernel (parts {parts})")
    assert_bitwise_equal(outs["helpers"], base, name=f"merge on helper warps vs combine kernel (parts {parts})")
    check_accuracy(base, case)


@pytest.mark.parametrize("splits", [4, 40, "auto"])
def test_merge_in_decode_bitwise_equals_combine_kernel_static(splits):
    """Static plans: several split tasks per CTA, items of 4, 40 (two-level) or 'auto' parts."""
    case = make_case([3000, 1, 65, 0, 700, 64 * 45], 2, 4, torch.bfloat16, seed=9)
    outs = {}
    for merge in ("combine", "consumers", "helpers"):
        outs[merge], plan = run(case, static_splits=splits, merge=merge)
        check_counters_zero(plan.workspace)
    assert_bitwise_equal(outs["consumers"], outs["combine"], name=f"static {splits}: in decode vs combine")
    assert_bitwise_equal(outs["helpers"], outs["combine"], name=f"static {splits}: helpers vs combine")


@pytest.mark.parametrize("num_ctas", [16, 132])
def test_split_arrivals_repeated_calls(num_ctas, producer):
    """The split merge's arrivals under many calls on one workspace: short tasks on every CTA (132 CTAs: items of
    2, 12, 27 and 90 parts, one- and two-level; 16 CTAs: up to 11), so parts finish in many orders, some seeing every
    other part arrived before their stores (the arrival peek); each call gives the combine kernel's bits and leaves
    every counter at zero (the last part, arrived or known by its peek, zeroes it)."""
    case = make_case([64 * 130, 64 * 17 + 9, 64 * 3, 1, 64 * 40], 1, 8, torch.bfloat16, seed=num_ctas)
    want, _ = run(case, num_ctas=num_ctas, min_tiles=1, task_cost=0, tail_percent=0, merge="combine")
    check_accuracy(want, case)
    ws = None
    for merge in ("helpers", "consumers", "helpers"):
        for _ in range(10):
            got, plan = run(case, num_ctas=num_ctas, min_tiles=1, task_cost=0, tail_percent=0, ws=ws, merge=merge)
            ws = plan.workspace
            check_counters_zero(ws)
            assert_bitwise_equal(got, want, name=f"arrivals, merge={merge}")


# ---- claimable tail bins (decode_bin_ring.cuh) -------------------------------------------------

TAIL_LENS = [20000, 5, 3000, 64, 900, 0, 4500, 130, 2047]


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("num_ctas,tail,tail_bin", [(1, 50, 1), (7, 20, 4), (132, 20, 4), (132, 50, 1)])
def test_tail_bins_match_reference_deterministic(num_ctas, tail, tail_bin, kv_dtype, merge_mode, producer):
    """Plans with claimable tail bins: accurate, bitwise equal run to run whichever CTA claims
    which bin (TMA kernel) and to the fixed order of the cp.async kernel, claim counter back to
    zero after every call."""
    case = make_case(TAIL_LENS, 2, 8, kv_dtype, seed=num_ctas + tail)
    first, plan = run(case, num_ctas=num_ctas, min_tiles=1, tail_percent=tail, tail_bin=tail_bin)
    assert plan.tables().counters[7] > 0, "the case must have tail bins"
    check_accuracy(first, case)
    ws = plan.workspace
    check_counters_zero(ws)
    for _ in range(3):
        again, _ = run(case, ws=ws, min_tiles=1, tail_percent=tail, tail_bin=tail_bin)
        assert_bitwise_equal(again, first, name="tail bins, run to run")
    check_counters_zero(ws)
    # The same plan without tail bins: same accuracy (different parts, so not the same bits).
    plain, _ = run(case, num_ctas=num_ctas, min_tiles=1, tail_percent=0)
    check_accuracy(plain, case)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_tail_claimed_equals_fixed_order(kv_dtype):
    """Plans with tail bins, run by the TMA kernel (claims) and the cp.async kernel (fixed
    order): identical bits."""
    case = make_case(TAIL_LENS, 1, 8, kv_dtype, seed=21)
    ws = ha.DecodeWorkspace(len(TAIL_LENS), 1, 8, case.max_kv_len, num_ctas=24)
    outs = []
    for producer in ("tma", "cp_async", "tma"):
        options = DecodeOptions(min_tiles=1, tail_percent=40, tail_bin=2, producer=producer)
        plan = ha.plan_decode(case.kv_lens, 1, 8, workspace=ws, options=options)
        assert plan.tables().counters[7] > 0
        outs.append(ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
                              k_scale=case.k_scale, v_scale=case.v_scale))
    assert_bitwise_equal(outs[1], outs[0], name="cp.async fixed order vs TMA claims")
    assert_bitwise_equal(outs[2], outs[0], name="TMA claims, run to run")
    check_counters_zero(ws)


def test_pdl_on_equals_off(merge_mode, producer):
    case = make_case([20000, 5, 3000], 1, 8, torch.bfloat16, seed=4)
    with pdl_enabled(True):
        on, _ = run(case)
    with pdl_enabled(False):
        off, _ = run(case)
    assert_bitwise_equal(on, off)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_cuda_graph_replay_with_new_lengths_equals_eager(kv_dtype, merge_mode, producer):
    lens_a = [4000, 10, 700, 0]
    lens_b = [12, 9000, 0, 3000]
    max_len = 9100
    case = make_case(lens_b, 2, 4, kv_dtype, seed=8, max_kv_len=max_len)  # pages cover both
    B, Hq = case.q.shape[:2]
    ws = ha.DecodeWorkspace(B, 2, Hq, max_len)
    kv_lens = torch.tensor(lens_a, dtype=torch.int32, device="cuda")
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")

    def step():
        plan = ha.plan_decode(kv_lens, 2, Hq, workspace=ws, options=opts())
        ha.decode(case.q, case.k, case.v, case.page_table, kv_lens, plan, sm_scale=case.sm_scale,
                  k_scale=case.k_scale, v_scale=case.v_scale, out=out)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm-up (JIT load) outside capture
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    kv_lens.copy_(torch.tensor(lens_b, dtype=torch.int32))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    eager, _ = run(case)
    assert_bitwise_equal(out, eager, name="graph replay vs eager")
    check_accuracy(out, case, "graph replay")
    # Replays again (the in-kernel merge's counters must have been put back to zero by the
    # previous replay, without any host memset), back to the first lengths and then again B.
    kv_lens.copy_(torch.tensor(lens_a, dtype=torch.int32))
    graph.replay()
    kv_lens.copy_(torch.tensor(lens_b, dtype=torch.int32))
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, eager, name="third graph replay vs eager")
    check_counters_zero(ws)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_cuda_graph_replay_with_tail_bins(kv_dtype, producer):
    """Graph replays of plan + decode with tail bins and new lengths: the claim counter is put
    back to zero by each call's last claim (no host memset), so every replay claims all bins."""
    lens_a = [4000, 10, 700, 0, 2500]
    lens_b = [12, 9000, 0, 3000, 640]
    max_len = 9100
    case = make_case(lens_b, 1, 8, kv_dtype, seed=18, max_kv_len=max_len)
    ws = ha.DecodeWorkspace(5, 1, 8, max_len, num_ctas=16)
    kv_lens = torch.tensor(lens_a, dtype=torch.int32, device="cuda")
    out = poisoned_empty(5, 8, 128, dtype=torch.bfloat16, device="cuda")

    def step():
        plan = ha.plan_decode(kv_lens, 1, 8, workspace=ws, options=opts(min_tiles=1, tail_percent=30, tail_bin=2))
        ha.decode(case.q, case.k, case.v, case.page_table, kv_lens, plan, sm_scale=case.sm_scale,
                  k_scale=case.k_scale, v_scale=case.v_scale, out=out)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    eager, plan = run(case, ws=ws, min_tiles=1, tail_percent=30, tail_bin=2)
    assert plan.tables().counters[7] > 0
    for lens in (lens_b, lens_a, lens_b, lens_b):
        kv_lens.copy_(torch.tensor(lens, dtype=torch.int32))
        out.fill_(float("nan"))
        graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, eager, name="graph replay with tail bins vs eager")
    check_accuracy(out, case, "graph replay with tail bins")
    check_counters_zero(ws)


def test_planner_clamps_out_of_range_lengths_without_validation():
    kv_lens = torch.tensor([100, 99999, -5], dtype=torch.int32, device="cuda")
    plan = ha.plan_decode(kv_lens, 1, 8, max_kv_len=1024, validate=False)
    assert plan.tables().counters[6] == 2


# ---- bad input -----------------------------------------------------------------------------

def _small():
    case = make_case([100, 5], 1, 8, torch.bfloat16)
    ws = ha.DecodeWorkspace(2, 1, 8, case.max_kv_len)
    return case, ws, ha.plan_decode(case.kv_lens, 1, 8, workspace=ws)


def test_error_length_beyond_max_kv_len():
    kv_lens = torch.tensor([100, 5000], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"kv_lens\[1\] = 5000"):
        ha.plan_decode(kv_lens, 1, 8, max_kv_len=1024)


def test_error_negative_length():
    kv_lens = torch.tensor([-1], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match=r"kv_lens\[0\] = -1"):
        ha.plan_decode(kv_lens, 1, 8, max_kv_len=1024)


def test_error_page_id_out_of_range():
    case, ws, plan = _small()
    pt = case.page_table.clone()
    pt[0, 1] = case.k.shape[0] + 5
    with pytest.raises(ValueError, match=r"page_table\[0, 1\]"):
        ha.decode(case.q, case.k, case.v, pt, case.kv_lens, plan, validate=True)


def test_error_batch_over_workspace():
    case, ws, _ = _small()
    kv_lens = torch.tensor([1, 2, 3], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="max_batch"):
        ha.plan_decode(kv_lens, 1, 8, workspace=ws)


def test_error_plan_from_other_lengths():
    case, ws, plan = _small()
    other = case.kv_lens.clone()
    with pytest.raises(ValueError, match="another kv_lens"):
        ha.decode(case.q, case.k, case.v, case.page_table, other, plan)


def test_error_heads_mismatch_plan():
    case, ws, plan = _small()
    q = torch.randn(2, 4, 128, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="heads"):
        ha.decode(q, case.k, case.v, case.page_table, case.kv_lens, plan)


def test_error_group_too_large():
    kv_lens = torch.tensor([1], dtype=torch.int32, device="cuda")
    with pytest.raises(ValueError, match="group"):
        ha.plan_decode(kv_lens, 1, 32, max_kv_len=64)


def test_error_wrong_dtypes_and_shapes():
    case, ws, plan = _small()
    args = (case.k, case.v, case.page_table, case.kv_lens, plan)
    with pytest.raises(TypeError, match="q must be"):
        ha.decode(case.q.float(), *args)
    with pytest.raises(TypeError, match="v_cache must be"):
        ha.decode(case.q, case.k, case.v.to(FP8), case.page_table, case.kv_lens, plan)
    with pytest.raises(TypeError, match="page_table must be"):
        ha.decode(case.q, case.k, case.v, case.page_table.long(), case.kv_lens, plan)
    with pytest.raises(ValueError, match="head dim"):
        ha.decode(case.q[..., :64].contiguous(), *args)
    with pytest.raises(TypeError, match="out must be"):
        ha.decode(case.q, *args, out=torch.empty(2, 8, 128, device="cuda"))
    with pytest.raises(ValueError, match="q_scale"):
        ha.decode(case.q.to(FP8), *args)


def test_error_page_table_too_narrow():
    case, ws, plan = _small()
    with pytest.raises(ValueError, match="page_table holds"):
        ha.decode(case.q, case.k, case.v, case.page_table[:, :1].contiguous(), case.kv_lens, plan)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("hkv,num_ctas", [(8, 132), (4, 18), (2, 7)])
def test_bins_by_head_same_bits(hkv, num_ctas, kv_dtype, producer, merge_mode):
    """Head-major plans: CTA c runs bin (c % Hkv) * nb1 + c / Hkv (DecodeOptions.bins_by_head, own_bin) instead
    of bin c: no result changes, bit for bit, with split items, empty and length-1 requests, on grids that are and
    are not a multiple of Hkv."""
    case = make_case([1, 64, 65, 700, 0, 4097, 130, 17, 200, 64, 3000, 900], hkv, 4, kv_dtype, seed=50 + hkv)
    outs = []
    for by_head in (True, False):
        out, plan = run(case, num_ctas=num_ctas, min_tiles=1, bins_by_head=by_head)
        assert plan.head_major and plan.cut_to_heads
        assert plan.bin_heads == (hkv if by_head else 1)
        check_counters_zero(plan.workspace)
        outs.append(out)
    check_accuracy(outs[0], case)
    assert_bitwise_equal(outs[1], outs[0], name="bins dealt head by head vs in CTA order")
