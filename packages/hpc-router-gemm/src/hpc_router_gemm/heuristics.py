"""Which kernel and split count serve a router GEMM of a given shape.

Three paths (see NOTES.md): `fp32` (exact FP32 on CUDA cores, the weight read straight from
its FP32 bytes, split-K over a cluster of 8 CTAs), `narrow` (two BF16 wgmma products,
64 x 32 tiles, for skinny M) and `wide` (128 x 192 tiles, for large M). The thresholds are
per (K, N), measured with `python benchmarks/bench_router_gemm.py --sweep` (CUDA-graph
replay, L2 flushed before each replay); shapes not in the table use the default row.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

# (K, N) -> (largest M served by the fp32 path, smallest M served by the wide tile).
# H200, nvcc 13.0, torch 2.11, the sweep of benchmarks/results/h200/router_gemm_paths.json:
#   (filled in from the measurement; see NOTES.md for the table behind each number)
THRESHOLDS: dict[tuple[int, int], tuple[int, int]] = {
    (4096, 192): (16, 512),
    (6144, 768): (16, 512),
    (3072, 384): (16, 512),
}
DEFAULT_THRESHOLDS = (16, 512)

FP32_MAX_M = 256  # the fp32 kernel keeps [M, 8] partials per CTA in shared memory
TILE_NARROW, TILE_WIDE = 0, 1
TILE_SHAPES = {TILE_NARROW: (64, 32), TILE_WIDE: (128, 192)}  # (BM, BN), csrc/router_gemm.cu
SPLIT_CHOICES = (1, 2, 4, 8)


@dataclass(frozen=True)
class Plan:
    path: str  # "fp32", "narrow" or "wide"
    splits: int  # CTAs per cluster along K

    @property
    def tile(self) -> int | None:
        return {"narrow": TILE_NARROW, "wide": TILE_WIDE}.get(self.path)


def fp32_splits(K: int) -> int:
    # Eight K slices spread the weight read over 8x more SMs; below 256 columns per slice the
    # slices are too thin to be worth a cluster.
    return max(1, min(8, K // 256))


def bf16x2_splits(tile: int, M: int, N: int, K: int, max_clusters: Callable[[int], int]) -> int:
    """Split count that minimises (waves of resident clusters) x (K blocks per CTA + a fixed
    pipeline fill/epilogue cost of ~2 blocks, +1 for the cluster reduction).
    `max_clusters(S)` is how many S-CTA clusters of this tile fit on the GPU at once."""
    bm, bn = TILE_SHAPES[tile]
    tiles = math.ceil(M / bm) * math.ceil(N / bn)
    ksteps = K // 64
    best, best_cost = 1, math.inf
    for s in SPLIT_CHOICES:
        if s > ksteps or bm % s:
            continue
        resident = max_clusters(s)
        if resident <= 0:
            continue
        cost = math.ceil(tiles / resident) * (math.ceil(ksteps / s) + 2 + (1 if s > 1 else 0))
        if cost < best_cost:
            best, best_cost = s, cost
    return best


def choose_plan(M: int, N: int, K: int, max_clusters: Callable[[int, int], int],
                path: str | None = None) -> Plan:
    """`max_clusters(tile, S)`: resident clusters of S CTAs of that tile (device query,
    scaled to hpc_common.get_num_sms()). `path` forces a path (tests, benchmarks)."""
    fp32_max, wide_min = THRESHOLDS.get((K, N), DEFAULT_THRESHOLDS)
    if path is None:
        if M <= min(fp32_max, FP32_MAX_M):
            path = "fp32"
        elif M >= wide_min:
            path = "wide"
        else:
            path = "narrow"
    if path == "fp32":
        if M > FP32_MAX_M:
            raise ValueError(f"router_gemm: the fp32 path serves M <= {FP32_MAX_M}, got M={M}")
        return Plan("fp32", fp32_splits(K))
    if path not in ("narrow", "wide"):
        raise ValueError(f"router_gemm: unknown path {path!r} (fp32, narrow or wide)")
    tile = TILE_NARROW if path == "narrow" else TILE_WIDE
    return Plan(path, bf16x2_splits(tile, M, N, K, functools.partial(max_clusters, tile)))
