"""Router GEMM on the H200: ours against cuBLAS through torch (FP32; FP32 with the BF16 -> FP32 cast
of x inside the call; TF32; BF16 weights, lossy) at the three served shapes (K=4096 N=192; LongCat-Flash
Chat K=6144 N=768; LongCat-Flash-Lite K=3072 N=384), with max |error| against an FP64 reference and the
share of tokens whose top-8 experts agree with it, for each provider.

Every row is timed by both methods of hpc_common.bench (`--method cold|rotation|both`, field
`method`): cold, one call after a 128 MB L2 flush in a CUDA graph; rotation, calls back to back on
distinct weight and activation copies (256 MB or more in all), per-call time.

    python -m hpc_router_gemm.bench [--method both] [--out-dir benchmarks/results] [--quick] [--m 1,2,4]
        [--shapes longcat_chat:512,longcat_lite:1024]

(benchmarks/bench_router_gemm.py is the same command; `hpc-bench --ops router` runs a subset through
hpc_router_gemm.bench_suite.) Writes DIR/<gpu>/router_gemm.{json,md}. The per-path sweep behind heuristics.TABLE is a probe:
tools/probes/router_gemm/sweep_paths.py.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
from hpc_common.bench import BenchResults, cold_us, floor_us, gpu_slug, methods, rotation_copies, rotation_us
from hpc_router_gemm import RouterWeight, plan_for, router_gemm
from hpc_router_gemm.reference import router_gemm_reference, topk_experts

SHAPES = {
    "generic": (4096, 192, (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)),
    "longcat_chat": (6144, 768, (1, 16, 64, 128, 256, 512, 1024, 4096)),
    "longcat_lite": (3072, 384, (1, 16, 64, 128, 256, 512, 1024, 4096)),
}
QUICK_M = (1, 64, 4096)


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


def providers(x: torch.Tensor, w: torch.Tensor, rw: RouterWeight, out: torch.Tensor) -> dict:
    """name -> (call, whether TF32 is on) for one copy of the inputs; every call returns its scores."""
    xf, w_bf16 = x.float(), w.to(torch.bfloat16)
    return {
        "ours": (lambda: router_gemm(x, rw, out=out), False),
        "cublas_fp32": (lambda: torch.mm(xf, w.T), False),
        "cublas_fp32_cast": (lambda: torch.mm(x.float(), w.T), False),
        "cublas_tf32": (lambda: torch.mm(xf, w.T), True),
        "cublas_bf16": (lambda: torch.mm(x, w_bf16.T), False),
    }


def bench_shape(res: BenchResults, name: str, K: int, N: int, ms, run_methods, reps: int,
                gen: torch.Generator) -> None:
    dev = torch.device("cuda")
    w = torch.randn(N, K, device=dev, generator=gen) * 0.02
    rw = RouterWeight(w)
    for M in ms:
        x = torch.randn(M, K, device=dev, generator=gen).to(torch.bfloat16)
        ref = router_gemm_reference(x, w)
        ref_top = topk_experts(ref)
        nbytes = N * K * 4 + M * K * 2 + M * N * 4
        plan = plan_for(M, N, K, dev)
        case = {"shape": name, "M": M, "K": K, "N": N}
        first = providers(x, w, rw, torch.empty(M, N, device=dev))
        copies = None
        for method in run_methods:
            if method == "rotation" and copies is None:
                k = rotation_copies(nbytes)
                ws = [w.clone() for _ in range(k)]
                copies = [providers(x.clone(), wi, RouterWeight(wi), torch.empty(M, N, device=dev)) for wi in ws]
            for prov, (fn, use_tf32) in first.items():
                with tf32(use_tf32):
                    if method == "cold":
                        t = cold_us(fn, reps=reps)
                    else:
                        t = rotation_us([c[prov][0] for c in copies])
                    got = fn()
                ours_row = prov == "ours"
                extra = {"path": plan.path, "splits": plan.splits, "evict_first": plan.evict_first} if ours_row else {}
                flops = 4.0 * M * N * K if ours_row else 2.0 * M * N * K
                if method == "rotation":
                    extra["copies"] = len(copies)
                res.add(prov, t, **case, **extra, method=method, floor_us=floor_us(nbytes, flops),
                        **accuracy(got, ref, ref_top))
        copies = None
        torch.cuda.empty_cache()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--method", default="both", help="cold, rotation or both (default)")
    ap.add_argument("--quick", action="store_true", help="M in (1, 64, 4096), fewer repetitions")
    ap.add_argument("--m", type=lambda v: tuple(int(m) for m in v.split(",")), default=None,
                    help="comma-separated M values to run at every shape (instead of each shape's list)")
    ap.add_argument("--shapes", default=None,
                    help="only these cases: comma-separated name:M1/M2 entries, e.g. longcat_chat:512,generic:4096")
    args = ap.parse_args(argv)
    run_methods = methods(args.method)
    only = None
    if args.shapes:
        only = {}
        for item in args.shapes.split(","):
            name, _, ms_text = item.partition(":")
            only[name] = tuple(int(m) for m in ms_text.split("/")) if ms_text else None
    res = BenchResults("router_gemm", args.out_dir / gpu_slug())
    gen = torch.Generator(device="cuda").manual_seed(0)
    reps = 50 if args.quick else 100
    for name, (K, N, ms) in SHAPES.items():
        ms = args.m if args.m else [m for m in ms if m in QUICK_M] if args.quick else ms
        if only is not None:
            if name not in only:
                continue
            ms = only[name] or ms
        bench_shape(res, name, K, N, ms, run_methods, reps, gen)
        print(f"{name} done", flush=True)
    res.write()
    print(res.markdown())


if __name__ == "__main__":
    main()
