"""Paged decode attention on the H200: the six cases of BRIEF.md 3.1 with 8/1 and 64/8 heads,
BF16 and FP8 KV, page 64. Providers: `ours` (dynamic plan; decode + combine per call, plan
built once per step outside the timed region; split items merged by the path that
`heuristics.MERGE_IN_DECODE` selects, by default inside the decode kernel), `ours_static` (the
same kernel on a static split-KV plan), `ours_plan` (the device planner alone, also at batch
256), diagnostics `diag_separate_combine` (`ours` with the other merge path: the separate
combine kernel when the default merges in the decode kernel; correct outputs, so it carries
its error too), `diag_decode_only` (decode kernel without the combine launch and without the
in-kernel merge) and `diag_stream_only` (decode kernel streaming K/V with the consumers
skipping the math; these two give wrong outputs, timing only), the same three rows with the
other producer of the decode kernel (`diag_tma*` where `heuristics.USE_TMA_PRODUCER` picks
cp.async, `diag_cp_async*` where it picks TMA; the full-call row has correct outputs and carries
its error; `diag_tma_promo256_*`: TMA maps with 256-byte L2 promotion, also with `--diag-rows promotion`), version 4's
kernel prologue / split-item arrival (`diag_v4_first_task_load`, `diag_v4_sc_fences`), the claimable
tail of the plan with the TMA kernel and the in-kernel merge on its helper or its consumer warps
(`diag_tma_{helpers,consumers}_tail{P}`: P % of the line in tail bins; `..._bin8`: tail bins of at
least 8 tiles), `diag_prev_default` (the defaults of commit 9780c01: no tail, merge on the
consumers, TMA producer only from 8 KV heads), `diag_first_page_off` (`ours` with the plan built
without the page table: the kernel reads each bin's first page id itself; every other plan gets the
table), `diag_tma_helpers_first_page_off` (with `--diag-rows first_page`), the previous line and
run orders (`diag_request_major`: plan_decode(head_major=False); `diag_head_major_all_bins`: the
head-major line cut into all C bins, heuristics.HEAD_MAJOR_CUT_TO_HEADS off; `diag_bins_in_cta_order`:
CTA c runs bin c, heuristics.BINS_BY_HEAD off; `diag_bins_by_head_far_pairs`: dealt by head, but
CTAs 2k / 2k + 1 (one TPC) on heads h and h + Hkv / 2; `diag_bin_in_order`: a bin's tasks
run in line order; `diag_request_major_in_order`: both, the order before the eighth session),
`diag_seq_pages*` (`--diag-rows page_order`: the same pages in physical order instead of the random
permutation; whole call, decode only, stream only), and FlashInfer /
FlashAttention when importable. Every row carries the bandwidth floor (KV + q + out bytes over
4.27 TB/s) and the achieved TB/s; `ours*` rows carry the error against float32 attention on
the dequantised inputs. Results: `decode_attention.{json,md}` holds `ours`, `ours_static`,
`ours_plan` and the baselines; `decode_attention_diag.{json,md}` the `diag_*` rows.

`--flush read` times every row after a read flush instead of the written one (hpc_common.bench's
FLUSH_MODE) and writes `decode_attention_read_flush.{json,md}`: the written flush leaves the L2 full
of dirty lines whose write-back shares DRAM with the KV stream inside the timed call (a bare stream
of 64x4K at 8/1, `packages/hpc-attention/scripts/page_stream_rate.cu`: 40.5 us after a written
flush, 34.3 after a read one), which no kernel of ours controls; both are valid flushes in STYLE.md's
sense, so the read rows show the kernels without that cost.

    python benchmarks/bench_decode_attention.py [--out-dir benchmarks/results] [--quick]
        [--heads 8/1,64/8] [--kv bf16,fp8] [--cases 64x4K,1x128K+31x4K] [--diag-rows all|tail|first_page|lookahead|line_order|min_tiles|code_warm|task_cost|cost_cap|page_order|promotion|merge|prologue|l2_policy]
        [--flush write|read]
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
from hpc_common import pdl_enabled
from hpc_common.bench import BenchResults, bench_us, floor_us, gpu_slug, use_flush
from hpc_common.testing import error_stats

import hpc_attention as ha
from hpc_attention import _ext, heuristics
from hpc_attention import paged_decode as pd
from hpc_attention.reference import decode_reference

DIAG_ROW_SETS = ("all", "tail", "first_page", "lookahead", "line_order", "min_tiles", "code_warm", "task_cost", "cost_cap",
                 "page_order", "promotion", "merge", "prologue", "l2_policy")
CASES = ["64x0.5K", "64x4K", "32x128+32x4K", "2x32K+30x4K", "1x64K+15x4K", "1x128K+31x4K"]
HEADS = [(8, 1), (64, 8)]
PAGE = 64
FP8 = torch.float8_e4m3fn


_SWITCHES = {"merge": "MERGE_IN_DECODE", "tma": "USE_TMA_PRODUCER", "helpers": "MERGE_ON_HELPER_WARPS",
             "cut_to_heads": "HEAD_MAJOR_CUT_TO_HEADS", "bins_by_head": "BINS_BY_HEAD"}


@contextlib.contextmanager
def overrides(merge=None, tma=None, helpers=None, cut_to_heads=None, bins_by_head=None, **diag):
    """Temporarily: the split-merge path (heuristics.MERGE_IN_DECODE), the producer
    (heuristics.USE_TMA_PRODUCER), the merge on helper warps (heuristics.MERGE_ON_HELPER_WARPS),
    the head-major line's cut and bin dealing (HEAD_MAJOR_CUT_TO_HEADS, read by plan_decode;
    BINS_BY_HEAD, read by decode) and the decode diagnostics (paged_decode.DIAG keys)."""
    values = dict(merge=merge, tma=tma, helpers=helpers, cut_to_heads=cut_to_heads, bins_by_head=bins_by_head)
    saved = {name: getattr(heuristics, name) for name in _SWITCHES.values()}, dict(pd.DIAG)
    for key, value in values.items():
        if value is not None:
            setattr(heuristics, _SWITCHES[key], value)
    pd.DIAG.update(diag)
    try:
        yield
    finally:
        for name, value in saved[0].items():
            setattr(heuristics, name, value)
        pd.DIAG.clear()
        pd.DIAG.update(saved[1])


def parse_case(case: str) -> list[int]:
    lens = []
    for part in case.split("+"):
        n, length = part.split("x")
        tokens = int(float(length[:-1]) * 1024) if length.endswith("K") else int(length)
        lens += [tokens] * int(n)
    return lens


def page_table_of(need, pages):
    """[B, max pages] int32 table whose row b holds the next need[b] ids of `pages`, in order."""
    pt = torch.zeros(len(need), max(need), dtype=torch.int32, device=pages.device)
    pos = 0
    for b, n in enumerate(need):
        pt[b, :n] = pages[pos:pos + n]
        pos += n
    return pt


def kv_bytes_of(lens, hkv, kv_dtype) -> int:
    """K and V bytes of a case's requests (head dim 128)."""
    return 2 * sum(lens) * hkv * 128 * (1 if kv_dtype == "fp8" else 2)


def call_bytes(lens, hkv, kv_dtype, q, pt) -> int:
    """The bytes a decode call must move, its floor's numerator: K and V, q read and the output written (BF16,
    q's shape), the page table."""
    return kv_bytes_of(lens, hkv, kv_dtype) + 2 * q.numel() * 2 + pt.numel() * 4


def make_inputs(lens, hq, hkv, kv_dtype, gen):
    dev = torch.device("cuda")
    need = [(L + PAGE - 1) // PAGE for L in lens]
    num_pages = sum(need)
    shape = (num_pages, PAGE, hkv, 128)
    if kv_dtype == "fp8":
        k = torch.randn(shape, device=dev, generator=gen).to(FP8)
        v = torch.randn(shape, device=dev, generator=gen).to(FP8)
        scales = (0.5, 0.75)
    else:
        k = torch.randn(shape, device=dev, generator=gen, dtype=torch.bfloat16)
        v = torch.randn(shape, device=dev, generator=gen, dtype=torch.bfloat16)
        scales = (1.0, 1.0)
    pt = page_table_of(need, torch.randperm(num_pages, device=dev, generator=gen).int())
    q = torch.randn(len(lens), hq, 128, device=dev, generator=gen, dtype=torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return q, k, v, pt, kv_lens, scales


def flashinfer_fn(q, k, v, pt, lens, kv_dtype, scales):
    import flashinfer  # noqa: F401  (optional)

    dev = q.device
    B, hq, _ = q.shape
    hkv = k.shape[2]
    need = [(L + PAGE - 1) // PAGE for L in lens]
    indptr = torch.tensor([0] + list(torch.tensor(need).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    indices = torch.cat([pt[b, :n] for b, n in enumerate(need)])
    last = torch.tensor([L - (n - 1) * PAGE for L, n in zip(lens, need)], dtype=torch.int32, device=dev)
    best = None
    for tc in (False, True):
        ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
        w.plan(indptr, indices, last, hq, hkv, 128, PAGE, q_data_type=torch.bfloat16,
               kv_data_type=k.dtype)
        fn = (lambda w=w: w.run(q, (k, v), k_scale=scales[0], v_scale=scales[1]))
        t = bench_us(fn)
        best = t if best is None else min(best, t)
    return best


def flash_attn_fn(q, k, v, pt, kv_lens):
    from flash_attn_interface import flash_attn_with_kvcache  # FA3 (optional)

    fn = lambda: flash_attn_with_kvcache(q.unsqueeze(1), k, v, cache_seqlens=kv_lens, page_table=pt)  # noqa: E731
    return bench_us(fn)


def page_order_rows(kv_lens, lens, hkv, hq, kv_torch, time_call, time_mode):
    """Diagnosis: the same pages in physical order (request b's pages contiguous, in line order)
    instead of the benchmark's random permutation: whole call, decode only and stream only. Does
    the DRAM side care which pages neighbouring CTAs read at once? (A 64/8 tile spans 8 heads' rows
    of a page, read by 8 neighbouring CTAs; an 8/1 tile is one 8-16 KB page read by one CTA.) The
    outputs are not checked: the reference was built for the random table."""
    need = [(L + PAGE - 1) // PAGE for L in lens]
    pt = page_table_of(need, torch.arange(sum(need), dtype=torch.int32, device=kv_lens.device))
    plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ha.DecodeWorkspace(len(lens), hkv, hq, max(lens)),
                          kv_dtype=kv_torch, page_table=pt, page_size=PAGE)
    time_call("diag_seq_pages", plan, correct=False, table=pt)
    for name, flags in (("diag_seq_pages_decode_only", 0), ("diag_seq_pages_stream_only", 1)):
        time_mode(name, plan, flags, table=pt)


def bench_case(res, case, hq, hkv, kv_dtype, gen, reps, diag=True, diag_rows="all"):
    lens = parse_case(case)
    q, k, v, pt, kv_lens, (ks, vs) = make_inputs(lens, hq, hkv, kv_dtype, gen)
    B = len(lens)
    nbytes = call_bytes(lens, hkv, kv_dtype, q, pt)
    floor = floor_us(nbytes)
    fields = dict(case=case, Hq=hq, Hkv=hkv, kv_dtype=kv_dtype, floor_us=floor)
    max_len = max(lens)
    ref = decode_reference(q, k, v, pt, lens, sm_scale=128 ** -0.5, k_scale=ks, v_scale=vs, dtype=torch.float32)

    def add(provider, t, out=None):
        extra = error_stats(out, ref) if out is not None else {}
        row = res.add(provider, t, **fields, tbps=nbytes / (t * 1e-6) / 1e12, **extra)
        print(f"{case:>14} {hq:>2}/{hkv} {kv_dtype:>4} {provider:>12}: {t:8.2f} us  floor {floor:7.2f}"
              f"  {row['tbps']:.2f} TB/s" + (f"  rel_err {extra['rel_err']:.2e}" if extra else ""), flush=True)

    def time_call(provider, plan, correct=True, table=None):
        """Time decode with `plan` under the current overrides (on page table `table`, default the
        case's); rows with correct outputs carry their error (diagnostics that skip work do not)."""
        out = torch.empty(B, hq, 128, dtype=torch.bfloat16, device="cuda")
        tbl = pt if table is None else table
        fn = (lambda: ha.decode(q, k, v, tbl, kv_lens, plan, k_scale=ks, v_scale=vs, out=out))
        fn()
        torch.cuda.synchronize()
        add(provider, bench_us(fn, reps=reps), out.clone() if correct else None)

    def time_mode(provider, plan, flags, table=None, **ov):
        """One row under `overrides(**ov)`: the whole call (flags None, outputs checked) or the
        decode kernel alone with paged_decode.DIAG flags (0 decode only, 1 stream only, 2 / 3 the
        same two with the TMA maps' 256-byte L2 promotion)."""
        if flags is None:
            with overrides(**ov):
                time_call(provider, plan, table=table)
        else:
            with overrides(skip_combine=True, flags=flags, **ov):
                time_call(provider, plan, correct=False, table=table)

    kv_torch = torch.float8_e4m3fn if kv_dtype == "fp8" else torch.bfloat16
    # (provider, static splits, task cost, tail arguments of plan_decode, producer, merge on helpers).
    # Every plan is given the page table (each bin's first page id from the plan, see
    # heuristics.FIRST_PAGE_FROM_PLAN) except the `*first_page_off` rows.
    variants = [("ours", None, None, {}, None, None), ("ours_static", "auto", None, {}, None, None)]
    if diag:  # the plan without the page table: the kernel reads each bin's first page id itself
        variants.append(("diag_first_page_off", None, None, {}, None, None))
    if diag and diag_rows == "first_page":  # TMA + helper-warp merge (no tail), with and without
        variants += [("diag_tma_helpers_tail0", None, None, {"tail_percent": 0}, True, True),
                     ("diag_tma_helpers_first_page_off", None, None, {"tail_percent": 0}, True, True)]
    if diag and diag_rows == "all":  # the plan cut on tiles alone (version 4's plan): what the task cost buys
        variants.append(("diag_task_cost0", None, 0, {}, None, None))
    if diag and diag_rows == "task_cost":  # the planner's fixed cost per item, in tiles (heuristics.TASK_COST_TILES_*)
        variants += [(f"diag_task_cost{c}", None, c, {}, None, None) for c in (1, 2, 3, 4, 5)]
    if diag and diag_rows == "min_tiles":  # work floors per CTA (ninth session; the defaults are 4 BF16, 8 FP8 since
        # the twenty-ninth): at 8/1 with 8, 64x0.5K's 8-tile requests fit whole bins (64 CTAs, no split merges) instead
        # of two 4-tile parts
        variants += [(f"diag_min_tiles{m}", None, None, {"min_tiles": m}, None, None) for m in (4, 6, 8, 12)]
    if diag and diag_rows == "cost_cap":  # the charge uncapped (heuristics.TASK_COST_CAP off; thirtieth session)
        variants.append(("diag_cost_cap_off", None, None, {"cost_cap": False}, None, None))
    if diag and diag_rows in ("all", "tail"):  # TMA kernel: claimable tail (percent of the line, smallest bin) x
        # merge on helpers / consumers
        for helpers, who in ((True, "helpers"), (False, "consumers")):
            for pct in ((0, 10, 20, 35) if helpers else (0, 20)):
                variants.append((f"diag_tma_{who}_tail{pct}", None, None, {"tail_percent": pct}, True, helpers))
        variants += [("diag_tma_helpers_tail20_bin8", None, None, {"tail_percent": 20, "tail_bin": 8}, True, True),
                     ("diag_prev_default", None, None, {"tail_percent": 0}, hkv >= 8, False)]
    for provider, static, cost, tail_kw, tma, helpers in variants:
        ws = ha.DecodeWorkspace(B, hkv, hq, max_len, static_splits=static)
        pt_kw = {} if provider.endswith("first_page_off") else dict(page_table=pt, page_size=PAGE)
        plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, static_splits=static, kv_dtype=kv_torch,
                              task_cost=cost, **tail_kw, **pt_kw)
        with overrides(tma=tma, helpers=helpers):
            time_call(provider, plan)
        if provider == "ours":
            t = bench_us(lambda ws=ws: ha.plan_decode(kv_lens, hkv, hq, workspace=ws, kv_dtype=kv_torch,
                                                      validate=False, **pt_kw), reps=reps)
            res.add("ours_plan", t, **dict(fields, floor_us=None))
            print(f"{case:>14} {hq:>2}/{hkv} {kv_dtype:>4} {'ours_plan':>12}: {t:8.2f} us", flush=True)
            if diag and diag_rows in ("all", "lookahead"):
                # The decode kernel built with the consumers' previous schedule (no score
                # look-ahead): the whole call (outputs checked) and decode only.
                for name, flags in (("diag_no_lookahead", None), ("diag_no_lookahead_decode_only", 0)):
                    time_mode(name, plan, flags, defines=_ext.NO_LOOKAHEAD)
            if diag and diag_rows in ("all", "line_order"):
                # The previous line and run orders (eighth session): the request-major line
                # (plan_decode(head_major=False)), a bin's tasks run in line order (decode diag
                # bit 4 instead of task_in_run's first, last, rest), and both.
                plan_rm = ha.plan_decode(kv_lens, hkv, hq, workspace=ha.DecodeWorkspace(B, hkv, hq, max_len),
                                         kv_dtype=kv_torch, head_major=False, **pt_kw)
                time_call("diag_request_major", plan_rm)
                if hkv > 1:  # the head-major line cut into all C bins, not C rounded down to Hkv's multiple
                    with overrides(cut_to_heads=False):
                        plan_all = ha.plan_decode(kv_lens, hkv, hq, workspace=ha.DecodeWorkspace(B, hkv, hq, max_len),
                                                  kv_dtype=kv_torch, **pt_kw)
                    time_call("diag_head_major_all_bins", plan_all)
                    with overrides(bins_by_head=False):  # CTA c runs bin c
                        time_call("diag_bins_in_cta_order", plan)
                    with overrides(flags=32):  # a TPC's two CTAs on heads h and h + Hkv / 2
                        time_call("diag_bins_by_head_far_pairs", plan)
                with overrides(flags=16):
                    time_call("diag_bin_in_order", plan)
                    time_call("diag_request_major_in_order", plan_rm)
            if diag and diag_rows == "code_warm":
                code_warm_rows(q, k, v, pt, kv_lens, plan, ks, vs, kv_dtype, gen, reps, time_call, add)
            if diag and diag_rows == "page_order":
                page_order_rows(kv_lens, lens, hkv, hq, kv_torch, time_call, time_mode)
            if diag and diag_rows == "promotion":  # the TMA maps' 256-byte L2 promotion (the BF16 default
                # until the twenty-first session) against the default 128 B: the whole call (outputs
                # checked), then decode only and stream only (DIAG flags bit 1)
                with overrides(flags=2):
                    time_call("diag_tma_promo256", plan)
                for name, flags in (("diag_tma_promo256_decode_only", 2), ("diag_tma_promo256_stream_only", 3)):
                    time_mode(name, plan, flags)
            if diag and diag_rows == "merge":  # every split part arriving (by default a part that saw every other part
                # arrived before its own stores merges without arriving, decode_merge_in_kernel.cuh), items of 17-24
                # parts merged in two levels (by default one, split_merge.cuh) and a bin's last split task handed to
                # the helper warps (by default its consumers merge it), outputs checked; the default's again (the same
                # process's spread). (The merge batches of 8 parts, measured in the
                # thirty-first session, the groups folded as states, the default before the twenty-ninth, and the merge
                # on one row per helper thread, measured in the twenty-seventh, are not timed again.)
                for name, defines in (("diag_no_arrival_peek", _ext.NO_ARRIVAL_PEEK),
                                      ("diag_one_level_16", _ext.ONE_LEVEL_16),
                                      ("diag_helpers_merge_last", _ext.HELPERS_MERGE_LAST),
                                      ("diag_merge_default_again", ())):
                    time_mode(name, plan, None, defines=defines)
            if diag and diag_rows == "prologue":  # the call's fixed steps, each variant against the default's
                # timing again: the task-end fold's second step one column per thread (decode_task_fold.cuh; the
                # default takes 4). (The prologue's and the fold's earlier forms, slower in three or four processes,
                # are not timed again.)
                for name, defines in (("diag_fold_scalar_columns", _ext.FOLD_SCALAR_COLUMNS),
                                      ("diag_prologue_default_again", ())):
                    time_mode(name, plan, None, defines=defines)
            if diag and diag_rows == "l2_policy":  # the KV loads with the normal L2 policy instead of evict_first
                # (DIAG flags bit 6; thirty-fifth session), and the default's timing again (the same process's
                # spread); outputs checked
                with overrides(flags=64):
                    time_call("diag_kv_l2_normal", plan)
                time_call("diag_kv_l2_default_again", plan)
            if diag and diag_rows != "all":  # every narrow row set also gets decode only / stream only
                for name, flags in (("diag_decode_only", 0), ("diag_stream_only", 1)):
                    time_mode(name, plan, flags)
            elif diag:
                # The other split-merge path (same plan and workspace): with the default
                # MERGE_IN_DECODE = True this is the separate combine kernel of version 3.
                merge_default = heuristics.MERGE_IN_DECODE
                with overrides(merge=not merge_default):
                    time_call("diag_separate_combine" if merge_default else "diag_merge_in_decode", plan)
                # Diagnostics (outputs wrong while set): the decode kernel without the combine
                # launch or the in-kernel merge, and the same with the consumers skipping the
                # math (memory side only); the same three rows with the other producer (TMA vs
                # cp.async), and the TMA maps with 256-byte L2 promotion against the default 128 B
                # (FP8 rows are 128 B: the promotion also fetches the next head's row; BF16 rows are
                # two 128-byte boxes, each of which then asks for the whole row).
                tma_default = pd._use_tma(PAGE, hkv, kv_dtype == "fp8")
                other = "diag_cp_async" if tma_default else "diag_tma"
                runs = [("diag_decode_only", None, 0), ("diag_stream_only", None, 1),
                        (other, not tma_default, None), (other + "_decode_only", not tma_default, 0),
                        (other + "_stream_only", not tma_default, 1)]
                runs += [("diag_tma_promo256_decode_only", True, 2), ("diag_tma_promo256_stream_only", True, 3)]
                for name, tma, flags in runs:
                    time_mode(name, plan, flags, tma=tma)
                # Version 4's kernel prologue and split-item arrival, one at a time (outputs
                # correct): the first task read after bin_start instead of from bin_first, and an
                # SC fence in every consumer thread instead of one acq_rel fence.
                for name, flags in (("diag_v4_first_task_load", 4), ("diag_v4_sc_fences", 8)):
                    with overrides(flags=flags):
                        time_call(name, plan)
        del ws
    if diag and diag_rows == "all" and case == "1x128K+31x4K":
        # The static variant with more splits than the default FlashDecoding rule (which gives
        # the 128K request only ceil(C / B) parts): how strong a static split can be here, so the
        # dynamic / static ratio is also read against the best fixed split count.
        for splits in (16, 32, 64):
            ws = ha.DecodeWorkspace(B, hkv, hq, max_len, static_splits=splits)
            time_call(f"diag_static_s{splits}", ha.plan_decode(kv_lens, hkv, hq, workspace=ws, static_splits=splits))
            del ws
    for name, call in (("flashinfer", lambda: flashinfer_fn(q, k, v, pt, lens, kv_dtype, (ks, vs))),
                       ("flash_attn", lambda: flash_attn_fn(q, k, v, pt, kv_lens))):
        try:
            add(name, call())
        except Exception as e:  # optional baselines: absent or unsupported here
            print(f"{case:>14} {hq:>2}/{hkv} {kv_dtype:>4} {name:>12}: skipped ({type(e).__name__}: {str(e)[:80]})")


def us_after(first, call, reps) -> float:
    """Microseconds of `call` queued right behind `first`: the median of [first; call] minus that
    of [first] alone (each replayed after the L2 flush). PDL stays as the caller set it."""
    def both():
        first()
        call()

    return bench_us(both, reps=reps) - bench_us(first, reps=reps)


def spin(cycles: int = 20000):
    """A kernel that shares no code with ours and touches no memory (~10 us by default): the
    control for us_after, whose subtraction also hides the call's launch behind the running kernel."""
    torch.cuda._sleep(cycles)


def code_warm_rows(q, k, v, pt, kv_lens, plan, ks, vs, kv_dtype, gen, reps, time_call, add):
    """How much of a call is cold instruction fetch (the flush evicts the kernels' code too), with
    PDL off so no two launches overlap: `diag_code_warm`, the call right behind a small decode of
    the same kernel on inputs, plan and output of its own (one 32-tile request, split over bins,
    and B - 1 one-tile requests; its data stays cold, only code is warm), against the control
    `diag_after_spin`, the call right behind `spin`; `diag_pdl_off`: the call alone."""
    B, hq, hkv = q.shape[0], q.shape[1], k.shape[2]
    wq, wk, wv, wpt, wlens, _ = make_inputs([32 * 64] + [64] * (B - 1), hq, hkv, kv_dtype, gen)
    wplan = ha.plan_decode(wlens, hkv, hq, workspace=ha.DecodeWorkspace(B, hkv, hq, 32 * 64), kv_dtype=k.dtype,
                           page_table=wpt, page_size=PAGE)
    wout = torch.empty(B, hq, 128, dtype=torch.bfloat16, device="cuda")
    out = torch.empty(B, hq, 128, dtype=torch.bfloat16, device="cuda")

    def warm():
        ha.decode(wq, wk, wv, wpt, wlens, wplan, k_scale=ks, v_scale=vs, out=wout)

    def call():
        ha.decode(q, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, out=out)

    with pdl_enabled(False):
        time_call("diag_pdl_off", plan)
        warm()
        torch.cuda.synchronize()
        add("diag_code_warm", us_after(warm, call, reps), out.clone())
        add("diag_after_spin", us_after(spin, call, reps), out.clone())


def bench_plan_256(res, reps):
    """The planner alone at batch 256 (once per decode step for all layers)."""
    for hkv in (1, 8):
        kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
        kv_lens[::7] = 100
        ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)
        # Timed twice, the second kept: the first timing of the plan in a process read 0.3-0.5 us lower than
        # every later one on the same buffers (4.86-5.02 against 5.2-5.5 us at 8/1, H200; a throwaway timing of
        # another op inside bench_us did not remove it; scripts/plan_placement.py, --plan-only), so the first
        # is not what a serving process sees step after step.
        def plan():
            ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)

        t_first, t = bench_us(plan, reps=reps), bench_us(plan, reps=reps)
        res.add("ours_plan", t, case="256x4K", Hq=8 * hkv, Hkv=hkv, kv_dtype="any")
        print(f"{'256x4K':>14} {8 * hkv:>2}/{hkv}  any {'ours_plan':>12}: {t:8.2f} us (first timing {t_first:.2f})",
              flush=True)
        # Diagnostic: the same plan with the planner's code already fetched into the L2 by a
        # one-request plan launched just before it (after the flush), as the difference of
        # [warm-up plan + plan] and [warm-up plan]: how much of ours_plan is cold instruction
        # fetch (the flush evicts the kernel's code too). Its inputs stay cold.
        one = torch.full((1,), 100, dtype=torch.int32, device="cuda")
        ws1 = ha.DecodeWorkspace(1, hkv, 8 * hkv, 4096)

        def warm():
            ha.plan_decode(one, hkv, 8 * hkv, workspace=ws1, validate=False)

        # Control (ninth session): `spin`, which shares no code, in place of the warm-up plan; PDL
        # off so no launch overlaps through it. Against it, `diag_plan_code_warm` is the cold-code
        # share alone.
        with pdl_enabled(False):
            t_warm, t_spin = us_after(warm, plan, reps), us_after(lambda: spin(5000), plan, reps)
        res.add("diag_plan_code_warm", t_warm, case="256x4K", Hq=8 * hkv, Hkv=hkv, kv_dtype="any")
        res.add("diag_plan_after_spin", t_spin, case="256x4K", Hq=8 * hkv, Hkv=hkv, kv_dtype="any")
        print(f"{'256x4K':>14} {8 * hkv:>2}/{hkv}  any {'plan, warm code':>12}: {t_warm:8.2f} us; "
              f"after a spin kernel {t_spin:.2f} us", flush=True)


class _Repeat:
    """A BenchResults view that tags every row it adds with the repeat index (--plan-only)."""

    def __init__(self, res: BenchResults, i: int):
        self.res, self.i = res, i

    def add(self, provider: str, median_us: float, **fields) -> dict:
        return self.res.add(provider, median_us, repeat=self.i, **fields)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--quick", action="store_true", help="fewer repetitions, 8/1 heads only")
    ap.add_argument("--no-diag", action="store_true",
                    help="leave out the diag_* rows (separate combine, decode only, stream only)")
    ap.add_argument("--heads", default=None, help="comma list of Hq/Hkv (default: 8/1,64/8; --quick: 8/1)")
    ap.add_argument("--kv", default="bf16,fp8", help="comma list of KV dtypes")
    ap.add_argument("--cases", default=None, help="comma list of cases (default: all six)")
    ap.add_argument("--diag-rows", default="all", choices=DIAG_ROW_SETS,
                    help="diag rows: all, or one narrow set with decode only / stream only: the tail rows, "
                         "the first-page rows (with and without, cp.async and TMA + helpers), the rows "
                         "without the score look-ahead, the line and run order rows (diag_request_major*, "
                         "diag_bin_in_order), higher work floors (diag_min_tiles*) or the cold-code rows "
                         "(diag_code_warm, diag_after_spin, diag_pdl_off), the task-cost sweep, or the pages "
                         "in physical order (diag_seq_pages*)")
    ap.add_argument("--flush", default="write", choices=("write", "read"),
                    help="the L2 flush before each timed call: written (the default, as every committed run) or "
                         "read; read writes decode_attention_read_flush.{json,md}")
    ap.add_argument("--plan-only", type=int, default=0, metavar="N",
                    help="only the batch-256 planner rows, N times in one process (their spread), written to "
                         "decode_attention_plan_spread.{json,md}")
    args = ap.parse_args()
    if args.plan_only:
        res = BenchResults("decode_attention_plan_spread", args.out_dir / gpu_slug(), flush=args.flush)
        use_flush(args.flush, "decode_attention")
        for i in range(args.plan_only):
            bench_plan_256(_Repeat(res, i), 100)
        print(res.markdown())
        print(f"wrote {res.write()}")
        return
    op = use_flush(args.flush, "decode_attention")
    reps = 30 if args.quick else 100
    heads = HEADS[:1] if args.quick else HEADS
    if args.heads:
        heads = [tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")]
    cases = args.cases.split(",") if args.cases else CASES
    res = BenchResults(op, args.out_dir / gpu_slug(), flush=args.flush)
    gen = torch.Generator(device="cuda").manual_seed(0)
    bench_plan_256(res, reps)
    for hq, hkv in heads:
        for kv_dtype in args.kv.split(","):
            for case in cases:
                bench_case(res, case, hq, hkv, kv_dtype, gen, reps, diag=not args.no_diag, diag_rows=args.diag_rows)
                torch.cuda.empty_cache()
    # The diag_* rows (A/B and diagnosis) go to decode_attention_diag.{json,md}, so the file users
    # read holds the providers of the brief's table (ours, ours_static, ours_plan, baselines).
    diag_res = res.split_off(op + "_diag", lambda row: row["provider"].startswith("diag_"))
    path = res.write()
    print(res.markdown())
    print(f"wrote {path}")
    if diag_res.rows:  # (--no-diag: none, and an earlier run's diag file stays)
        print(f"wrote {diag_res.write()}")


if __name__ == "__main__":
    main()
