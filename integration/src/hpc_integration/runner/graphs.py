"""CUDA-graph capture of the decode step, one graph per batch size.

The graph records the whole `DecodeRunner.step_body` on a StepState's static buffers: the attention
plan (ours: plan_decode, so every replay re-plans from the device-side lengths), every layer, the
logits and the in-place advance to the next step. Workspaces were allocated when the runner was
built, so capture allocates only torch's intermediates (from the graph's private pool). Replays
therefore run consecutive decode steps with no host work; results equal the eager steps.
"""

from __future__ import annotations

import torch

from .model import DecodeRunner
from .state import StepState


class StepGraph:
    """The captured decode step of `st` (its batch size). Capture runs `warmup` eager steps first on
    a side stream (kernel builds, cuBLAS handles) and then restores st, so the state the caller set up
    is the one the first replay starts from (the warm-up's KV writes are those of that same step)."""

    def __init__(self, runner: DecodeRunner, st: StepState, warmup: int = 1):
        if not runner.backend.graphs:
            raise ValueError(f"StepGraph: backend {runner.backend.name!r} cannot be captured (it reads lengths on "
                             "the host); run its steps eagerly")
        if runner.device.type != "cuda":
            raise ValueError(f"StepGraph: CUDA graphs need a CUDA device, the runner is on {runner.device}")
        self.runner, self.state = runner, st
        snap = st.snapshot()
        side = torch.cuda.Stream(runner.device)
        side.wait_stream(torch.cuda.current_stream(runner.device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                runner.step_body(st)
        torch.cuda.current_stream(runner.device).wait_stream(side)
        st.restore(snap)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            runner.step_body(st)

    def replay(self) -> None:
        self.graph.replay()


class GraphCache:
    """One StepState and StepGraph per batch size, captured on first use."""

    def __init__(self, runner: DecodeRunner):
        self.runner = runner
        self.graphs: dict[int, StepGraph] = {}

    def get(self, st: StepState) -> StepGraph:
        g = self.graphs.get(st.batch)
        if g is None or g.state is not st:
            g = self.graphs[st.batch] = StepGraph(self.runner, st)
        return g
