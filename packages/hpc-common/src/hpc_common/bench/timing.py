"""Timing harness: CUDA-graph replay of the whole call, L2 emptied before each replay,
CUDA events around the replay alone, median of many (the method of BRIEF.md section 3)."""

from __future__ import annotations

import statistics
from typing import Callable

import torch

# Measured device-to-device copy bandwidth of an H200 (bytes read + written), BRIEF.md.
COPY_BANDWIDTH_TBPS = 4.27


def floor_us(nbytes: float, flops: float = 0.0, tflops: float = 750.0) -> float:
    """max(bytes / copy bandwidth, flops / matrix rate) in microseconds."""
    return max(nbytes / (COPY_BANDWIDTH_TBPS * 1e12), flops / (tflops * 1e12)) * 1e6


_flush_buf: dict[torch.device, torch.Tensor] = {}


def _flush_l2(device: torch.device) -> None:
    buf = _flush_buf.get(device)
    if buf is None:
        # Twice the H200's 60 MB L2, so nothing of the timed call's inputs survives.
        buf = _flush_buf[device] = torch.empty(128 << 20, dtype=torch.uint8, device=device)
    buf.bitwise_not_()


def bench_us(fn: Callable[[], object], *, reps: int = 100, warmup: int = 5, flush_l2: bool = True,
             use_graph: bool = True, device: torch.device | None = None) -> float:
    """Median time of `fn()` in microseconds.

    With `use_graph`, `fn` is captured once into a CUDA graph and the replays are timed, so
    launch gaps of multi-kernel calls do not count (as the peers were timed). With
    `flush_l2`, a 128 MB buffer is rewritten before each timed replay so the call starts from
    cold L2; the flush runs outside the event pair.
    """
    device = device or torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
        stream.synchronize()
        run = fn
        if use_graph:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                fn()
            run = graph.replay
            run()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
        for i in range(reps):
            if flush_l2:
                _flush_l2(device)
            starts[i].record(stream)
            run()
            ends[i].record(stream)
        stream.synchronize()
    torch.cuda.current_stream(device).wait_stream(stream)
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
