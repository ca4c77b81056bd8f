"""Benchmark helpers shared by every operator: one timing method, one results format."""

from .results import BenchResults, dump_doc, gpu_slug, run_meta
from .timing import COPY_BANDWIDTH_TBPS, bench_back_to_back_us, bench_us, empty_l2, floor_us, replay_in_graph, use_flush

__all__ = ["BenchResults", "COPY_BANDWIDTH_TBPS", "bench_back_to_back_us", "bench_us", "dump_doc", "empty_l2",
           "floor_us", "gpu_slug", "replay_in_graph", "run_meta", "use_flush"]
