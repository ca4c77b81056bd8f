"""Per-CTA timeline of the paged decode kernel at 8/1 heads: where the per-call fixed cost goes.

Each case of the benchmark (same inputs: benchmarks/bench_decode_attention.py) runs under the
benchmark's conditions: one CUDA graph of [timeline zeroed, 128 MB L2 flush, event, decode, event],
replayed `--reps` times; the replay with the median kernel span is printed. The decode kernel
writes per CTA %globaltimer stamps (decode_timeline.cuh) into paged_decode.DIAG["timeline"].
Printed per case and variant (us, relative to the earliest CTA entry unless said):
  event     the in-graph event pair around the call (what bench_us reports)
  span      earliest CTA entry -> latest CTA exit; event - span = launch / method, outside the kernel
  entry     CTA entry skew (p50 / p90 / max)
  start     entry -> after griddepcontrol.wait -> bin known -> first copies issued -> first tile landed
            (medians per step; first data p50 / max from t0)
  stream    first tile landed -> last tile consumed per CTA (p10 / p50 / p90), tiles per CTA, us per tile
  end       last tile -> consumer exit (output + consumer-side merges), exit p10 / p50 / p90 / max
  peek      consumer merges (levels run by the consumers) and the split arrivals the arrival peek skipped
  merge     us per CTA in split arrivals + merges (consumers or helper warps), CTAs that merged
  late      the 6 CTAs that exit last: tiles, tasks, split tasks, merges, start, stream, end

    python3 packages/hpc-attention/scripts/timeline_decode.py [--cases ...] [--kv bf16,fp8]
        [--variants default,first_page_off,tma_helpers,read_flush,stream_only,stream_only_read,
         decode_only_read] [--reps 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
from pathlib import Path

import torch
from hpc_common.bench import timing

import hpc_attention as ha
from hpc_attention import _ext, heuristics
from hpc_attention import paged_decode as pd

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("bench_decode_attention", ROOT / "benchmarks/bench_decode_attention.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

SLOTS = pd.TIMELINE_SLOTS
(ENTRY, PDL, BIN, ISSUE, DATA, LAST, CEND, HEND, MERGE_NS, COUNTS, PEND, SMID, HCOUNTS, CLK0, CLK1,
 LAST_MERGE_NS, PROD_START, PROD_TABLES, PROD_EMPTY, END_MERGED, END_STORED, END_HANDED, END_RING,
 END_ROW_SCALARS, M_DESC, M_ARRIVED, M_LOADED, M_STORED, M_ARRIVED2, M_END, M_PARTS, M_NEED,
 M_L2_MERGED, PEEKS) = range(34)

# name -> (bench.overrides kwargs, flush mode, plan given the page table: first page ids from the plan)
VARIANTS = {
    "default": ({}, "write", True),
    "first_page_off": ({}, "write", False),
    "tma_helpers": (dict(tma=True, helpers=True), "write", True),
    "read_flush": ({}, "read", True),
    "stream_only": (dict(skip_combine=True, flags=1), "write", True),
    "stream_only_read": (dict(skip_combine=True, flags=1), "read", True),
    "decode_only_read": (dict(skip_combine=True, flags=0), "read", True),
    # head-major plans: CTA c runs bin c instead of the bins dealt head by head (heuristics.BINS_BY_HEAD)
    "bins_in_cta_order": (dict(bins_by_head=False), "write", True),
    # the split merge with one row per helper thread at a time (HPC_ATTN_MERGE_ROWS=1, the earlier default)
    "merge_rows1": (dict(defines=_ext.MERGE_ROWS1), "write", True),
    # the prologue's other forms (paged_decode_config.cuh)
    "prologue_reads_group": (dict(defines=_ext.PROLOGUE_READS_GROUP), "write", True),
    # the task-end fold's earlier form (decode_task_fold.cuh)
    "fold_each_thread": (dict(defines=_ext.FOLD_EACH_THREAD), "write", True),
    # the fold's second step one column per thread, and that form with its store addresses computed at the fold
    "fold_scalar_columns": (dict(defines=_ext.FOLD_SCALAR_COLUMNS), "write", True),
    "fold_addr_at_fold": (dict(defines=_ext.FOLD_ADDR_AT_FOLD), "write", True),
    # the 8 merge groups of a long item folded as states (split_merge.cuh; the form before the twenty-ninth session)
    "merge_fold_groups": (dict(defines=_ext.MERGE_FOLD_GROUPS), "write", True),
}


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def run(case, kv, variant, inputs, reps):
    q, k, v, pt, kv_lens, (ks, vs) = inputs
    B, hq, hkv = q.shape[0], q.shape[1], k.shape[2]
    kv_t = bench.FP8 if kv == "fp8" else torch.bfloat16
    kw, flush, with_pt = VARIANTS[variant]
    ws = ha.DecodeWorkspace(B, hkv, hq, int(kv_lens.max()))
    pt_kw = dict(page_table=pt, page_size=k.shape[1]) if with_pt else {}
    plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, kv_dtype=kv_t, **pt_kw)
    C = plan.num_ctas
    tl = torch.zeros(C * SLOTS, dtype=torch.int64, device="cuda")
    out = torch.empty(B, hq, 128, dtype=torch.bfloat16, device="cuda")
    dev = q.device
    stream = torch.cuda.Stream(dev)  # capture needs a side stream (as in bench_us)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with bench.overrides(timeline=tl, **kw), torch.cuda.stream(stream):
        fn = (lambda: ha.decode(q, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, out=out))
        fn()
        producer = pd.LAST_PRODUCER["name"] + ("+first_page" if pd.LAST_PRODUCER["first_page"] else "")
        timing.empty_l2(dev, flush)  # allocates the flush buffer outside the capture
        stream.synchronize()

        def pre():
            tl.zero_()
            timing.empty_l2(dev, flush)

        runs = timing.replay_in_graph(fn, reps, stream, pre=pre, each=lambda: tl.view(C, SLOTS).cpu().tolist())
        H = pd._bin_heads(plan)  # own_bin: the bin CTA c runs
    torch.cuda.current_stream(dev).wait_stream(stream)
    nb1 = C // H if H > 1 else C
    bins = [(c % H) * nb1 + c // H if H > 1 and c < nb1 * H else c for c in range(C)]
    return producer, plan.tables(), runs, bins


def analyse(tables, event_us, a, kv, bins=None):
    C = len(a)
    t0 = min(r[ENTRY] for r in a if r[ENTRY])
    us = lambda x: (x - t0) / 1e3  # noqa: E731
    exit_ = [max(r[CEND], r[HEND], r[PEND]) for r in a]
    span = (max(exit_) - t0) / 1e3
    tile_bytes = 64 * 128 * 2 * (1 if kv == "fp8" else 2)
    # The longest item's parts: which bins hold one (tables are the plan of this call).
    bs = tables.bin_start
    lens_items = {}
    for t in tables.tasks:
        lens_items[t[0]] = max(lens_items.get(t[0], 0), t[2])
    longest = max(lens_items, key=lens_items.get) if lens_items else -1
    holds_long = [any(tables.tasks[i][0] == longest for i in range(bs[b], bs[b + 1])) for b in (bins or range(C))]
    rows = []
    bins = bins or list(range(C))
    for c, r in enumerate(a):
        mine = tables.tasks[bs[bins[c]]:bs[bins[c] + 1]]  # the own bin (no tail bins at TAIL_PERCENT = 0)
        tiles, tasks, splits = sum((t[2] + 63) // 64 - t[1] for t in mine), len(mine), sum(t[3] >= 0 for t in mine)
        merges = r[COUNTS] + r[HCOUNTS]
        busy = tiles > 0 and r[DATA] and r[LAST]
        rows.append(dict(c=c, sm=r[SMID], tiles=tiles, tasks=tasks, splits=splits, merges=merges, long=holds_long[c],
                         entry=us(r[ENTRY]), pdl=(r[PDL] - r[ENTRY]) / 1e3, bin=(r[BIN] - r[PDL]) / 1e3,
                         issue=(r[ISSUE] - r[BIN]) / 1e3 if r[ISSUE] else float("nan"),
                         land=(r[DATA] - r[ISSUE]) / 1e3 if busy and r[ISSUE] else float("nan"),
                         data=us(r[DATA]) if busy else float("nan"),
                         stream=(r[LAST] - r[DATA]) / 1e3 if busy else 0.0,
                         end=(r[CEND] - r[LAST]) / 1e3 if busy else float("nan"),
                         exit=us(exit_[c]), merge=r[MERGE_NS] / 1e3, last_merge=r[LAST_MERGE_NS] / 1e3,
                         ghz=(r[CLK1] - r[CLK0]) / max(1, r[CEND] - r[ENTRY])))
    busy = [x for x in rows if x["tiles"] > 0]
    mean = lambda xs: sum(xs) / len(xs) if xs else float("nan")  # noqa: E731
    stamps = sorted({v for r in a for v in (r[ENTRY], r[PDL], r[BIN], r[ISSUE], r[DATA], r[LAST], r[CEND]) if v})
    res = min((y - x for x, y in zip(stamps, stamps[1:])), default=0)
    f = lambda k, xs=busy: [x[k] for x in xs if x[k] == x[k]]  # noqa: E731 (drops NaN)
    lines = []
    lines.append(f"  event {event_us:6.2f}  span {span:6.2f}  event-span {event_us - span:5.2f}   CTAs {C} (busy "
                 f"{len(busy)})  timer step >= {res} ns, SM clock {statistics.median(f('ghz')):.2f} GHz")
    e = f("entry", rows)
    lines.append(f"  entry skew p50 {pct(e, .5):5.2f} p90 {pct(e, .9):5.2f} max {max(e):5.2f}")
    # By block index (launch order): entry and first data of the first and last eighth of the CTAs,
    # and each eighth's median stream time (a head-major plan's head h sits in one eighth when its
    # bins run in CTA order).
    k8 = max(1, C // 8)
    eighths = [rows[i * k8:(i + 1) * k8] for i in range(8)]
    lines.append("  by block index, eighths: entry " + " ".join(f"{mean(f('entry', g)):5.2f}" for g in eighths)
                 + " | first data " + " ".join(f"{mean(f('data', g)):5.2f}" for g in eighths)
                 + " | stream p50 " + " ".join(f"{pct(f('stream', g), .5):6.2f}" for g in eighths))
    lines.append(f"  start  pdl {statistics.median(f('pdl')):5.2f}  bin {statistics.median(f('bin')):5.2f}  "
                 f"issue {statistics.median(f('issue')):5.2f}  land {statistics.median(f('land')):5.2f}   "
                 f"first data p10 {pct(f('data'), .1):5.2f} p50 {pct(f('data'), .5):5.2f} max {max(f('data')):5.2f}")
    prod = [r for r in a if r[PROD_START] and r[PROD_EMPTY] and r[ISSUE]]  # TMA producer's steps, from kTlBin
    if prod:
        med = lambda k: statistics.median((r[k] - r[BIN]) / 1e3 for r in prod)  # noqa: E731
        lines.append(f"  producer from bin: start {med(PROD_START):+5.2f}  tables {med(PROD_TABLES):+5.2f}  "
                     f"empty passed {med(PROD_EMPTY):+5.2f}  issued {med(ISSUE):+5.2f}")
    ends = [r for r in a if r[LAST] and r[END_MERGED] and r[END_RING] and r[CEND]]  # the last task's end, by step
    if ends:
        med = lambda k: statistics.median((r[k] - r[LAST]) / 1e3 for r in ends)  # noqa: E731
        scalars = f"row scalars {med(END_ROW_SCALARS):+5.2f}  " if all(r[END_ROW_SCALARS] for r in ends) else ""
        lines.append(f"  end from last tile: merged {med(END_MERGED):+5.2f}  {scalars}stored {med(END_STORED):+5.2f}  "
                     f"handed {med(END_HANDED):+5.2f}  next bin {med(END_RING):+5.2f}  exit {med(CEND):+5.2f}")
    # The helpers' last merge that merged, by step (us after its descriptor was taken): one-level merges and the
    # level-2 merges apart; the latest-ending one of each kind in full.
    for kind, sel in (("one-level", lambda r: r[M_ARRIVED2] == 0 and r[M_PARTS] <= 16),
                      ("level-1 only", lambda r: r[M_ARRIVED2] == 0 and r[M_PARTS] > 16),
                      ("two-level", lambda r: r[M_ARRIVED2] != 0)):
        ms = [r for r in a if r[M_END] and r[M_DESC] and sel(r)]
        if not ms:
            continue
        med = lambda k: statistics.median((r[k] - r[M_DESC]) / 1e3 for r in ms)  # noqa: E731
        late = max(ms, key=lambda r: r[M_END])
        step = lambda r, k: (r[k] - r[M_DESC]) / 1e3 if r[k] else float("nan")  # noqa: E731
        lines.append(f"  merge steps, {kind} (n {len(ms)}, P {min(r[M_PARTS] for r in ms)}..{max(r[M_PARTS] for r in ms)}"
                     f", need {min(r[M_NEED] for r in ms)}..{max(r[M_NEED] for r in ms)}): p50 arrived "
                     f"{med(M_ARRIVED):+5.2f} pass merged {med(M_LOADED):+5.2f} stored {med(M_STORED):+5.2f} "
                     f"end {med(M_END):+5.2f}; latest (desc at {us(late[M_DESC]):5.2f}): arrived "
                     f"{step(late, M_ARRIVED):+5.2f} merged {step(late, M_LOADED):+5.2f} stored "
                     f"{step(late, M_STORED):+5.2f} level-2 arrived {step(late, M_ARRIVED2):+5.2f} "
                     + (f"level-2 merged {step(late, M_L2_MERGED):+5.2f} " if late[M_L2_MERGED] else "")
                     + f"end {step(late, M_END):+5.2f}")
    per_tile = [x["stream"] / max(1, x["tiles"] - 1) for x in busy if x["tiles"] > 1]
    gbs = [x["tiles"] * tile_bytes / (x["stream"] * 1e3) for x in busy if x["tiles"] > 1 and x["stream"] > 0]
    tl = f("tiles")
    lines.append(f"  stream p10 {pct(f('stream'), .1):5.2f} p50 {pct(f('stream'), .5):5.2f} p90 {pct(f('stream'), .9):5.2f}"
                 f"  tiles {min(tl)}..{max(tl)}  us/tile p10 {pct(per_tile, .1):.3f} p50 {pct(per_tile, .5):.3f} "
                 f"p90 {pct(per_tile, .9):.3f}  per-CTA GB/s p50 {pct(gbs, .5):.1f} (x{len(busy)} = "
                 f"{pct(gbs, .5) * len(busy) / 1e3:.2f} TB/s)")
    ex = f("exit", rows)
    lines.append(f"  end    last tile -> consumer exit p50 {pct(f('end'), .5):5.2f} max {max(f('end')):5.2f};  exit p10 "
                 f"{pct(ex, .1):5.2f} p50 {pct(ex, .5):5.2f} p90 {pct(ex, .9):5.2f} max {max(ex):5.2f}")
    m = f("merge", rows)
    merged = [x for x in rows if x["merges"] > 0]
    with_split = [x["exit"] for x in busy if x["splits"] > 0]
    no_split = [x["exit"] for x in busy if x["splits"] == 0]
    lng = [x["exit"] for x in busy if x["long"]]
    oth = [x["exit"] for x in busy if not x["long"]]
    consumer_merges = sum(r[COUNTS] for r in a)
    lines.append(f"  peek   consumer merges {consumer_merges}, of them arrivals skipped by the arrival peek "
                 f"{sum(r[PEEKS] for r in a)}")
    lines.append(f"  merge  per CTA p50 {pct(m, .5):5.2f} max {max(m):5.2f} us; CTAs that merged {len(merged)}; "
                 f"exit mean: split parts {mean(with_split):5.2f} (n {len(with_split)}) / none {mean(no_split):5.2f}; "
                 f"longest item's CTAs {mean(lng):5.2f} (n {len(lng)}) / others {mean(oth):5.2f}")
    # What explains a late exit: late start, slow stream, or a long end?
    dstart = [x["data"] for x in busy]
    xs = [x["exit"] for x in busy]

    def corr(u, w):
        mu, mw = mean(u), mean(w)
        su = sum((p - mu) ** 2 for p in u) ** .5
        sw = sum((p - mw) ** 2 for p in w) ** .5
        return sum((p - mu) * (q - mw) for p, q in zip(u, w)) / (su * sw) if su and sw else float("nan")

    lines.append(f"  corr(exit, first data) {corr(xs, dstart):+.2f}  corr(exit, stream) "
                 f"{corr(xs, [x['stream'] for x in busy]):+.2f}  corr(exit, tiles) {corr(xs, [x['tiles'] for x in busy]):+.2f}"
                 f"  corr(exit, merge) {corr(xs, [x['merge'] for x in busy]):+.2f}")
    lines.append("  late: cta sm tiles tasks splits merges long | entry data stream end(last->cexit) merge exit")
    for x in sorted(rows, key=lambda x: -x["exit"])[:6]:
        lines.append(f"    {x['c']:4d} {x['sm']:3d} {x['tiles']:3d} {x['tasks']:3d} {x['splits']:2d} {x['merges']:2d} "
                     f"{int(x['long'])} | {x['entry']:5.2f} {x['data']:5.2f} {x['stream']:6.2f} {x['end']:5.2f} "
                     f"{x['merge']:5.2f} {x['exit']:6.2f}")
    return span, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default=",".join(bench.CASES))
    ap.add_argument("--kv", default="bf16,fp8")
    ap.add_argument("--heads", default="8/1")
    ap.add_argument("--variants", default="default,first_page_off,tma_helpers,stream_only")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    hq, hkv = (int(x) for x in args.heads.split("/"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    print(f"defaults: USE_TMA_PRODUCER={heuristics.USE_TMA_PRODUCER} MERGE_IN_DECODE={heuristics.MERGE_IN_DECODE} "
          f"MERGE_ON_HELPER_WARPS={heuristics.MERGE_ON_HELPER_WARPS} TAIL_PERCENT={heuristics.TAIL_PERCENT}")
    for kv in args.kv.split(","):
        for case in args.cases.split(","):
            lens = bench.parse_case(case)
            inputs = bench.make_inputs(lens, hq, hkv, kv, gen)
            for variant in args.variants.split(","):
                producer, tables, runs, bins = run(case, kv, variant, inputs, args.reps)
                done = sorted((analyse(tables, ev, a, kv, bins) + (ev,) for ev, a in runs), key=lambda t: t[0])
                span, lines, ev = done[len(done) // 2]
                spans = [d[0] for d in done]
                print(f"== {case} {hq}/{hkv} {kv} {variant} ({producer}); spans over {len(runs)} replays "
                      f"{min(spans):.2f}..{max(spans):.2f}, events {min(d[2] for d in done):.2f}.."
                      f"{max(d[2] for d in done):.2f}", flush=True)
                print("\n".join(lines), flush=True)
            del inputs
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
