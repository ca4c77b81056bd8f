"""Router GEMM on the H200: ours against cuBLAS (FP32, FP32 with the BF16->FP32 cast of x,
TF32, BF16) at the three shapes of BRIEF.md 2.2, timed in one process by CUDA-graph replay
with L2 flushed before each replay (hpc_common.bench.bench_us), with max |error| against an
FP64 reference and top-8 agreement for each provider.

Writes DIR/<gpu>/router_gemm.{json,md} and, unless --no-sweep, DIR/<gpu>/router_gemm_paths
.{json,md}: every path (fp32 / fp32pf / gemv / gemvr, gemvr's variants gemvrw1 / gemvrw2 / gemvrna,
narrow / wide / wide96 / wide96rs / widers, their `pf` L2-prefetch variants (only when named
in --paths), and from
M=128 the cluster-free split-K paths <tile>_ws / <tile>_wsp) at every split count, the
measurement behind heuristics.py. At M <= 64 every swept plan is also timed with the L2
evict_first policy on its weight loads (rows `<path>_s<S>_ef`; Plan.evict_first), and the main
table gets `ours_ef_twin`: the chosen plan with that policy flipped. --read-flush adds `ours` (and
at M <= 64 its twin) and every cuBLAS provider but the cast one timed after a *read* L2 flush (clean
lines: no write-back inside the call), rows `*_read_flush`, at every M; in the sweep it adds the same
for every gemvr-family plan at M=1.

    python benchmarks/bench_router_gemm.py [--out-dir benchmarks/results] [--quick] [--no-sweep] [--m 1,2,4]
        [--shapes longcat_chat:512,longcat_lite:1024] [--paths wide96,wide96rs,wide96rs_wsp] [--read-flush]

The gemvr variants alone at M=1, with cuBLAS in the same process (main table) and their dirty-L2
cost (read-flush rows):

    python benchmarks/bench_router_gemm.py --out-dir /tmp/rg --shapes longcat_chat:1,generic:1,longcat_lite:1 \
        --paths gemvr,gemvrw1,gemvrw2,gemvrna --read-flush
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
from pathlib import Path

import torch
from hpc_common.bench import BenchResults, bench_us, floor_us, gpu_slug
from hpc_common.bench import timing
from hpc_router_gemm import RouterWeight, plan_for, router_gemm
from hpc_router_gemm.heuristics import (CLUSTER_PATHS, FP32_MAX_M, GEMV_MAX_M, GEMV_PATHS, GEMV_SPLITS, GEMVR_PATHS,
                                        TILE_GEMV, TILES, WS_PATHS, Plan, gemv_fits)
from hpc_router_gemm.reference import router_gemm_reference, topk_experts
from hpc_router_gemm.router_gemm import launch

SHAPES = {
    "generic": (4096, 192, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)),
    "longcat_chat": (6144, 768, (1, 16, 64, 128, 256, 512, 1024, 4096)),
    "longcat_lite": (3072, 384, (1, 16, 64, 128, 256, 512, 1024, 4096)),
}
QUICK_M = (1, 64, 4096)
SKIP_PATHS: list[str] = []  # --skip-paths: path suffixes left out of the sweep
ONLY_PATHS: list[str] = []  # --paths: when given, the sweep runs these paths only
EF_MAX_M = 64  # the evict_first twins are timed up to this M
READ_FLUSH = [False]  # --read-flush


@contextlib.contextmanager
def flush_mode(mode: str):
    old = timing.FLUSH_MODE
    timing.FLUSH_MODE = mode
    try:
        yield
    finally:
        timing.FLUSH_MODE = old


@contextlib.contextmanager
def tf32(enabled: bool):
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def accuracy(out: torch.Tensor, ref: torch.Tensor, ref_top: torch.Tensor) -> dict:
    err = (out.double() - ref).abs().max().item()
    agree = (topk_experts(out.double()) == ref_top).all(dim=1).double().mean().item()
    return {"max_abs_err": err, "top8_agree": round(agree, 6)}


def bench_shape(res: BenchResults, paths: BenchResults | None, name: str, K: int, N: int, ms, reps: int,
                gen: torch.Generator) -> None:
    dev = torch.device("cuda")
    w = torch.randn(N, K, device=dev, generator=gen) * 0.02
    rw = RouterWeight(w)
    w_bf16 = w.to(torch.bfloat16)
    for M in ms:
        x = torch.randn(M, K, device=dev, generator=gen).to(torch.bfloat16)
        xf = x.float()
        ref = router_gemm_reference(x, w)
        ref_top = topk_experts(ref)
        nbytes = N * K * 4 + M * K * 2 + M * N * 4
        case = {"shape": name, "M": M, "K": K, "N": N}
        out = torch.empty(M, N, device=dev)
        plan = plan_for(M, N, K, dev)

        def ours():
            router_gemm(x, rw, out=out)

        twin = dataclasses.replace(plan, evict_first=not plan.evict_first)
        twin_out = torch.empty(M, N, device=dev)

        def ours_twin():
            launch(x, rw, twin_out, twin)

        providers = {
            "ours": (ours, lambda: out, False),
            "cublas_fp32": (lambda: torch.mm(xf, w.T), None, False),
            "cublas_fp32_cast": (lambda: torch.mm(x.float(), w.T), None, False),
            "cublas_tf32": (lambda: torch.mm(xf, w.T), None, True),
            "cublas_bf16": (lambda: torch.mm(x, w_bf16.T), None, False),
        }
        if M <= EF_MAX_M:
            providers["ours_ef_twin"] = (ours_twin, lambda: twin_out, False)
        flushes = ("write", "read") if READ_FLUSH[0] else ("write",)
        for flush in flushes:
            for prov, (fn, result, use_tf32) in providers.items():
                if flush == "read" and prov == "cublas_fp32_cast":
                    continue
                with tf32(use_tf32), flush_mode(flush):
                    t = bench_us(fn, reps=reps)
                    got = fn() if result is None else (fn(), result())[1]
                p = twin if prov == "ours_ef_twin" else plan
                ours_row = prov.startswith("ours")
                extra = {"path": p.path, "splits": p.splits, "evict_first": p.evict_first} if ours_row else {}
                flops = 4.0 * M * N * K if ours_row else 2.0 * M * N * K
                res.add(prov + ("_read_flush" if flush == "read" else ""), t, **case, **extra,
                        floor_us=floor_us(nbytes, flops), **accuracy(got, ref, ref_top))
        if paths is not None:
            sweep_paths(paths, case, x, rw, ref, ref_top, nbytes, reps)


def sweep_paths(paths: BenchResults, case: dict, x, rw: RouterWeight, ref, ref_top, nbytes: int, reps: int) -> None:
    M, K, N = case["M"], case["K"], case["N"]
    out = torch.empty(M, N, device=x.device)
    plans = [Plan("fp32", s) for s in (1, 2, 4, 8) if M <= FP32_MAX_M]
    plans += [Plan("fp32pf", s) for s in (1, 2, 4, 8) if M <= GEMV_MAX_M]
    plans += [Plan(p, s) for p in GEMV_PATHS for s in GEMV_SPLITS if M <= GEMV_MAX_M and gemv_fits(M, K, s, p)]
    plans += [Plan(p, s) for p in CLUSTER_PATHS for s in (1, 2, 4, 8) if s <= K // 64]
    if M >= 128:  # cluster-free split-K (S=1 is the cluster path's S=1, except with multicast)
        plans += [Plan(p, s) for p in WS_PATHS for s in ((1, 2, 4, 8) if WS_PATHS[p][2] else (2, 4, 8))
                  if s <= K // 64]
    plans = [p for p in plans if not any(p.path.endswith("_" + skip) for skip in SKIP_PATHS)]
    if ONLY_PATHS:
        plans = [p for p in plans if p.path in ONLY_PATHS]
    else:  # the L2-prefetch paths were slower everywhere (HISTORY.md, run E): only on request
        plans = [p for p in plans if not p.prefetch]
    if M <= EF_MAX_M:  # each plan, then the same with the L2 evict_first policy on its weight loads
        plans = [q for p in plans for q in (p, dataclasses.replace(p, evict_first=True))]
    chosen = plan_for(M, N, K, x.device)
    if M <= 64:  # the same call with a warm L2: how much of the cold time is the cold start
        paths.add("chosen_warm_l2", bench_us(lambda: launch(x, rw, out, chosen), reps=reps, flush_l2=False), **case)
    for plan in plans:
        out.fill_(float("nan"))
        t = bench_us(lambda: launch(x, rw, out, plan), reps=reps)
        launch(x, rw, out, plan)
        paths.add(plan.name, t, **case, chosen=plan == chosen,
                  floor_us=floor_us(nbytes, 4.0 * M * N * K), **accuracy(out, ref, ref_top))
        # Cold DRAM against the kernel's own cost (with a warm L2 the policy has nothing to do).
        if M == 1 and plan.path in ("fp32", "fp32pf", *GEMV_PATHS) and not plan.evict_first:
            paths.add(f"{plan.name}_warm_l2",
                      bench_us(lambda: launch(x, rw, out, plan), reps=reps, flush_l2=False), **case)
        # The gemvr variants differ in how they meet a dirty L2: written minus read flush is
        # each one's dirty-line cost (NOTES.md, "Chat M=1").
        if READ_FLUSH[0] and M == 1 and plan.path in GEMVR_PATHS:
            with flush_mode("read"):
                t = bench_us(lambda plan=plan: launch(x, rw, out, plan), reps=reps)
                paths.add(f"{plan.name}_read_flush", t, **case)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--quick", action="store_true", help="M in (1, 64, 4096), fewer repetitions")
    ap.add_argument("--no-sweep", action="store_true", help="skip the per-path sweep")
    ap.add_argument("--m", type=lambda v: tuple(int(m) for m in v.split(",")), default=None,
                    help="comma-separated M values to run at every shape (instead of each shape's list)")
    ap.add_argument("--shapes", default=None,
                    help="only these cases: comma-separated name:M1/M2 entries, e.g. longcat_chat:512,generic:4096")
    ap.add_argument("--skip-paths", default="", help="comma-separated path suffixes to leave out of the sweep, e.g. wsm,wspm")
    ap.add_argument("--paths", default="", help="comma-separated paths: the sweep runs only these, e.g. wide96,wide96rs")
    ap.add_argument("--read-flush", action="store_true",
                    help="also time ours (M <= 64: and its evict_first twin) and the FP32 / TF32 / BF16 cuBLAS "
                         "providers after a read L2 flush")
    args = ap.parse_args()
    READ_FLUSH[0] = args.read_flush
    SKIP_PATHS.extend(p for p in args.skip_paths.split(",") if p)
    ONLY_PATHS.extend(p for p in args.paths.split(",") if p)
    only = None
    if args.shapes:
        only = {}
        for item in args.shapes.split(","):
            name, _, ms_text = item.partition(":")
            only[name] = tuple(int(m) for m in ms_text.split("/")) if ms_text else None
    out_dir = args.out_dir / gpu_slug()
    res = BenchResults("router_gemm", out_dir)
    paths = None
    if not args.no_sweep:
        from hpc_router_gemm.router_gemm import _device_max_clusters

        clusters = {f"{p}_s{s}": _device_max_clusters(torch.cuda.current_device(), t, s)
                    for p, t in TILES.items() for s in (1, 2, 4, 8)}
        clusters.update({f"gemv_s{s}": _device_max_clusters(torch.cuda.current_device(), TILE_GEMV, s)
                         for s in GEMV_SPLITS})
        print("resident clusters per tile and split:", clusters)
        paths = BenchResults("router_gemm_paths", out_dir, max_clusters=clusters)
        # The timing floor of the method itself: one tiny kernel, replayed the same way.
        tiny = torch.zeros(1, device="cuda")
        for flush in (True, False):
            paths.add("noop_kernel" + ("" if flush else "_warm_l2"), bench_us(tiny.zero_, flush_l2=flush),
                      shape="probe", M=0, K=0, N=0)
    gen = torch.Generator(device="cuda").manual_seed(0)
    reps = 30 if args.quick else 100
    for name, (K, N, ms) in SHAPES.items():
        ms = args.m if args.m else [m for m in ms if m in QUICK_M] if args.quick else ms
        if only is not None:
            if name not in only:
                continue
            ms = only[name] or ms
        bench_shape(res, paths, name, K, N, ms, reps, gen)
        print(f"{name} done", flush=True)
    if paths is not None:
        paths.write()
        print(paths.markdown())
    res.write()
    print(res.markdown())


if __name__ == "__main__":
    main()
