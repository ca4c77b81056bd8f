"""Timing harness: the two methods every benchmark reports (field `method` of its rows).

- cold (`cold_us`): the whole call captured in a CUDA graph after a 128 MB L2 flush, CUDA events
  around the call inside the graph, median of at least 50 replays. Each call starts from an empty
  L2 and pays the write-back of the flush's dirty lines: the way the peers' tables were taken.
- rotation (`rotation_us`): L calls back to back in one CUDA graph, each reading its own copy of the
  inputs (together at least ROTATION_BYTES, several times the L2), time per call = replay / L, median
  of at least 20 replays: what a decode step sees, each layer's call reading its own cold data
  right after the previous kernel.
"""

from __future__ import annotations

import statistics
import sys
from typing import Callable

import torch

# Measured device-to-device copy bandwidth of an H200 (a 2 GiB device copy, bytes read + written).
COPY_BANDWIDTH_TBPS = 4.27


def floor_us(nbytes: float, flops: float = 0.0, tflops: float = 750.0) -> float:
    """max(bytes / copy bandwidth, flops / matrix rate) in microseconds."""
    return max(nbytes / (COPY_BANDWIDTH_TBPS * 1e12), flops / (tflops * 1e12)) * 1e6


_flush_buf: dict[torch.device, torch.Tensor] = {}
# Bytes of the flush buffer: twice the H200's 60 MB L2 (diagnostics may change it before the first flush,
# e.g. scripts/plan_placement.py --flush-mb; below the L2's size a "flush" would leave inputs resident).
FLUSH_BYTES = 128 << 20


# How the L2 is emptied before each timed call (`flush` of bench_us / empty_l2): "write" rewrites a
# 128 MB buffer (what triton's do_bench does with zero_()), "read" reads it. A written flush leaves up to
# an L2's worth of dirty lines whose write-back lands inside the timed call; a read flush evicts the
# call's inputs just as well and leaves clean lines. Every committed table uses the written flush.
FLUSH_MODES = ("write", "read")


def empty_l2(device: torch.device, mode: str = "write") -> None:
    """Empty the L2 of `device` with a 128 MB buffer (`mode`: "write" / "read", FLUSH_MODES).
    The first call allocates the buffer: make it outside any graph capture."""
    if mode not in FLUSH_MODES:
        raise ValueError(f"empty_l2: mode must be one of {FLUSH_MODES}, got {mode!r}")
    buf = _flush_buf.get(device)
    if buf is None:
        # Twice the H200's 60 MB L2 (FLUSH_BYTES), so nothing of the timed call's inputs survives.
        buf = _flush_buf[device] = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device=device)
    if mode == "read":
        buf.view(torch.int64).max()
    else:
        buf.bitwise_not_()


TIMING_METHOD = ("cold: CUDA graph of [128 MB L2 flush (written), event, call, event] replayed; "
                 "median over replays "
                 "of the in-graph event pair (graph launch overhead excluded)")


def replay_in_graph(fn: Callable[[], object], reps: int, stream: torch.cuda.Stream,
                    pre: Callable[[], object] | None = None) -> list[float]:
    """Capture [pre(), event, fn(), event] into one CUDA graph on `stream` and replay it `reps`
    times; the microseconds between the two in-graph events of each replay. Events inside the graph
    bracket the call alone: the ~4 us a graph launch costs on the device (measured: an empty kernel
    timed around replay() reads 4.0 us) stays out. Raises where in-graph events are unsupported."""
    start = torch.cuda.Event(enable_timing=True, external=True)
    end = torch.cuda.Event(enable_timing=True, external=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        if pre is not None:
            pre()
        start.record(stream)
        fn()
        end.record(stream)
    runs = []
    for _ in range(reps):
        graph.replay()
        end.synchronize()
        runs.append(start.elapsed_time(end) * 1e3)
    return runs


def _bench_in_graph(fn, reps, flush, device, stream, mode: str = "write") -> float:
    pre = (lambda: empty_l2(device, mode)) if flush else None
    return statistics.median(replay_in_graph(fn, reps, stream, pre=pre))


def _bench_around_replay(fn, reps, flush_l2, device, stream, use_graph, mode: str = "write") -> float:
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
            empty_l2(device, mode)
        starts[i].record(stream)
        run()
        ends[i].record(stream)
    stream.synchronize()
    return statistics.median(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))


def bench_us(fn: Callable[[], object], *, reps: int = 100, warmup: int = 5, flush_l2: bool = True,
             use_graph: bool = True, device: torch.device | None = None, flush: str = "write") -> float:
    """Median time of `fn()` in microseconds (see TIMING_METHOD).

    `fn` is captured into a CUDA graph together with a 128 MB L2 flush and two events, so each
    timed call starts from cold L2 and launch gaps of multi-kernel calls do not count (the peers
    were timed from graph replays too). Falls back to events around `graph.replay()` where
    in-graph events are unsupported; `use_graph=False` times eager calls (launch cost included).
    `flush`: "write" (every committed table) or "read" (FLUSH_MODES).
    """
    device = device or torch.device("cuda", torch.cuda.current_device())
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
        if flush_l2:
            empty_l2(device, flush)  # allocate the flush buffer outside any capture
        stream.synchronize()
        if not use_graph:
            result = _bench_around_replay(fn, reps, flush_l2, device, stream, False, flush)
        else:
            try:
                result = _bench_in_graph(fn, reps, flush_l2, device, stream, flush)
            except (RuntimeError, TypeError) as e:
                print(f"[hpc-ops bench] in-graph events unavailable ({e}); timing around graph replay "
                      "instead (adds the graph launch, ~1 us)", file=sys.stderr)
                result = _bench_around_replay(fn, reps, flush_l2, device, stream, True, flush)
    torch.cuda.current_stream(device).wait_stream(stream)
    return result


def bench_back_to_back_us(fns: list[Callable[[], object]], *, reps: int = 20, warmup: int = 2,
                          device: torch.device | None = None) -> float:
    """Per-call time (us) of `len(fns)` calls issued back to back in one CUDA graph.

    Each function should read its own inputs (input rotation: together larger than the L2), so
    no call finds its data in the L2 and none pays a flush's dirty-line write-back or a pair of
    events of its own: the steady-state throughput of a stream of such calls, measured the way a
    copy-bandwidth ceiling is measured. It complements `bench_us` (one cold call), it does not
    replace it: comparisons with the peers use `bench_us`.
    """
    if not fns:
        raise ValueError("bench_back_to_back_us: fns must hold at least one function")

    def run_all():
        for fn in fns:
            fn()

    # One graph of [event, every call, event] with no flush: bench_us without its flush.
    return bench_us(run_all, reps=reps, warmup=warmup, flush_l2=False, device=device) / len(fns)


METHODS = ("cold", "rotation")
COLD_REPS = 50  # at least this many replays per cold median
ROTATION_REPS = 20  # at least this many replays per rotation median
ROTATION_BYTES = 256 << 20  # the rotated copies' inputs together: > 4 x the H200's 60 MB L2


def methods(arg: str) -> tuple[str, ...]:
    """The methods a `--method cold|rotation|both` argument names."""
    if arg == "both":
        return METHODS
    if arg not in METHODS:
        raise ValueError(f"--method must be cold, rotation or both, got {arg!r}")
    return (arg,)


def rotation_copies(bytes_per_call: int, *, total: int = ROTATION_BYTES, cap: int = 512) -> int:
    """How many distinct input copies the rotation method needs: enough that their bytes together
    reach `total`, at least 2, at most `cap`."""
    return max(2, min(cap, -(-total // max(1, int(bytes_per_call)))))


def cold_us(fn: Callable[[], object], *, reps: int = 100, device: torch.device | None = None) -> float:
    """The cold method: median of >= COLD_REPS graph replays of [L2 flush, event, fn(), event]."""
    return bench_us(fn, reps=max(COLD_REPS, reps), flush_l2=True, device=device)


def rotation_us(fns: list[Callable[[], object]], *, reps: int = 20, device: torch.device | None = None) -> float:
    """The rotation method: per-call time of `fns` (one per input copy, see rotation_copies) replayed
    back to back in one graph, median of >= ROTATION_REPS replays."""
    return bench_back_to_back_us(fns, reps=max(ROTATION_REPS, reps), device=device)
