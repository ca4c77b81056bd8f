"""Per-warp timeline of the decode planner at batch 256: which step of the one-CTA plan costs.

The `ours_plan` case of the benchmark (benchmarks/bench_decode_attention.py, bench_plan_256: 256
requests of 4096 tokens, every 7th of 100, no page table) at 8/1 and 64/8 heads, run under the
benchmark's conditions: one CUDA graph of [stamps zeroed, 128 MB L2 flush, event, plan, event],
replayed `--reps` times; the replay with the median event time is printed. The planner's
diagnostics build writes per-warp %globaltimer stamps (decode_plan_timeline.cuh) into
paged_decode.DIAG["plan_timeline"]. Printed per case (us from the earliest warp entry; per step
the median over warps, and the max where the last warp sets the kernel's end):
  event   the in-graph event pair (what bench_us reports); span = first entry -> last fenced stamp
  steps   entry -> after griddepcontrol.wait -> KV lengths loaded -> scan 1 -> scan 2 -> stores issued
          -> stores fenced (visible)
  clock   SM clock from clock64 over the warp's entry -> stores issued
Also times the library build's plan (bench_us) beside it: the stamps' own cost is the difference.
Variant `warm_code`: the same plan from a second workspace and a copy of the lengths runs between
the flush and the timed plan, so the timed plan finds its code (not its data) in the L2: the step
times that shrink are instruction fetch.

    python3 packages/hpc-attention/scripts/timeline_plan.py [--reps 21] [--heads 8/1,64/8] [--flush write]
        [--variants cold,warm_code]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import hpc_attention as ha
import torch
from hpc_attention import paged_decode as pd
from hpc_common.bench import dump_doc, timing
from hpc_common.bench.timing import bench_us

SLOTS, WARPS, MAX_CTAS = 16, 16, 16
STEPS = ("entry", "pdl", "lens", "scan1", "scan2", "written", "fenced")
CLK0, CLK1, SMID = 7, 8, 9


def make_case(hkv: int):
    kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
    kv_lens[::7] = 100
    ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)
    return kv_lens, ws


def run(hkv: int, reps: int, flush: str, warm_code: bool = False):
    kv_lens, ws = make_case(hkv)
    kv_lens2, ws2 = make_case(hkv)  # the code warm-up's own inputs: only the kernel's code is shared
    dev = kv_lens.device
    tl = torch.zeros(MAX_CTAS * WARPS * SLOTS, dtype=torch.int64, device=dev)

    def plan():
        ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)

    ref_plan = bench_us(plan, reps=reps)  # the library build, same method
    plan()
    ref_tables = ws.tasks.clone(), ws.bin_start.clone(), ws.counters.clone()
    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    pd.DIAG["plan_timeline"] = tl
    try:
        with torch.cuda.stream(stream):
            plan()  # builds / loads the diagnostics extension outside the capture
            stream.synchronize()
            same = all(torch.equal(a, b) for a, b in zip(ref_tables, (ws.tasks, ws.bin_start, ws.counters), strict=True))
            timing.empty_l2(dev, flush)
            stream.synchronize()

            def pre():
                tl.zero_()
                timing.empty_l2(dev, flush)
                if warm_code:  # its stamps are overwritten by the timed plan's
                    ha.plan_decode(kv_lens2, hkv, 8 * hkv, workspace=ws2, validate=False)

            runs = timing.replay_in_graph(plan, reps, stream, pre=pre,
                                          each=lambda: tl.view(MAX_CTAS * WARPS, SLOTS).cpu().tolist())
        torch.cuda.current_stream(dev).wait_stream(stream)
    finally:
        pd.DIAG["plan_timeline"] = None
    runs.sort(key=lambda r: r[0])
    event_us, rows = runs[len(runs) // 2]
    return ref_plan, same, event_us, [r for r in rows if r[0]], [r[0] for r in runs]


def analyse(event_us: float, rows: list[list[int]]) -> dict:
    t0 = min(r[0] for r in rows)
    steps = {}
    for i, name in enumerate(STEPS):
        xs = [(r[i] - t0) / 1e3 for r in rows if r[i]]
        if xs:
            steps[name] = dict(p50=statistics.median(xs), max=max(xs), n=len(xs))
    end = max((r[6] for r in rows if r[6]), default=t0)
    ghz = [(r[CLK1] - r[CLK0]) / max(1, r[5] - r[0]) for r in rows if r[5]]
    return dict(event_us=event_us, span_us=(end - t0) / 1e3, steps=steps, warps=len(rows),
                ctas=len({r[SMID] for r in rows}), ghz=statistics.median(ghz) if ghz else float("nan"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=21)
    ap.add_argument("--heads", default="8/1,64/8")
    ap.add_argument("--flush", default="write", choices=("write", "read"))
    ap.add_argument("--variants", default="cold", help="comma list of cold, warm_code")
    ap.add_argument("--json", default=None, help="write the summaries here")
    args = ap.parse_args()
    out = []
    for h, variant in ((h, v) for h in args.heads.split(",") for v in args.variants.split(",")):
        hq, hkv = (int(x) for x in h.split("/"))
        assert hq == 8 * hkv, "the benchmark's plan case has G = 8"
        ref_plan, same, event_us, rows, events = run(hkv, args.reps, args.flush, variant == "warm_code")
        a = analyse(event_us, rows)
        a.update(heads=h, variant=variant, library_plan_us=ref_plan, same_tables=same, events_sorted=events)
        out.append(a)
        print(f"{h} {variant}: library plan {ref_plan:.2f} us; diag build: event {event_us:.2f} us, span {a['span_us']:.2f}, "
              f"event - span {event_us - a['span_us']:.2f}; {a['warps']} warps on {a['ctas']} SMs, "
              f"{a['ghz']:.2f} GHz; tables equal to the library build's: {same}")
        prev = 0.0
        for name in STEPS:
            s = a["steps"].get(name)
            if s is None:
                continue
            print(f"  {name:>8}: p50 {s['p50']:6.3f}  max {s['max']:6.3f}  (+{s['p50'] - prev:6.3f} p50)")
            prev = s["p50"]
    if args.json:
        Path(args.json).write_text(dump_doc(out))


if __name__ == "__main__":
    main()
