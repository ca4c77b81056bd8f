"""FP8 E4M3 quantisation against the torch reference ops and the copy bound, on the H200.

Cases: every mode on bf16 inputs of 1 MB to 256 MB (rows of 4096: the hidden size of Qwen3 / Hy3;
per-token-per-head as [T, 32, 128]), plus at 64 MB an odd row length (the vector path after a scalar
head per row), fp32 input, per-token rows of hidden sizes 1536 / 2880 / 3072 / 5120 / 7168 and
intermediate sizes 14336 / 28672, column-major group-128 scales at N = 1536 and group-128 at N = 2880
(a shorter last group).

Providers: `ours` (hpc_common.fp8), `torch_ref` (hpc_common.fp8.reference run on the GPU: the same
float32 operations as eager torch ops) and `torch_copy` (a device copy of the input's bytes: what any
kernel can reach under the same method, the bound the targets are read against). Every row is timed
by both methods of hpc_common.bench (`--method cold|rotation|both`, field `method`): cold, one call
after a 128 MB L2 flush in a CUDA graph; rotation, calls back to back on distinct input copies (256 MB
or more in all), per-call time.

Bytes per call: input read + FP8 written + scales written; dynamic per-tensor reads the input twice
(amax pass, then quantising pass), and its floor counts both reads. `bitwise` says whether ours
equalled the reference byte for byte (q and scales).

    python -m hpc_common.fp8.bench [--method both] [--quick] [--sizes 64,256] [--modes per_token,group128]
                                   [--no-ref] [--out-dir benchmarks/results]

(benchmarks/bench_fp8_quant.py is the same command; `hpc-bench --ops fp8` runs a subset through
hpc_common.fp8.bench_suite.) Writes DIR/<gpu>/fp8_quant.{json,md}.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch

from hpc_common import fp8
from hpc_common.bench import (COPY_BANDWIDTH_TBPS, BenchResults, cold_us, floor_us, gpu_slug, methods,
                              rotation_copies, rotation_us)
from hpc_common.fp8 import reference as ref

MB = 1 << 20
N = 4096
HEADS, HEAD_DIM = 32, 128
MODES = ("per_tensor_static", "per_tensor_dynamic", "per_token", "group128", "group128_col",
         "group128_ue8m0", "per_token_head")
# Per-token rows of other models' hidden sizes at 64 MB (Qwen3-235B's MoE intermediate 1536; gpt-oss 2880;
# LongCat-Flash-Lite 3072; Qwen 14B 5120; DeepSeek-V3 7168) and MLP intermediates (Llama-3 8B 14336, 70B 28672).
HIDDEN_ROWS = (1536, 2880, 3072, 5120, 7168, 14336, 28672)


def _calls(mode: str, x: torch.Tensor, static: torch.Tensor):
    """(ours, torch_ref, number of scales, input reads) for one mode on input x."""
    if mode == "per_tensor_static":
        return (lambda: fp8.quantize_per_tensor(x, static), lambda: ref.quantize_per_tensor_ref(x, static), 0, 1)
    if mode == "per_tensor_dynamic":
        return (lambda: fp8.quantize_per_tensor(x), lambda: ref.quantize_per_tensor_ref(x), 1, 2)
    if mode == "per_token":
        return (lambda: fp8.quantize_per_token(x), lambda: ref.quantize_per_token_ref(x), x.shape[0], 1)
    if mode.startswith("group128"):
        col, e8 = mode.endswith("_col"), mode.endswith("_ue8m0")
        g = math.ceil(x.shape[1] / 128)
        return (lambda: fp8.quantize_per_token_group(x, 128, column_major_scales=col, ue8m0=e8),
                lambda: ref.quantize_per_token_group_ref(x, 128, ue8m0=e8, column_major_scales=col),
                x.shape[0] * g, 1)
    if mode == "per_token_head":
        return (lambda: fp8.quantize_per_token_head(x), lambda: ref.quantize_per_token_head_ref(x),
                x.shape[0] * x.shape[1], 1)
    raise KeyError(mode)


def _cases(quick: bool, sizes=None, modes=MODES):
    """(mode, MB, N, dtype): every mode at every size, and the extra shapes at 64 MB (and 256 MB when
    --sizes names it); none of the extras with --quick."""
    extra_sizes = () if quick else (64, 256) if sizes is not None else (64,)
    sizes = sizes or ((1, 64) if quick else (1, 4, 16, 64, 256))
    for mode in modes:
        for mb in sizes:
            yield mode, mb, N, torch.bfloat16
    for mb in (mb for mb in sizes if mb in extra_sizes):
        for mode in ("per_token", "group128", "per_tensor_dynamic"):
            if mode in modes:
                yield mode, mb, N - 1, torch.bfloat16
        for mode in ("per_token", "group128"):
            if mode in modes:
                yield mode, mb, N, torch.float32
        if "per_token" in modes:
            for n in HIDDEN_ROWS:
                yield "per_token", mb, n, torch.bfloat16
        if "group128_col" in modes:  # 12 groups per row: 4-group column tiles
            yield "group128_col", mb, 1536, torch.bfloat16
        if "group128" in modes:  # 22.5 groups per row: the row tile kernel's covers
            yield "group128", mb, 2880, torch.bfloat16


def _same(a, b) -> bool:
    (q, s), (qr, sr) = a, b
    return bool(torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and s.shape == sr.shape
                and torch.equal(s.contiguous().view(torch.int32), sr.contiguous().view(torch.int32)))


def _add_row(res, provider, method, t, nbytes, x, params, **extra) -> None:
    """One results row (bandwidth against the copy ceiling) and its log line."""
    tbps = nbytes / (t * 1e-6) / 1e12
    res.add(provider, t, **params, pct_of_copy=round(100 * tbps / COPY_BANDWIDTH_TBPS, 1), **extra,
            floor_us=floor_us(nbytes), tbps=tbps, method=method)
    print(f"{params['mode']:20s} {tuple(x.shape)!s:18s} {params['dtype']:8s} {provider:10s} {method:8s} "
          f"{t:9.2f} us {tbps:5.2f} TB/s ({100 * tbps / COPY_BANDWIDTH_TBPS:4.1f}% of copy)", flush=True)


def bench_case(res, mode, mb, n, dtype, args, static, gen, run_methods) -> None:
    dev = static.device
    esize = torch.empty((), dtype=dtype).element_size()
    rows = max(1, mb * MB // (2 * n))  # sized by the bf16 bytes of the case
    if mode == "per_token_head":
        x = torch.randn(rows, HEADS, HEAD_DIM, device=dev, generator=gen).to(dtype)
        shape = dict(M=rows, N=HEADS * HEAD_DIM, heads=HEADS)
    else:
        x = torch.randn(rows, n, device=dev, generator=gen).to(dtype)
        shape = dict(M=rows, N=n, heads=1)
    ours, torch_ref, n_scales, reads = _calls(mode, x, static)
    nbytes = reads * x.numel() * esize + x.numel() + 4 * n_scales
    copy_bytes = 2 * x.numel() * esize
    params = dict(mode=mode, **shape, dtype=str(dtype).replace("torch.", ""),
                  input_mb=round(x.numel() * esize / MB, 1))
    bitwise = _same(ours(), torch_ref())
    providers = ["ours", "torch_copy"] + ([] if args.no_ref else ["torch_ref"])
    for method in run_methods:
        if method == "cold":
            dst = torch.empty_like(x)
            calls = {"ours": ours, "torch_ref": torch_ref, "torch_copy": lambda: dst.copy_(x)}
            for p in providers:
                nb = copy_bytes if p == "torch_copy" else nbytes
                _add_row(res, p, method, cold_us(calls[p], reps=args.reps), nb, x, params,
                         **({"bitwise": bitwise} if p == "ours" else {}))
            del dst
        else:
            k = rotation_copies(x.numel() * esize)
            xs = [x.clone() for _ in range(k)]
            for p in providers:
                if p == "torch_copy":
                    dsts = [torch.empty_like(x) for _ in range(k)]
                    fns = [(lambda xi=xi, di=di: di.copy_(xi)) for xi, di in zip(xs, dsts)]
                else:
                    fns = [_calls(mode, xi, static)[0 if p == "ours" else 1] for xi in xs]
                nb = copy_bytes if p == "torch_copy" else nbytes
                _add_row(res, p, method, rotation_us(fns), nb, x, params, copies=k,
                         **({"bitwise": bitwise} if p == "ours" else {}))
                fns = dsts = None
            del xs
        torch.cuda.empty_cache()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--method", default="both", help="cold, rotation or both (default)")
    ap.add_argument("--quick", action="store_true", help="1 MB and 64 MB only")
    ap.add_argument("--reps", type=int, default=100, help="cold replays per median (at least 50)")
    ap.add_argument("--sizes", type=lambda v: tuple(int(t) for t in v.split(",")), default=None,
                    help="input sizes in MB, e.g. 64,256 (default: 1..256, --quick: 1,64)")
    ap.add_argument("--modes", type=lambda v: tuple(v.split(",")), default=MODES)
    ap.add_argument("--no-ref", action="store_true", help="skip the torch_ref provider (saves time)")
    args = ap.parse_args(argv)
    run_methods = methods(args.method)
    dev = torch.device("cuda", torch.cuda.current_device())
    res = BenchResults("fp8_quant", args.out_dir / gpu_slug(), copy_tbps=COPY_BANDWIDTH_TBPS)
    static = torch.tensor([0.02], device=dev)
    gen = torch.Generator(dev).manual_seed(0)
    for mode, mb, n, dtype in _cases(args.quick, args.sizes, args.modes):
        bench_case(res, mode, mb, n, dtype, args, static, gen, run_methods)
    path = res.write()
    print(res.markdown())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
