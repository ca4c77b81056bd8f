"""Does where the planner's buffers lie change its time? (twenty-second session: `bench_decode_attention.py
--plan-only 8` read the 8/1 batch-256 plan at 4.86 us in its first repeat and 5.22-5.38 in the seven after,
in one process, clocks at 1980 MHz throughout.)

Times `ours_plan` (8/1, batch 256, the benchmark's lengths) with the benchmark's bench_us, N times each:
  same     one kv_lens and one workspace, timed N times
  fresh    a new kv_lens and workspace per timing, after a few MB of unrelated allocations
With --other-first, one bench_us of an unrelated op (a 1-element add) comes first: is the first timing of
a process special, or the plan's first timing?
With --prealloc-flush, hpc_common.bench's 128 MB flush buffer is allocated (and written once) before the first
timing; with --realloc-flush, it is freed (and the caching allocator emptied) before every timing, so each
timing allocates it anew, as only the first timing of a process does otherwise: is the low first timing the
fresh flush buffer's? (Refuted in the twenty-fourth session.)
With --keep-graphs K, K unrelated CUDA graphs (a 1-element add each) are captured and kept alive before the first
timing; with --flush-mb M, bench_us flushes with an M MB buffer instead of 128 MB (M >= 64: still larger than
the L2). The next hypothesis (NOTES.md, twenty-fourth session): the graph's parameter memory and the flush's
reach in the GPU's address translation.
and prints, per timing, the 2 MB pages (data_ptr >> 21) the lengths and the six tables lie in.

    PYTHONPATH=packages/hpc-common/src:packages/hpc-attention/src python3 packages/hpc-attention/scripts/plan_placement.py
"""

from __future__ import annotations

import json

import torch
from hpc_common.bench import bench_us

import hpc_attention as ha


def buffers(B: int = 256):
    kv_lens = torch.full((B,), 4096, dtype=torch.int32, device="cuda")
    kv_lens[::7] = 100
    ws = ha.DecodeWorkspace(B, 1, 8, 4096)
    return kv_lens, ws


def pages(kv_lens, ws) -> list[int]:
    tabs = (kv_lens, ws.tasks, ws.bin_start, ws.bin_first, ws.combine, ws.counters, ws.slot_meta)
    return [t.data_ptr() >> 21 for t in tabs]


def time_plan(kv_lens, ws) -> float:
    return bench_us(lambda: ha.plan_decode(kv_lens, 1, 8, workspace=ws, validate=False), reps=100)


def drop_flush_buffer() -> None:
    from hpc_common.bench import timing

    timing._flush_buf.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def keep_graphs(k: int) -> list:
    x = torch.ones(1, device="cuda")
    graphs = []
    for _ in range(k):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            x.add_(1)
        g.replay()
        graphs.append(g)
    torch.cuda.synchronize()
    return graphs


def main(n: int = 6, other_first: bool = False, prealloc_flush: bool = False, realloc_flush: bool = False) -> None:
    if prealloc_flush:
        from hpc_common.bench import empty_l2

        empty_l2(torch.device("cuda", torch.cuda.current_device()))
        torch.cuda.synchronize()
    if realloc_flush:
        kv_lens, ws = buffers()
        for i in range(n):
            drop_flush_buffer()
            print(json.dumps({"case": "realloc_flush", "i": i, "median_us": round(time_plan(kv_lens, ws), 3)}),
                  flush=True)
        return
    if other_first:
        x = torch.ones(1, device="cuda")
        print(json.dumps({"case": "other_op_first", "median_us": round(bench_us(lambda: x.add_(1)), 3)}), flush=True)
    kv_lens, ws = buffers()
    for i in range(n):
        print(json.dumps({"case": "same", "i": i, "median_us": round(time_plan(kv_lens, ws), 3),
                          "pages_2mb": pages(kv_lens, ws)}), flush=True)
    keep = []
    for i in range(n):
        keep.append(torch.empty((i + 1) << 20, dtype=torch.uint8, device="cuda"))  # shift the next allocations
        kv_lens, ws = buffers()
        print(json.dumps({"case": "fresh", "i": i, "median_us": round(time_plan(kv_lens, ws), 3),
                          "pages_2mb": pages(kv_lens, ws)}), flush=True)


if __name__ == "__main__":
    import sys

    args = sys.argv[1:]

    def value(flag: str, default: int) -> int:
        return int(args[args.index(flag) + 1]) if flag in args else default

    if "--flush-mb" in args:
        from hpc_common.bench import timing

        timing.FLUSH_BYTES = value("--flush-mb", 128) << 20
    kept = keep_graphs(value("--keep-graphs", 0))
    main(other_first="--other-first" in args, prealloc_flush="--prealloc-flush" in args,
         realloc_flush="--realloc-flush" in args)
