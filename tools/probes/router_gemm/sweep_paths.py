"""The per-path sweep behind hpc_router_gemm.heuristics.TABLE: every path at every split count it
serves, timed by the cold method (hpc_common.bench.cold_us: CUDA-graph replay, 128 MB L2 flush
before each replay), with max |error| against FP64 and top-8 agreement; at M <= 64 every plan also
with the L2 evict_first policy on its weight loads (rows `<path>_s<S>_ef`).

Paths: fp32 / fp32pf (M <= 256 / 8), gemv / gemvr / gemvrw2 (M <= 8 / 1), every wgmma tile of
heuristics.CLUSTER_PATHS (the `pf` L2-prefetch tiles only when named in --paths), and from M = 128
the cluster-free split-K paths <tile>_ws / <tile>_wsp and their multicast forms. The row `chosen`
says which plan plan_for picks. Also the resident clusters per tile and split (meta) and the
method's floor (an empty kernel, `noop_kernel`).

    python tools/probes/router_gemm/sweep_paths.py [--out-dir /tmp/rg] [--shapes longcat_chat:1/64,generic:4096]
        [--paths wide96,wide96f] [--skip-paths wsm,wspm] [--quick]

Writes DIR/<gpu>/router_gemm_paths.{json,md}.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import torch
from hpc_common.bench import BenchResults, bench_us, cold_us, floor_us, gpu_slug
from hpc_router_gemm import RouterWeight, plan_for
from hpc_router_gemm.heuristics import (CLUSTER_PATHS, FP32_MAX_M, GEMV_MAX_M, GEMV_PATHS, GEMV_SPLITS, TILE_GEMV,
                                        TILES, WS_PATHS, Plan, gemv_fits)
from hpc_router_gemm.reference import router_gemm_reference, topk_experts
from hpc_router_gemm.router_gemm import _device_max_clusters, launch

SHAPES = {
    "generic": (4096, 192, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)),
    "longcat_chat": (6144, 768, (1, 16, 64, 128, 256, 512, 1024, 4096)),
    "longcat_lite": (3072, 384, (1, 16, 64, 128, 256, 512, 1024, 4096)),
}
QUICK_M = (1, 64, 4096)
EF_MAX_M = 64  # the evict_first twins are timed up to this M


def plans_for(M: int, K: int, only: list[str], skip: list[str]) -> list[Plan]:
    plans = [Plan("fp32", s) for s in (1, 2, 4, 8) if M <= FP32_MAX_M]
    plans += [Plan("fp32pf", s) for s in (1, 2, 4, 8) if M <= GEMV_MAX_M]
    plans += [Plan(p, s) for p in GEMV_PATHS for s in GEMV_SPLITS if M <= GEMV_MAX_M and gemv_fits(M, K, s, p)]
    plans += [Plan(p, s) for p in CLUSTER_PATHS for s in (1, 2, 4, 8) if s <= K // 64]
    if M >= 128:  # cluster-free split-K (S=1 is the cluster path's S=1, except with multicast)
        plans += [Plan(p, s) for p in WS_PATHS for s in ((1, 2, 4, 8) if WS_PATHS[p][2] else (2, 4, 8))
                  if s <= K // 64]
    plans = [p for p in plans if not any(p.path.endswith("_" + s) for s in skip)]
    # The L2-prefetch tiles measured slower everywhere: only on request.
    plans = [p for p in plans if p.path in only] if only else [p for p in plans if not p.prefetch]
    if M <= EF_MAX_M:
        plans = [q for p in plans for q in (p, dataclasses.replace(p, evict_first=True))]
    return plans


def sweep(res: BenchResults, name: str, K: int, N: int, ms, only, skip, gen) -> None:
    dev = torch.device("cuda")
    rw = RouterWeight(torch.randn(N, K, device=dev, generator=gen) * 0.02)
    for M in ms:
        x = torch.randn(M, K, device=dev, generator=gen).to(torch.bfloat16)
        ref = router_gemm_reference(x, rw.weight)
        ref_top = topk_experts(ref)
        nbytes = N * K * 4 + M * K * 2 + M * N * 4
        case = {"shape": name, "M": M, "K": K, "N": N}
        out = torch.empty(M, N, device=dev)
        chosen = plan_for(M, N, K, dev)
        for plan in plans_for(M, K, only, skip):
            out.fill_(float("nan"))
            t = cold_us(lambda plan=plan: launch(x, rw, out, plan))
            launch(x, rw, out, plan)
            err = (out.double() - ref).abs().max().item()
            agree = (topk_experts(out.double()) == ref_top).all(dim=1).double().mean().item()
            res.add(plan.name, t, **case, chosen=plan == chosen, method="cold",
                    floor_us=floor_us(nbytes, 4.0 * M * N * K), max_abs_err=err, top8_agree=round(agree, 6))
        print(f"{name} M={M} done", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=Path("/tmp/router_gemm_probe"))
    ap.add_argument("--quick", action="store_true", help="M in (1, 64, 4096)")
    ap.add_argument("--shapes", default=None, help="comma-separated name:M1/M2 entries, e.g. longcat_chat:512")
    ap.add_argument("--paths", default="", help="comma-separated paths: sweep only these")
    ap.add_argument("--skip-paths", default="", help="comma-separated path suffixes to leave out, e.g. wsm,wspm")
    args = ap.parse_args()
    only = [p for p in args.paths.split(",") if p]
    skip = [p for p in args.skip_paths.split(",") if p]
    shapes = dict(SHAPES)
    if args.shapes:
        shapes = {}
        for item in args.shapes.split(","):
            name, _, ms_text = item.partition(":")
            K, N, ms = SHAPES[name]
            shapes[name] = (K, N, tuple(int(m) for m in ms_text.split("/")) if ms_text else ms)
    dev = torch.cuda.current_device()
    clusters = {f"{p}_s{s}": _device_max_clusters(dev, t, s) for p, t in TILES.items() for s in (1, 2, 4, 8)}
    clusters.update({f"gemv_s{s}": _device_max_clusters(dev, TILE_GEMV, s) for s in GEMV_SPLITS})
    res = BenchResults("router_gemm_paths", args.out_dir / gpu_slug(), max_clusters=clusters)
    tiny = torch.zeros(1, device="cuda")  # the timing floor of the method itself
    res.add("noop_kernel", bench_us(tiny.zero_), shape="probe", M=0, K=0, N=0, method="cold")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, (K, N, ms) in shapes.items():
        ms = [m for m in ms if m in QUICK_M] if args.quick else ms
        sweep(res, name, K, N, ms, only, skip, gen)
    res.write()
    print(res.markdown())


if __name__ == "__main__":
    main()
