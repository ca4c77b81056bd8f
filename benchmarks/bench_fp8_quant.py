"""Bandwidth of the FP8 E4M3 quantisers against the 4.27 TB/s copy ceiling of an H200.

Cases: every mode on bf16 inputs of 1 MB to 256 MB (rows of 4096: the hidden size of Qwen3 /
Hy3; per-token-per-head as [T, 32, 128]), plus at 64 MB an odd row length (scalar path), fp32
input, per-token rows of hidden sizes 1536 / 2880 / 3072 / 5120 / 7168 and intermediate sizes 14336 / 28672, and
column-major group-128 scales at N = 1536, group-128 at N = 2880 (a shorter last group). Providers (PROVIDERS below): `ours` (the default dispatch), `ours_old` (the
dispatch of 8fdf820: segment-team amax pass, ring kernel storing before refilling), `ours_ring`
(the bulk-copy ring kernel where the default takes the one-tile-per-CTA or flat kernel: the default
before the seventeenth session), `ours_store_first` (the ring's store-then-refill order of 8fdf820),
`ours_bulk` / `ours_register` (the tile kernels forced on / off for every mode; off: the register
kernels), `ours_generic_kernel` (group / per-head
modes: the generic register kernel) and `torch_ref` (hpc_common.fp8.reference run on the GPU,
the same float32 operations in eager torch ops). Timing: hpc_common.bench.bench_us
(CUDA-graph replay, L2 emptied before each replay, median). From 64 MB up also
`torch_copy` (a device copy of the input's bytes, timed like the other rows: what the per-call
method lets a plain copy reach), for 2-byte inputs `torch_add_same_bytes` (torch.add of the input's
two halves into a third tensor: one plain elementwise kernel with the quantiser's byte mix, the
input's bytes read and half of them written), `ours_back_to_back` (the default dispatch) and
`torch_copy_back_to_back` (the same copy), the last two timed by hpc_common.bench.bench_back_to_back_us: calls back to back in one
graph on rotating inputs (> 512 MB in all), per-call time, i.e. steady-state throughput measured
the way the 4.27 TB/s copy ceiling was; rows carry `timing="back_to_back"`. Build-variant providers named with
`--providers` (hpc_common._ext.FP8_VARIANTS) get `<variant>_back_to_back` rows too, followed by
`ours_back_to_back_again` (A/B runs).

Bytes per call: input read + FP8 written + scales written; dynamic per-tensor reads the input
twice (amax pass, then quantising pass), and its floor counts both reads (a tensor larger
than L2 cannot be quantised with one dynamic scale in one read). `bitwise` says whether this
run's output equalled the reference's, byte for byte (q and scales).

`--flush read` times every row after a read L2 flush instead of the written one (hpc_common.bench's
FLUSH_MODE: the written flush leaves the L2 full of dirty lines whose write-back lands inside the timed
call) and writes fp8_quant_read_flush.{json,md}.

    python benchmarks/bench_fp8_quant.py [--quick] [--sizes 64,256] [--modes per_token,group128] [--no-ref]
                                         [--providers ours,ours_old] [--out-dir benchmarks/results] [--flush read]
"""

from __future__ import annotations

import argparse
import contextlib
import math
from pathlib import Path

import torch

from hpc_common import _ext, fp8
from hpc_common.bench import (COPY_BANDWIDTH_TBPS, BenchResults, bench_back_to_back_us, bench_us, floor_us, gpu_slug,
                              use_flush)
from hpc_common.fp8 import quant
from hpc_common.fp8 import reference as ref

MB = 1 << 20
N = 4096
HEADS, HEAD_DIM = 32, 128


def _calls(mode: str, x: torch.Tensor, static: torch.Tensor):
    """(ours, torch_ref, number of scales, input reads) for one mode."""
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


# Per-token rows of other models' hidden sizes at 64 MB (Qwen3-235B's MoE intermediate 1536; gpt-oss 2880;
# LongCat-Flash-Lite 3072; Llama / Qwen 14B 5120; DeepSeek-V3 7168: 192 / 360 / 384 / 640 / 896 vectors, the
# row tile kernel's shapes) and MLP intermediates (Llama-3 8B 14336, 70B 28672: 1792 / 3584 vectors, the long
# row kernel's).
HIDDEN_ROWS = (1536, 2880, 3072, 5120, 7168, 14336, 28672)

MODES = ("per_tensor_static", "per_tensor_dynamic", "per_token", "group128", "group128_col",
         "group128_ue8m0", "per_token_head")


def _cases(quick: bool, sizes=None, modes=MODES):
    # The extra rows of the selected modes at 64 MB, and at 256 MB when --sizes asks for it (with the 64 MB rows
    # they split a call into a fixed cost and a streaming rate, FP8_NOTES.md); none with --quick.
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
        if "per_token" in modes:  # hidden sizes whose rows are no power-of-two vector count
            for n in HIDDEN_ROWS:
                yield "per_token", mb, n, torch.bfloat16
        if "group128_col" in modes:  # 12 groups per row (Qwen3-235B's MoE intermediate): 4-group column tiles
            yield "group128_col", mb, 1536, torch.bfloat16
        if "group128" in modes:  # 22.5 groups per row (gpt-oss hidden size): the row tile kernel's covers
            yield "group128", mb, 2880, torch.bfloat16


# Provider -> quant-module switches (anything not named keeps its default). `ours` is the default
# dispatch; `ours_old` the dispatch of 8fdf820 (segment-team amax pass for per-tensor dynamic,
# bulk kernel storing a tile before refilling its stage);
# `ours_ring` the default before the seventeenth session (bulk-copy ring, per-tensor dynamic on the
# register kernel); `ours_bulk` / `ours_register` force the tile kernels on / off for every mode
# (off: the register kernels, short-segment kernel for groups); `ours_generic_kernel` uses neither
# the tile nor the short-segment kernel (group / per-head rows only).
# `ours_store_first`: the ring's 8fdf820 order (a tile's store, then its stage's refill; the ring
# refills first since the fifth pass). Rows no tile kernel serves (odd per-token rows) equal `ours`.
OLD_BULK_KERNEL_MODES = frozenset({"per_tensor_static", "per_token", "group", "per_head"})
PROVIDERS = {
    "ours": {},
    "ours_old": dict(FLAT_AMAX_KERNEL=False, BULK_KERNEL_MODES=OLD_BULK_KERNEL_MODES, BULK_VARIANT=1,
                     USE_TILE_KERNEL=False),
    # the default before the seventeenth session: the ring, per-tensor dynamic on the register kernel
    "ours_ring": dict(USE_TILE_KERNEL=False, BULK_KERNEL_MODES=OLD_BULK_KERNEL_MODES),
    "ours_bulk": dict(USE_BULK_KERNEL=True),
    "ours_register": dict(USE_BULK_KERNEL=False),
    "ours_generic_kernel": dict(USE_BULK_KERNEL=False, USE_SHORT_SEGMENT_KERNEL=False),
    "ours_store_first": dict(BULK_VARIANT=1, USE_TILE_KERNEL=False),  # fifth pass: the ring's 8fdf820 order
    "torch_ref": None,
}
# A/B rows of build-switch variants (each an extension variant built on first use, quant.EXT_DEFINES): not
# in the default provider list, named with --providers; the names, switches and their history are
# hpc_common._ext.FP8_VARIANTS.
VARIANT_PROVIDERS = {name: dict(EXT_DEFINES=defines) for name, defines in _ext.FP8_VARIANTS.items()}
ALL_PROVIDERS = {**PROVIDERS, **VARIANT_PROVIDERS}


@contextlib.contextmanager
def _settings(provider: str):
    saved = {k: getattr(quant, k) for k in ALL_PROVIDERS[provider]}
    try:
        for k, v in ALL_PROVIDERS[provider].items():
            setattr(quant, k, v)
        yield
    finally:
        for k, v in saved.items():
            setattr(quant, k, v)


def _same(a, b) -> bool:
    (q, s), (qr, sr) = a, b
    return bool(torch.equal(q.view(torch.uint8), qr.view(torch.uint8)) and s.shape == sr.shape
                and torch.equal(s.contiguous().view(torch.int32), sr.contiguous().view(torch.int32)))


def _add_row(res, provider, t, nbytes, x, params, timing=None, **extra) -> None:
    """One results row (bandwidth against the copy ceiling) and its log line."""
    tbps = nbytes / (t * 1e-6) / 1e12
    res.add(provider, t, **params, pct_of_copy=round(100 * tbps / COPY_BANDWIDTH_TBPS, 1), **extra,
            floor_us=floor_us(nbytes), tbps=tbps, **({"timing": timing} if timing else {}))
    print(f"{params['mode']:20s} {tuple(x.shape)!s:18s} {params['dtype']:8s} {provider:9s} {t:9.2f} us "
          f"{tbps:5.2f} TB/s ({100 * tbps / COPY_BANDWIDTH_TBPS:4.1f}% of copy)", flush=True)


def _back_to_back_rows(res, ours_on, x, params, nbytes, reps, variants=()) -> None:
    """Steady-state throughput: k calls back to back on k copies of the input (> 512 MB in all,
    so no call finds its input in the L2), against a device copy of the same input bytes timed the
    same way (the ceiling as this method sees it). `ours_on(x)` is the default call on input x.
    `variants`: build-variant providers (VARIANT_PROVIDERS) timed the same way in the same process,
    `<variant>_back_to_back`, followed by the default again (`ours_back_to_back_again`): A/B runs."""
    k = max(2, math.ceil((512 * MB) / (x.numel() * x.element_size())))
    xs = [x.clone() for _ in range(k)]
    dsts = [torch.empty_like(x) for _ in range(k)]
    copies = [(lambda xi=xi, di=di: di.copy_(xi)) for xi, di in zip(xs, dsts)]
    copy_bytes = 2 * x.numel() * x.element_size()
    # The same device copy timed like every other row (one cold call after the L2 flush): how
    # close to 4.27 TB/s a plain copy of this size gets under the per-call method.
    _add_row(res, "torch_copy", bench_us(copies[0], reps=reps), copy_bytes, x, params)
    # The quantiser's byte mix (2n read, n written) in one elementwise kernel; only where both
    # halves start 16-byte aligned (torch's vectorised path), else the control measures torch's
    # scalar fallback.
    if x.element_size() == 2 and (x.numel() // 2) % 8 == 0:
        flat, n2 = xs[0].reshape(-1), x.numel() // 2
        a, b, dst = flat[:n2], flat[n2:2 * n2], torch.empty(n2, dtype=x.dtype, device=x.device)
        _add_row(res, "torch_add_same_bytes", bench_us(lambda: torch.add(a, b, out=dst), reps=reps), 6 * n2, x, params)
        del a, b, dst
    for provider, fns, nb in (("ours_back_to_back", [ours_on(xi) for xi in xs], nbytes),
                              ("torch_copy_back_to_back", copies, copy_bytes)):
        _add_row(res, provider, bench_back_to_back_us(fns, reps=max(5, reps // 5)), nb, x, params,
                 timing="back_to_back")
    for provider in (*variants, "ours") if variants else ():
        with _settings(provider):
            fns = [ours_on(xi) for xi in xs]
            name = "ours_back_to_back_again" if provider == "ours" else f"{provider}_back_to_back"
            _add_row(res, name, bench_back_to_back_us(fns, reps=max(5, reps // 5)), nbytes, x, params,
                     timing="back_to_back")
    del xs, dsts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--quick", action="store_true", help="1 MB and 64 MB only")
    ap.add_argument("--reps", type=int, default=100)
    ap.add_argument("--sizes", type=lambda v: tuple(int(t) for t in v.split(",")), default=None,
                    help="input sizes in MB, e.g. 64,256 (default: 1..256, --quick: 1,64)")
    ap.add_argument("--modes", type=lambda v: tuple(v.split(",")), default=MODES)
    ap.add_argument("--no-ref", action="store_true", help="skip the torch_ref provider (saves time)")
    ap.add_argument("--providers", type=lambda v: tuple(v.split(",")), default=tuple(PROVIDERS),
                    help="comma-separated subset of: " + ", ".join(ALL_PROVIDERS)
                    + " (default: all but the variant rows)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every provider of a case this many times, interleaved (rows carry `round`): A/B runs")
    ap.add_argument("--flush", default="write", choices=("write", "read"),
                    help="the L2 flush before each timed call (default written); read writes fp8_quant_read_flush.*")
    args = ap.parse_args(argv)
    op = use_flush(args.flush, "fp8_quant")
    if args.no_ref:
        args.providers = tuple(p for p in args.providers if p != "torch_ref")

    variants = [ALL_PROVIDERS[p]["EXT_DEFINES"] for p in args.providers if p in VARIANT_PROVIDERS]
    if variants:  # their builds side by side, not one at a time at their first rows
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(variants) + 1) as pool:
            list(pool.map(lambda d: _ext.SPEC.variant(*d).build(), [(), *variants]))

    dev = torch.device("cuda", torch.cuda.current_device())
    res = BenchResults(op, args.out_dir / gpu_slug(), copy_tbps=COPY_BANDWIDTH_TBPS, flush=args.flush)
    static = torch.tensor([0.02], device=dev)
    gen = torch.Generator(dev).manual_seed(0)
    for mode, mb, n, dtype in _cases(args.quick, args.sizes, args.modes):
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
        params = dict(mode=mode, **shape, dtype=str(dtype).replace("torch.", ""), input_mb=round(x.numel() * esize / MB, 1))
        want = torch_ref()
        providers = [p for p in ALL_PROVIDERS if p in args.providers
                     and (p != "ours_generic_kernel" or mode.startswith("group128") or mode == "per_token_head")]
        for rnd in range(args.rounds):
            extra = dict(round=rnd) if args.rounds > 1 else {}
            for provider in providers:
                if provider == "torch_ref":
                    _add_row(res, provider, bench_us(torch_ref, reps=args.reps), nbytes, x, params, **extra)
                    continue
                with _settings(provider):
                    bitwise = _same(ours(), want)
                    _add_row(res, provider, bench_us(ours, reps=args.reps), nbytes, x, params, bitwise=bitwise,
                             **extra)
        del want
        if mb >= 64:
            _back_to_back_rows(res, lambda xi: _calls(mode, xi, static)[0], x, params, nbytes, args.reps,
                               [p for p in args.providers if p in VARIANT_PROVIDERS])
        del x
        torch.cuda.empty_cache()
    path = res.write()
    print(res.markdown())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
