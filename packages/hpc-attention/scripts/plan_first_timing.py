"""Why does the first timing of the planner in a process read 0.3-0.5 us low? (twenty-second session,
NOTES.md; plan_placement.py ruled out the buffers' placement.) Per graph, [flush, event, plan, event] is
captured once and replayed in two batches of 100 (medians A1, A2); three graphs in a row (G1, G2, G3), then
G1 replayed again. If only G1 reads low in both batches and again at the end, the graph itself (e.g. where
its kernel parameters were put) makes the difference; if G1's first batch alone reads low, it is the
process's first moments. Result (twenty-third session, H200, benchmarks/results/h200/attention_plan_first_timing.*): every graph
and batch read 5.09-5.25 us, the first graph no lower; one graph per stream (--streams) read alike on
six streams. Neither the graph nor the stream decides; bench_us's per-call setup remains the suspect.

    PYTHONPATH=packages/hpc-common/src:packages/hpc-attention/src python3 packages/hpc-attention/scripts/plan_first_timing.py [--streams]
"""

from __future__ import annotations

import json
import statistics

import torch
from hpc_common.bench import empty_l2

import hpc_attention as ha
from plan_placement import buffers  # this folder: the benchmark's batch-256 case


def capture(fn, stream):
    start = torch.cuda.Event(enable_timing=True, external=True)
    end = torch.cuda.Event(enable_timing=True, external=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        empty_l2(stream.device)
        start.record(stream)
        fn()
        end.record(stream)
    return graph, start, end


def batch(g, reps: int = 100) -> float:
    graph, start, end = g
    t = []
    for _ in range(reps):
        graph.replay()
        end.synchronize()
        t.append(start.elapsed_time(end) * 1e3)
    return round(statistics.median(t), 3)


def main() -> None:
    dev = torch.device("cuda")
    kv_lens, ws = buffers()

    def plan():
        ha.plan_decode(kv_lens, 1, 8, workspace=ws, validate=False)

    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        for _ in range(5):
            plan()
        empty_l2(dev)
        stream.synchronize()
        graphs = [capture(plan, stream) for _ in range(3)]
        for i, g in enumerate(graphs):
            print(json.dumps({"case": f"G{i + 1}", "batch1_us": batch(g), "batch2_us": batch(g)}), flush=True)
        print(json.dumps({"case": "G1_again", "batch1_us": batch(graphs[0]), "batch2_us": batch(graphs[0])}),
              flush=True)


def main_streams(n: int = 6) -> None:
    """--streams: does the stream a graph is replayed on decide? bench_us takes a new stream from torch's pool
    per call, and plan_placement.py's timings moved in ~0.22 us steps from call to call, where main()'s
    graphs on one stream read alike. One graph per stream on n streams, each replayed in two batches, then
    the same graphs again in reverse order: if a stream's numbers repeat and differ from the others', the
    stream decides."""
    dev = torch.device("cuda")
    kv_lens, ws = buffers()

    def plan():
        ha.plan_decode(kv_lens, 1, 8, workspace=ws, validate=False)

    for _ in range(5):
        plan()
    empty_l2(dev)
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream(dev) for _ in range(n)]
    graphs = []
    for s in streams:
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s):
            graphs.append(capture(plan, s))
        s.synchronize()
    for rnd, order in enumerate((range(n), reversed(range(n)))):
        for i in order:
            with torch.cuda.stream(streams[i]):
                a, b = batch(graphs[i]), batch(graphs[i])
            print(json.dumps({"case": f"S{i}", "round": rnd, "stream_id": streams[i].stream_id,
                              "batch1_us": a, "batch2_us": b}), flush=True)


if __name__ == "__main__":
    import sys

    if "--streams" in sys.argv[1:]:
        main_streams()
    else:
        main()
