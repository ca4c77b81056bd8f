"""Benchmark helpers shared by every operator: the two timing methods (cold, rotation) and one
results format."""

from .results import BenchResults, gpu_slug, run_meta
from .timing import (COPY_BANDWIDTH_TBPS, METHODS, bench_back_to_back_us, bench_us, cold_us, empty_l2, floor_us,
                     methods, replay_in_graph, rotation_copies, rotation_us)

__all__ = ["BenchResults", "COPY_BANDWIDTH_TBPS", "METHODS", "bench_back_to_back_us", "bench_us", "cold_us",
           "empty_l2", "floor_us", "gpu_slug", "methods", "replay_in_graph", "rotation_copies",
           "rotation_us", "run_meta"]
