"""Per-CTA timeline of the router GEMM's BF16x2 wgmma kernel at large M: where the ~7 us of fixed
in-kernel cost at M=4096, K=4096, N=192 goes (NOTES.md, "M = 4096").

Each case runs under the benchmark's conditions (benchmarks/bench_router_gemm.py, hpc_common.bench:
x ~ N(0, 1) BF16, W ~ 0.02 N(0, 1) FP32 in a RouterWeight; one CUDA graph of [timeline zeroed,
128 MB written L2 flush, event, call, event], replayed `--reps` times; the replay with the median
kernel span is printed). The call is the library's (`router_gemm`, the table's plan) for
`default`, else `launch` with a forced plan. The kernel writes per CTA %globaltimer stamps
(router_timeline.cuh) into router_gemm.DIAG["timeline"], which selects the HPC_ROUTER_TIMELINE=1
build of the extension. Printed per case (us; "at" = relative to the earliest CTA entry, the
other figures are per-CTA differences of the slots named in brackets):
  event     the in-graph event pair of the timeline build (what bench_us reports), and of the
            library build (same graph without the stamps: their cost)
  span      earliest CTA entry -> latest CTA exit [9]; event - span = launch / method, outside
  entry     CTA entry skew, at p50 / max
  start     setup [1-0] p50, first TMA issued [2-0] p50, first data [5-0] p50 / p90 / max
  loop      main loop [6-5] p10 / p50 / p90, us per K block; loop end [6] at p10 / p50 / p90 / max;
            WG1's loop end after WG0's [14-6]; producer's last load landed [4] at p50 / max
  reduce    reduction wait [8-7] p50 / max (the first cluster barrier, or the first workspace
            arrival), epilogue [9-6] p50 / max
  exit      [9] at p50 / p90 / max
  late      the 6 CTAs that exit last: smid, K blocks, and their phases
  clock     SM clock from clock64 over %globaltimer [(13-12) / (9-0)]
and once per case whether the timeline build's output equals the library build's bitwise.

    PYTHONPATH=packages/hpc-common/src:packages/hpc-router-gemm/src python3 \\
        packages/hpc-router-gemm/scripts/timeline_large_m.py [--shapes generic:1024/4096] [--m 4096]
        [--paths default,wide96f_s1,wide96f_s4] [--reps 7] [--json PATH]
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import statistics
from pathlib import Path

import torch
from hpc_common.bench import dump_doc, timing
from hpc_router_gemm import RouterWeight, plan_for, router_gemm
from hpc_router_gemm.heuristics import Plan, bf16x2_tiles
from hpc_router_gemm.router_gemm import DIAG, TIMELINE_SLOTS, launch

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("bench_router_gemm", ROOT / "benchmarks/bench_router_gemm.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

(ENTRY, SETUP, ISSUE0, ISSUE_LAST, LANDED_LAST, DATA, LOOP_END, RED_START, RED_GO, EXIT, SMID, BLOCKS, CLK0, CLK1,
 LOOP_END_WG1, SPARE) = range(TIMELINE_SLOTS)
TIME_SLOTS = (ENTRY, SETUP, ISSUE0, ISSUE_LAST, LANDED_LAST, DATA, LOOP_END, RED_START, RED_GO, EXIT, LOOP_END_WG1)
WARMUP = 5  # calls on the capture stream before the graph, as bench_us (and the workspace is made there)
_QNAME = {0: "min", 1: "max"}


SLOT_NAMES = ["entry", "setup", "first_issue", "last_issue", "last_landed", "first_data", "loop_end", "reduce_start",
              "reduce_go", "exit", "smid", "k_blocks", "clock_entry", "clock_exit", "loop_end_wg1", "spare"]


def _no_nan(v):
    """NaN (a slot a CTA never stamped) as null, so the file is strict JSON."""
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, dict):
        return {k: _no_nan(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_no_nan(x) for x in v]
    return v


def pct(xs, q):
    xs = sorted(x for x in xs if x == x)
    return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))] if xs else float("nan")


def parse_plan(spec: str, M: int, N: int, K: int, dev) -> Plan | None:
    """`default` (None: the library's call and plan), `<path>` (its split from the rules) or a
    benchmark row name `<path>_s<S>[_ef]`."""
    if spec == "default":
        return None
    m = re.fullmatch(r"(.+)_s(\d+)(_ef)?", spec)
    if m:
        return Plan(m.group(1), int(m.group(2)), evict_first=m.group(3) is not None)
    return plan_for(M, N, K, dev, path=spec)


def run_case(x, rw, plan: Plan | None, reps: int, flush: bool = True):
    """(chosen plan, CTAs, [(event us, stamps [CTA][slot])] per replay, library-build event us per
    replay, timeline output == library output). flush=False: no L2 flush before the call, so x and
    the split weight stay L2-resident from the previous replay (--warm)."""
    M, K = x.shape
    N = rw.weight.shape[0]
    dev = x.device
    chosen = plan or plan_for(M, N, K, dev)
    if chosen.tile is None:
        raise SystemExit(f"{chosen.name}: not a BF16x2 wgmma plan (only those record a timeline)")
    ctas = bf16x2_tiles(chosen.tile, M, N, chosen.multicast) * chosen.splits
    tl = torch.zeros(ctas * TIMELINE_SLOTS, dtype=torch.int64, device=dev)
    out = torch.empty(M, N, device=dev)
    ref = torch.empty(M, N, device=dev)

    def call(dst):
        if plan is None:
            router_gemm(x, rw, out=dst)  # as the benchmark's "ours" row
        else:
            launch(x, rw, dst, plan)  # as its sweep rows

    stream = torch.cuda.Stream(dev)  # capture needs a side stream (as in bench_us)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        # The library build first: the reference bits and the event time without stamps.
        for _ in range(WARMUP):
            call(ref)
        timing.empty_l2(dev)  # allocates the flush buffer outside the capture
        stream.synchronize()
        lib = [t for t, _ in timing.replay_in_graph(lambda: call(ref), reps, stream,
                                                    pre=(lambda: timing.empty_l2(dev)) if flush else None)]
        DIAG["timeline"] = tl
        try:
            for _ in range(WARMUP):
                call(out)
            stream.synchronize()

            def pre():
                tl.zero_()
                if flush:
                    timing.empty_l2(dev)

            runs = timing.replay_in_graph(lambda: call(out), reps, stream, pre=pre,
                                          each=lambda: tl.view(ctas, TIMELINE_SLOTS).cpu().tolist())
        finally:
            DIAG["timeline"] = None
        stream.synchronize()
    torch.cuda.current_stream(dev).wait_stream(stream)
    return chosen, ctas, runs, lib, bool(torch.equal(out, ref))


def analyse(rows: list[list[int]], event_us: float) -> dict:
    """Summary of one replay's stamps (see the module docstring)."""
    nan = float("nan")
    t0 = min(r[ENTRY] for r in rows if r[ENTRY])

    def at(r, s):  # us after the earliest entry; NaN where the CTA never stamped the slot
        return (r[s] - t0) / 1e3 if r[s] else nan

    def dt(r, a, b):  # us from slot b to slot a of one CTA
        return (r[a] - r[b]) / 1e3 if r[a] and r[b] else nan

    ctas = []
    for c, r in enumerate(rows):
        loop = dt(r, LOOP_END, DATA)
        ctas.append(dict(
            cta=c, sm=r[SMID], nk=r[BLOCKS], entry=at(r, ENTRY), setup=dt(r, SETUP, ENTRY), issue=dt(r, ISSUE0, ENTRY),
            data=dt(r, DATA, ENTRY), data_at=at(r, DATA), loop=loop, per_block=loop / r[BLOCKS] if r[BLOCKS] else nan,
            loop_end=at(r, LOOP_END), wg1_lag=dt(r, LOOP_END_WG1, LOOP_END), landed=at(r, LANDED_LAST),
            red_wait=dt(r, RED_GO, RED_START), epilogue=dt(r, EXIT, LOOP_END), exit=at(r, EXIT),
            ghz=(r[CLK1] - r[CLK0]) / (r[EXIT] - r[ENTRY]) if r[EXIT] > r[ENTRY] and r[CLK0] else nan))
    col = lambda k: [x[k] for x in ctas]  # noqa: E731
    q = lambda k, *ps: {_QNAME.get(p, f"p{round(p * 100)}"): pct(col(k), p) for p in ps}  # noqa: E731
    span = max(x for x in col("exit") if x == x)
    # The %globaltimer's update step as seen here: differences below it read as 0.
    stamps = sorted({r[s] for r in rows for s in TIME_SLOTS if r[s]})
    step = min((b - a for a, b in zip(stamps, stamps[1:], strict=False)), default=0)
    return dict(
        event_us=event_us, span_us=span, ctas=len(rows), timer_step_ns=step,
        entry=q("entry", .5, 1), setup=q("setup", .5), first_issue=q("issue", .5), first_data=q("data", .5, .9, 1),
        first_data_at=q("data_at", .5, 1), main_loop=q("loop", .1, .5, .9), us_per_block=q("per_block", .1, .5, .9),
        loop_end_at=q("loop_end", .1, .5, .9, 1), wg1_lag=q("wg1_lag", .5, 1), last_landed_at=q("landed", .5, 1),
        reduction_wait=q("red_wait", .5, 1), epilogue=q("epilogue", .5, 1), exit_at=q("exit", .5, .9, 1),
        clock_ghz=q("ghz", 0, .5, 1), nk=sorted(set(col("nk"))),
        late=sorted(ctas, key=lambda x: -x["exit"] if x["exit"] == x["exit"] else 0)[:6])


def report(s: dict, lib_us: float) -> list[str]:
    f = lambda d, fmt="6.2f": " ".join(f"{k} {v:{fmt}}" for k, v in d.items())  # noqa: E731
    return [
        f"  event {s['event_us']:6.2f} (library build {lib_us:6.2f})  span {s['span_us']:6.2f}  "
        f"event-span {s['event_us'] - s['span_us']:5.2f}   CTAs {s['ctas']}, K blocks per CTA {s['nk']}, timer step "
        f">= {s['timer_step_ns']} ns",
        f"  entry skew  {f(s['entry'])}",
        f"  start       setup [1-0] {f(s['setup'])} | first TMA issued [2-0] {f(s['first_issue'])} | first data "
        f"[5-0] {f(s['first_data'])} | at {f(s['first_data_at'])}",
        f"  main loop   [6-5] {f(s['main_loop'])} | us per K block {f(s['us_per_block'], '.3f')}",
        f"  loop end    at {f(s['loop_end_at'])} | WG1 after WG0 [14-6] {f(s['wg1_lag'])} | producer's last load "
        f"landed [4] at {f(s['last_landed_at'])}",
        f"  reduction   wait [8-7] {f(s['reduction_wait'])} | epilogue [9-6] {f(s['epilogue'])}",
        f"  exit        at {f(s['exit_at'])}",
        f"  clock       {f(s['clock_ghz'], '.3f')} GHz (clock64 / globaltimer, per CTA entry -> exit)",
        "  late: cta  sm  nk | entry setup  data(at) loop(6-5) loop_end wait(8-7) epi(9-6)   exit",
        *(f"    {x['cta']:4d} {x['sm']:3d} {x['nk']:3d} | {x['entry']:5.2f} {x['setup']:5.2f} {x['data_at']:9.2f} "
          f"{x['loop']:9.2f} {x['loop_end']:8.2f} {x['red_wait']:9.2f} {x['epilogue']:8.2f} {x['exit']:6.2f}"
          for x in s["late"]),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="generic:1024/4096",
                    help=f"comma-separated name:M1/M2 ({', '.join(bench.SHAPES)}: (K, N) as the benchmark)")
    ap.add_argument("--m", type=lambda v: tuple(int(m) for m in v.split(",")), default=None,
                    help="comma-separated M values for every shape (instead of the --shapes lists)")
    ap.add_argument("--paths", default="default",
                    help="comma-separated plans: default (the table's), <path> or <path>_s<S>[_ef], e.g. wide96f_s1")
    ap.add_argument("--defines", default="",
                    help="semicolon-separated -D switch sets to compare in this process (empty = the library's "
                         "build), e.g. ';-DHPC_ROUTER_FIRST_STAGES=2'")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--warm", action="store_true",
                    help="no L2 flush before each call: x and the split weight stay L2-resident (separates the "
                         "main loop's DRAM supply from its in-SM cost)")
    ap.add_argument("--json", type=Path, default=None, help="write the per-case summaries here")
    args = ap.parse_args()
    dev = torch.device("cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)
    summaries = []
    for item in args.shapes.split(","):
        name, _, ms_text = item.partition(":")
        K, N, _ = bench.SHAPES[name]
        ms = args.m or tuple(int(m) for m in ms_text.split("/"))
        w = torch.randn(N, K, device=dev, generator=gen) * 0.02
        rw = RouterWeight(w)
        for M in ms:
            x = torch.randn(M, K, device=dev, generator=gen).to(torch.bfloat16)
            for spec, defines in ((p, d) for p in args.paths.split(",") for d in args.defines.split(";")):
                DIAG["defines"] = tuple(d for d in defines.split() if d)
                try:
                    plan, ctas, runs, lib, same = run_case(x, rw, parse_plan(spec, M, N, K, dev), args.reps,
                                                            flush=not args.warm)
                finally:
                    DIAG["defines"] = ()
                spec = f"{spec} {defines}{' warm' if args.warm else ''}".strip()
                done = sorted(((analyse(rows, ev), rows) for ev, rows in runs), key=lambda d: d[0]["span_us"])
                s, stamps = done[len(done) // 2]
                done = [d for d, _ in done]
                spans, events = [d["span_us"] for d in done], [d["event_us"] for d in done]
                print(f"== {name} M={M} K={K} N={N} {spec}: {plan.name} ({ctas} CTAs); {len(runs)} replays: span "
                      f"{min(spans):.2f}..{max(spans):.2f}, event {min(events):.2f}..{max(events):.2f}, library "
                      f"build event p50 {statistics.median(lib):.2f}; output bitwise equal to the library build: "
                      f"{same}", flush=True)
                print("\n".join(report(s, statistics.median(lib))), flush=True)
                summaries.append(dict(shape=name, M=M, K=K, N=N, spec=spec, plan=plan.name, bitwise_equal=same,
                                      library_event_us=lib, spans_us=spans, events_us=events, median_replay=s,
                                      stamps=stamps))
            del x
        torch.cuda.empty_cache()
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = dict(device=torch.cuda.get_device_name(), reps=args.reps, slots=SLOT_NAMES, cases=summaries)
        args.json.write_text(dump_doc(_no_nan(doc)))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
