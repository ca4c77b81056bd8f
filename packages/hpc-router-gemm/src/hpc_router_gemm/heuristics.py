"""Which kernel and split count serve a router GEMM of a given shape.

The plans (the package DESIGN notes say why each exists): `fp32` (exact FP32 on CUDA cores, the weight read straight from
its FP32 bytes, split-K over a cluster of up to 8 CTAs), `fp32pf` (the same kernel, each CTA
first asking L2 for its whole weight slice with bulk prefetches), `gemv` (exact FP32 too, M <= 8: one
CTA per SM streams a contiguous range of whole rows through shared memory with bulk copies,
split along K over a cluster of S <= 4 CTAs), `gemvr` (the same grid for M = 1 with the
weight read into registers by plain loads; `gemvrw2` bounds the loads in flight per thread to two
rows, GEMVR_PATHS), and the two-product BF16 wgmma
kernel with three tiles: `narrow` (64 x 32, for skinny M), `wide` (128 x 192) and `wide96`
(128 x 96); `wide96rs` / `widers` are the two wide tiles with the x fragments loaded into
registers once per K block for both products (wgmma with A from registers; same bits);
FUSED_TWIN lists the tiles that run both products as one wgmma over the W_hi and W_lo tiles
side by side (`wide96f`, `wide96rsf`, `wide96f4` with a 4-stage ring, the 128 x 128
`wide128f`, and the 64 x 48 `narrow48f` for Chat's small M; same bits as `wide96` / `wide96rs` /
`narrow`). A
`pf` after a tile name (`wide96pf`, `widerspf`, ...) adds an L2 prefetch of the x (and weight)
boxes PREFETCH_BLOCKS K blocks ahead of the TMA loads (same bits as without). Each is combined with a split-K count S (CTAs per cluster along K). The same
three tiles also split K without a cluster, through a global workspace (splitk_workspace.cuh):
`<tile>_ws` (the last CTA of a tile to arrive sums it) and `<tile>_wsp` (all S CTAs wait for
each other and each sums 1/S of the tile; only when the whole grid fits at once, else the
`_ws` reduction runs); `wide*_wsm` / `wide*_wspm` add the weight multicast (2-CTA clusters of
neighbouring M tiles share each weight tile; with S = 1 they are plain multicast plans). They sum the partials in the cluster's rank order: same bits as the
cluster plan with the same S, which is also their fallback under graph capture without a
workspace (split_workspace.py). Any plan may load its weight with an L2 evict_first cache
policy (`Plan.evict_first`, `"ef"` in a TABLE row; same bits): it pays off where an 18.9 MB
weight is read once from a cold, dirty L2.

For the three served shapes (K=4096 N=192; LongCat-Flash Chat K=6144 N=768; LongCat-Flash-Lite
K=3072 N=384) the plan is read from TABLE, the fastest plan measured per M by the path sweep
(`python tools/probes/router_gemm/sweep_paths.py`: CUDA-graph replay, L2 flushed before each
replay). Other shapes use the rules in `default_plan`. Every function here is pure: the device
enters only through `num_sms` and the `max_clusters` query the caller passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

FP32_MAX_M = 256  # the fp32 kernel keeps [M, 8] partials per CTA in shared memory
GEMV_MAX_M = 8  # the gemv kernel keeps the x slices of every token in shared memory
GEMV_SPLITS = (1, 2, 4)
GEMVR_MAX_SLICE_K = 4 * 512 * 4  # gemvr: a row slice is at most 4 float4 per thread of 512
# Shared memory the gemv kernel may use per CTA (router_gemv_fp32.cuh, gemv::kSmemBudget).
GEMV_SMEM_BUDGET = 227 * 1024 - 1024
TILE_NARROW, TILE_WIDE, TILE_WIDE96 = 0, 1, 2
TILE_GEMV = 3  # not a wgmma tile: the key of the gemv kernel's resident-cluster query
TILE_WIDE96_RS, TILE_WIDE_RS = 4, 5  # the wide tiles with A (x) from registers
# wide96 / wide96rs with both products in one m64n192k16 wgmma per K step (B = the W_hi tile
# followed by the W_lo tile)
TILE_WIDE96_F, TILE_WIDE96_RSF = 6, 7
# wide96f with a 4-stage ring instead of 5: faster per CTA on some grids, slower on others (TABLE)
TILE_WIDE96_F4 = 8
# 128 x 128 with both products in one m64n256k16: Lite's N = 384 in 3 tiles
TILE_WIDE128_F = 9
# 64 x 48 with both products in one m64n96k16: Chat's N = 768 in 16 tiles, so
# a small-M cluster split of 8 is 128 CTAs (narrow: 192 on 132 SMs)
TILE_NARROW48_F = 10
TILES = {"narrow": TILE_NARROW, "wide": TILE_WIDE, "wide96": TILE_WIDE96, "wide96rs": TILE_WIDE96_RS,
         "widers": TILE_WIDE_RS, "wide96f": TILE_WIDE96_F, "wide96rsf": TILE_WIDE96_RSF,
         "wide96f4": TILE_WIDE96_F4, "wide128f": TILE_WIDE128_F, "narrow48f": TILE_NARROW48_F}
RS_TWIN = {"wide96rs": "wide96", "widers": "wide"}  # same math, x tile read from shared memory per product
# same math per element, one wgmma for both products (wide128f: also 128 columns per tile)
FUSED_TWIN = {"wide96f": "wide96", "wide96rsf": "wide96rs", "wide96f4": "wide96", "wide128f": "wide96",
              "narrow48f": "narrow"}
PREFETCH_BLOCKS = 8  # K blocks of L2 prefetch ahead of the loads (`pf` paths)
PF_TILES = {f"{name}pf": TILES[name] for name in ("wide", "wide96", "wide96rs", "widers")}
CLUSTER_PATHS = {**TILES, **PF_TILES}  # wgmma paths split over a cluster (or not at all)
# Cluster-free split-K paths: path -> (tile, ws_mode of the kernel: 1 last arrival, 2 all
# reduce, weight multicast over M pairs).
WS_PATHS = {f"{name}_{suffix}": (tile, mode, 0) for name, tile in CLUSTER_PATHS.items()
            for suffix, mode in (("ws", 1), ("wsp", 2))}
WS_PATHS.update({f"{name}_{suffix}": (CLUSTER_PATHS[name], mode, 1) for name in ("wide", "wide96", "widers", "wide96pf")
                 for suffix, mode in (("wsm", 1), ("wspm", 2))})
TILE_SHAPES = {TILE_NARROW: (64, 32), TILE_WIDE: (128, 192), TILE_WIDE96: (128, 96),  # (BM, BN)
               TILE_WIDE96_RS: (128, 96), TILE_WIDE_RS: (128, 192), TILE_WIDE96_F: (128, 96),
               TILE_WIDE96_RSF: (128, 96), TILE_WIDE96_F4: (128, 96), TILE_WIDE128_F: (128, 128),
               TILE_NARROW48_F: (64, 48)}
SPLIT_CHOICES = (1, 2, 4, 8)
FP32_PATHS = ("fp32", "fp32pf")  # one kernel; "fp32pf" adds the L2 bulk prefetch
# One-token register kernels (same bits): "gemvr" requests a thread's whole row slice in one batch;
# "gemvrw2" streams each thread's rows through 2 row buffers, row r + 2 requested only once row r is
# summed (Chat: 48 KB in flight per SM instead of 144 KB), so that with evict_first later weight lines
# replace consumed ones rather than dirty lines (router_gemv_fp32_window.cuh).
GEMVR_PATHS = ("gemvr", "gemvrw2")
# "gemvr*": registers instead of bulk copies, M = 1 only
GEMV_PATHS = ("gemv", *GEMVR_PATHS)
PATHS = (*FP32_PATHS, *GEMV_PATHS, *CLUSTER_PATHS, *WS_PATHS)


@dataclass(frozen=True)
class Plan:
    path: str  # "fp32", "fp32pf", "gemv", one of GEMVR_PATHS, CLUSTER_PATHS or WS_PATHS
    splits: int  # CTAs along K (per cluster, or per tile with a workspace)
    # The weight loads carry an L2 evict_first policy (every path has the option; same bits).
    # The weight of a small-M call is read once, so its lines should be the L2's first victims
    # rather than lines another kernel wrote (whose eviction is a DRAM write inside this call).
    evict_first: bool = False

    @property
    def name(self) -> str:
        """`<path>_s<splits>`, `_ef` appended with the evict_first policy (benchmark row names)."""
        return f"{self.path}_s{self.splits}" + ("_ef" if self.evict_first else "")

    @property
    def tile(self) -> int | None:
        if self.path in CLUSTER_PATHS:
            return CLUSTER_PATHS[self.path]
        return WS_PATHS[self.path][0] if self.path in WS_PATHS else None

    @property
    def prefetch(self) -> int:
        """K blocks of L2 prefetch ahead of the TMA loads (0: none)."""
        return PREFETCH_BLOCKS if self.path.partition("_")[0] in PF_TILES else 0

    @property
    def ws_mode(self) -> int:
        """0: cluster split (or none); 1 / 2: workspace split (see WS_PATHS)."""
        return WS_PATHS[self.path][1] if self.path in WS_PATHS and self.splits > 1 else 0

    @property
    def multicast(self) -> bool:
        """Weight tiles shared by 2-CTA clusters of neighbouring M tiles."""
        return self.path in WS_PATHS and WS_PATHS[self.path][2] == 1


# (K, N) -> [(largest M, path, splits[, "ef"]), ...] in increasing M; the last row covers every
# larger M; "ef": the weight loads carry the L2 evict_first policy (Plan.evict_first). Each row is
# the fastest plan of `python benchmarks/bench_router_gemm.py`'s sweep on the H200 (132 SMs, nvcc 13.0,
# CUDA-graph replay, L2 flushed before each replay; us, runner-up in brackets). Resident clusters
# on the H200 (1 CTA/SM for the wide tiles): S=1 132, S=2 66, S=4 30, S=8 15, so a row never asks
# for more clusters than fit at once (a second wave doubles the time: wide S=4 at M=4096 ran 54 us
# against 28.8 for wide96 S=2).
TABLE: dict[tuple[int, int], list[tuple]] = {
    # K=4096 N=192. M=1 gemvr S=1 6.59 [fp32 S=8 7.10; FP32 cuBLAS 7.55]; M<=8 fp32 S=8 8.5-8.6
    # [narrow S=8 9.5]; 16..256 narrow S=8 9.4-11.3; 512 narrow S=4 14.0 [wide96 S=8 14.1]; 1024
    # wide96_wsp S=8 16.2 [wide96 S=4 16.9]; 2048 wide96f_wsp S=4 20.4 [wide96_wsp S=4 20.8]; 4096
    # wide96f S=2 27.5 [wide96 S=2 28.3; wide96_wsp S=2 30.1: the global reduction costs ~2.5 us more
    # than the cluster's at S=2; wide96_wspm S=2 53.4].
    (4096, 192): [(1, "gemvr", 1), (8, "fp32", 8), (256, "narrow", 8), (512, "narrow", 4), (1024, "wide96_wsp", 8),
                  (2048, "wide96f_wsp", 4), (1 << 30, "wide96f", 2)],
    # K=6144 N=768. M=1 gemvrw2 S=1 ef 10.85 [gemvr S=1 ef 11.23; FP32 cuBLAS 11.28]; 2..8 fp32 S=2
    # ef 12.4-13.1 [without ef 12.9-13.6]; 16..24 narrow48f S=8 ef 13.9-14.0 [narrow S=8 ef 14.6-14.9:
    # N = 768 in 16 tiles of 48 is 128 CTAs of two per SM where narrow's 24 tiles made 192]; 64 narrow
    # S=8 ef 13.8 [narrow48f 14.2]; 128 wide96 S=8 18.0; 256 wide128f S=8 19.8-20.1 [wide96_wsp S=8
    # 20.3-20.6]; 512 wide96f_wsp S=4 25.2 [wide96_wsp S=4 25.7]; 1024 wide96f S=2 34.0 [wide96 S=2
    # 35.3]; 4096 widers S=1 101.5 [wide S=1 106.6, wide96f S=1 113.8].
    (6144, 768): [(1, "gemvrw2", 1, "ef"), (8, "fp32", 2, "ef"), (24, "narrow48f", 8, "ef"), (64, "narrow", 8, "ef"),
                  (128, "wide96", 8), (256, "wide128f", 8), (512, "wide96f_wsp", 4), (1024, "wide96f", 2),
                  (1 << 30, "widers", 1)],
    # K=3072 N=384. M=1 gemvr S=1 7.25 [fp32 S=2 7.87; FP32 cuBLAS 7.58]; 2..8 fp32 S=4 8.4-8.6
    # [S=2 8.7-8.9]; 16..128 narrow S=8 9.5-10.6; 256 narrow S=4 12.2; 512 wide96f4 S=4 14.2 [wide128f
    # S=8 14.5, wide96 S=4 15.1]; 1024 wide128f S=4 17.0 [wide96f4_wsp S=4 17.7; TF32 18.0: N = 384 in
    # 3 tiles of 128, so the 4-CTA cluster split is 24 clusters, one wave]; 2048 wide96f4 S=2 20.9
    # [wide96f S=2 21.4]; 4096 wide96f4 S=1 31.2 [wide96f S=1 32.5].
    (3072, 384): [(1, "gemvr", 1), (8, "fp32", 4), (128, "narrow", 8), (256, "narrow", 4), (512, "wide96f4", 4),
                  (1024, "wide128f", 4), (2048, "wide96f4", 2), (1 << 30, "wide96f4", 1)],
}


def fp32_splits(K: int, N: int, num_sms: int = 132) -> int:
    """About two CTAs per SM (the kernel fits two): (N / 8) expert tiles x S <= 2 x SMs, and no
    K slice thinner than 256 columns."""
    tiles = max(1, N // 8)
    s = 1
    while s < 8 and tiles * s * 2 <= 2 * num_sms and K // (s * 2) >= 256:
        s *= 2
    return s


def gemv_fits(M: int, K: int, splits: int, path: str = "gemv") -> bool:
    """gemv: one row slice (K / S FP32) and the M x slices (BF16) fit the kernel's shared
    memory. gemvr: one token, and a row slice fits one batch of register loads."""
    ks = K // splits
    if K % (16 * splits):
        return False
    if path in GEMVR_PATHS:
        return M == 1 and ks <= GEMVR_MAX_SLICE_K
    return M <= GEMV_MAX_M and M * ks * 2 + ks * 4 + 8 * 1024 <= GEMV_SMEM_BUDGET


def gemv_clusters(splits: int, num_sms: int, max_clusters: Callable[[int], int]) -> int:
    """Clusters in the gemv grid: one CTA per SM, never more clusters than fit at once."""
    return max(1, min(num_sms // splits, max_clusters(splits)))


def gemv_splits(M: int, N: int, K: int, num_sms: int, max_clusters: Callable[[int], int],
                path: str = "gemv") -> int | None:
    """The split that minimises the bytes of the busiest SM, ceil(N / clusters) x K / S x 4
    (whole rows per cluster, so few rows per SM leave some SMs a row ahead: N=192 on 132 SMs
    is 1 or 2 rows with S=1, 2 or 3 half rows with S=2); ties go to the smaller S. None when
    no split fits shared memory."""
    best, best_bytes = None, math.inf
    for s in GEMV_SPLITS:
        if not gemv_fits(M, K, s, path) or max_clusters(s) <= 0:
            continue
        g = min(N, gemv_clusters(s, num_sms, max_clusters))
        nbytes = math.ceil(N / g) * (K // s) * 4
        if nbytes < best_bytes:
            best, best_bytes = s, nbytes
    return best


def bf16x2_splits(tile: int, M: int, N: int, K: int, max_clusters: Callable[[int], int]) -> int:
    """Split count that minimises (waves of resident clusters) x (K blocks per CTA + ~2 blocks
    of pipeline fill and epilogue, +1 for the cluster reduction). `max_clusters(S)`: how
    many S-CTA clusters of this tile fit on the GPU at once."""
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


def bf16x2_tiles(tile: int, M: int, N: int, multicast: bool = False) -> int:
    """Output tiles of the grid; with multicast an odd M tile count is padded to even (the
    phantom tile's CTAs load zeros and store nothing, but own workspace and a counter)."""
    bm, bn = TILE_SHAPES[tile]
    tm = math.ceil(M / bm)
    return (tm + (tm & 1 if multicast else 0)) * math.ceil(N / bn)


def ws_splits(tile: int, M: int, N: int, K: int, resident_ctas: int) -> int:
    """Workspace split: S in SPLIT_CHOICES (powers of two, so the cluster fallback exists)
    minimising (waves of `resident_ctas` CTAs) x (K blocks per CTA + ~2 blocks of fill and
    epilogue, +1 for the reduction when S > 1)."""
    bm = TILE_SHAPES[tile][0]
    tiles = bf16x2_tiles(tile, M, N)
    ksteps = K // 64
    best, best_cost = 1, math.inf
    for s in SPLIT_CHOICES:
        if s > ksteps or bm % s:
            continue
        cost = math.ceil(tiles * s / max(1, resident_ctas)) * (math.ceil(ksteps / s) + 2 + (1 if s > 1 else 0))
        if cost < best_cost:
            best, best_cost = s, cost
    return best


def ws_launch_mode(plan: Plan, M: int, N: int, resident_ctas: int) -> int:
    """The kernel's ws_mode for a plan: `_wsp` (all CTAs wait for each other) only when every
    CTA of the grid is resident at once, else the last-arrival reduction. `resident_ctas`:
    CTAs of this tile resident at once (in 2-CTA clusters for multicast plans)."""
    mode = plan.ws_mode
    if mode == 2 and bf16x2_tiles(plan.tile, M, N, plan.multicast) * plan.splits > resident_ctas:
        return 1
    return mode


def default_plan(M: int, N: int, K: int, num_sms: int, max_clusters: Callable[[int, int], int]) -> Plan:
    """Shapes without a measured table: fp32 up to M=8, narrow up to 512, wide96 beyond."""
    if M <= 8:
        return Plan("fp32", fp32_splits(K, N, num_sms))
    path = "narrow" if M <= 512 else "wide96"
    return Plan(path, bf16x2_splits(TILES[path], M, N, K, lambda s: max_clusters(TILES[path], s)))


def choose_plan(M: int, N: int, K: int, max_clusters: Callable[[int, int], int], path: str | None = None,
                num_sms: int = 132) -> Plan:
    """`max_clusters(tile, S)`: resident clusters of S CTAs of that tile (device query,
    scaled to hpc_common.get_num_sms()). `path` forces a path (tests, benchmarks); its
    split count then comes from the rules, not the table."""
    if path is None:
        rows = TABLE.get((K, N))
        if rows is None or num_sms != 132:
            return default_plan(M, N, K, num_sms, max_clusters)
        for m_max, p, s, *opts in rows:
            if M <= m_max:
                break
        return Plan(p, s, evict_first="ef" in opts)
    if path in GEMV_PATHS:
        s = gemv_splits(M, N, K, num_sms, lambda s: max_clusters(TILE_GEMV, s), path)
        if s is None:
            limit = f"M <= {GEMV_MAX_M}" if path == "gemv" else "M = 1"
            raise ValueError(f"router_gemm: the {path} path serves {limit} with a K slice that fits the kernel, "
                             f"got M={M}, K={K}")
        return Plan(path, s)
    if path in FP32_PATHS:
        if M > FP32_MAX_M:
            raise ValueError(f"router_gemm: the {path} path serves M <= {FP32_MAX_M}, got M={M}")
        return Plan(path, fp32_splits(K, N, num_sms))
    if path in WS_PATHS:
        tile, _, mc = WS_PATHS[path]
        return Plan(path, ws_splits(tile, M, N, K, 2 * max_clusters(tile, 2) if mc else max_clusters(tile, 1)))
    if path not in CLUSTER_PATHS:
        raise ValueError(f"router_gemm: unknown path {path!r} (one of {', '.join(PATHS)})")
    tile = CLUSTER_PATHS[path]
    return Plan(path, bf16x2_splits(tile, M, N, K, lambda s: max_clusters(tile, s)))
