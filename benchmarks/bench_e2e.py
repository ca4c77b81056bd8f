"""End-to-end decode step on the H200: hpc_integration.runner with our kernels against the baseline
runner (SGLang's Triton decode attention and QK-Norm / RoPE kernels when SGLang imports, else torch SDPA and
torch ops; FP32 torch router; SGLang's Triton fused_experts, else a torch grouped MoE), both as CUDA-graph replays of the whole step, by both timing methods.
What is measured: hpc_integration/runner/bench.py's docstring (and integration/README.md).

    python benchmarks/bench_e2e.py [--out-dir benchmarks/results] [--quick] [--models hy3_tp8,...]
        [--batches 1,4,16,64]

Writes DIR/<gpu>/e2e.json and e2e.md (after each model, so a cut-short run keeps its rows). For the
SGLang baseline put the SGLang bundle of ../shared/recipes/sglang-h200 on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch


def main(argv=None) -> int:
    from hpc_common.bench import BenchResults, gpu_slug
    from hpc_integration.runner import bench

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--quick", action="store_true", help=f"models {bench.QUICK['models']}, batches {bench.QUICK['batches']}")
    ap.add_argument("--models", default=None, help=f"comma list of {list(bench.MODELS)}")
    ap.add_argument("--batches", default=None, help="comma list, e.g. 1,16")
    args = ap.parse_args(argv)
    reason = bench.SUITE.unavailable()
    if reason:
        print(f"bench_e2e: cannot run here: {reason}")
        return 0
    models = args.models.split(",") if args.models else list(bench.QUICK["models"] if args.quick else bench.MODELS)
    bad = [m for m in models if m not in bench.MODELS]
    if bad:
        ap.error(f"--models: unknown {bad}; choose from {list(bench.MODELS)}")
    batches = tuple(int(b) for b in args.batches.split(",")) if args.batches else (
        bench.QUICK["batches"] if args.quick else bench.BATCHES)
    res = BenchResults("e2e", args.out_dir / gpu_slug(), **bench.SUITE.meta())
    for m in models:
        print(f"== e2e {m}: batches {batches}", flush=True)
        res.rows.extend(bench.run_model(m, batches))
        path = res.write()
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    torch.backends.cuda.matmul.allow_tf32 = False
    sys.exit(main())
