"""Probe: what any kernel in the fused prologue's place can reach, next to the prologue itself (issue 39).

Under both methods of hpc_common.bench.timing (cold: the call in a CUDA graph after a 128 MB written flush;
rotation: one input copy per call, >= 256 MB together, back to back in one graph with PDL), it times

  part "bound"  at T = 256, 2048, 8192, 8/1 and 64/8 heads, BF16 KV + BF16 Q and FP8 KV + FP8 Q:
                `prologue` (hpc_attention.qk_norm_rope_store, the benchmark's inputs: QK-Norm, neox RoPE over 128
                dims from an FP32 cos / sin cache of 128K positions, int64 ids), `copy_r1/2/4/8` (bound_kernels.cu:
                exactly the prologue's bytes and dependent loads, no math, R rows per 16-lane team) and
                `torch_copy` (Tensor.copy_ of half the bytes: a plain stream of the same volume);
  part "empty"  an empty kernel with the PDL attribute (one CTA, and the prologue's grid at T = 2048 8/1);
  part "step"   a decode layer's attention step on the decode benchmark's cases (default 64x4K and
                1x128K+31x4K) at 8/1, BF16 and FP8 KV: `decode_only` (decode(new_tokens=1) alone),
                `prologue_decode` (the prologue, then that decode, PDL-chained), `empty_decode` (an empty PDL kernel
                on the prologue's grid in the prologue's place) and `prologue_decode_pdl_off` (both launched
                without PDL, so no early KV loads either).

floor_us is the bytes over 4.27 TB/s (hpc_common.bench.floor_us); rows carry `tbps`. What decides what:
the prologue's gap to the best copy_rN (cold and rotation) is what its own work costs; copy_r2 against
copy_r1/r4/r8 is what rows per team and waves are worth; empty_decode - decode_only is what any kernel in front
of decode costs in a step, to hold against the 2 us goal; prologue_decode - empty_decode is the prologue's share.

    python tools/probes/prologue/prologue_bound.py [--out-dir DIR] [--quick] [--step-cases 64x4K,...]
        [--parts bound,empty,step] [--reps 50] [--rotation-reps 20]

Writes DIR/prologue_bound.json and .md (DIR: --out-dir, else $OUT, else ./prologue_bound_out). The first run
builds bound_kernels.cu + bindings.cpp with hpc_common.jit (~30 s of nvcc, cached under HPC_JIT_CACHE_DIR).
--quick: T = 2048 only and the 64x4K step.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TOKENS = [256, 2048, 8192]
HEADS = [(8, 1), (64, 8)]
KVS = ["bf16", "fp8"]
COPY_ROWS = [1, 2, 4, 8]
STEP_CASES = ["64x4K", "1x128K+31x4K"]


def load_probe_ext():
    import hpc_attention
    from hpc_common.jit.build import load_extension

    inc = Path(hpc_attention.__file__).resolve().parent / "include"
    return load_extension("hpc_probe_prologue_bound", [HERE / "bound_kernels.cu", HERE / "bindings.cpp"], [inc],
                          cuda_flags=["-DHPC_PROBE_EXTENSION"])


def prologue_blocks(T: int, hq: int, hkv: int, rows_per_team: int = 2) -> int:
    """The prologue's grid (prologue.cuh: 16 teams of 16 lanes per block, rows_per_team rows each)."""
    rows = 16 * rows_per_team
    return -(-T * (hq + 2 * hkv) // rows)


def copy_fn(ext, p, rows: int):
    """The bare copy of one bench Prologue copy's bytes (same inputs and outputs as its qk_norm_rope_store)."""
    from hpc_common import get_pdl
    from hpc_common.launch import stream_ptr

    kc = p.k_cache

    def run():
        ext.bare_copy(p.qkv.data_ptr(), p.positions.data_ptr(), p.cos_sin.data_ptr(), p.slots.data_ptr(),
                      p.out_q.data_ptr(), p.out_qs.data_ptr() if p.out_qs is not None else 0, kc.data_ptr(),
                      p.v_cache.data_ptr(), p.T, p.hq, p.hkv, p.cos_sin.shape[1], kc.shape[1], kc.shape[0], rows,
                      p.fp8, 0, stream_ptr(p.qkv.device), get_pdl())

    return run


def check_copy(ext, p, rows: int) -> None:
    """The copy wrote each row where the prologue writes it: Q = the q heads of qkv, the K / V rows at the slots
    (FP8: each lane's first 8 of its 16 bytes)."""
    p.out_q.view(torch.uint8).fill_(0)
    copy_fn(ext, p, rows)()
    torch.cuda.synchronize()
    hq, hkv = p.hq, p.hkv
    x = p.qkv.view(torch.uint8).view(p.T, hq + 2 * hkv, 16, 16)
    x = (x[..., :8] if p.fp8 else x).reshape(p.T, hq + 2 * hkv, -1)
    w = x.shape[-1]
    ok = torch.equal(p.out_q.view(torch.uint8).view(p.T, hq, w), x[:, :hq])
    for cache, first in ((p.k_cache, hq), (p.v_cache, hq + hkv)):
        rows_at = cache.view(torch.uint8).view(-1, hkv, w)[p.slots.long()]
        ok = ok and torch.equal(rows_at, x[:, first:first + hkv])
    if not ok:
        raise RuntimeError(f"copy_r{rows} wrote the wrong bytes at T={p.T} {hq}/{hkv} fp8={p.fp8}")


def bound_rows(res, ext, T, hq, hkv, kv, reps, rot_reps, cos_sin, gen) -> None:
    from hpc_attention.bench import prologue as pb
    from hpc_common.bench import cold_us, floor_us, rotation_copies, rotation_us

    fp8 = kv == "fp8"
    nbytes = pb.prologue_bytes(T, hq, hkv, fp8)
    n = rotation_copies(nbytes, cap=pb.MAX_COPIES)
    copies = [pb.Prologue(T, hq, hkv, fp8, cos_sin, gen) for _ in range(n)]
    flat = [(torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda"),
             torch.empty(nbytes // 2, dtype=torch.uint8, device="cuda")) for _ in range(n)]
    fields = dict(part="bound", T=T, Hq=hq, Hkv=hkv, kv_dtype=kv, floor_us=floor_us(nbytes))
    providers = {"prologue": (lambda c, i: c.ours(), dict(blocks=prologue_blocks(T, hq, hkv)))}
    for r in COPY_ROWS:
        check_copy(ext, copies[0], r)
        providers[f"copy_r{r}"] = ((lambda c, i, r=r: copy_fn(ext, c, r)),
                                   dict(blocks=prologue_blocks(T, hq, hkv, r), regs=ext.bare_copy_registers(r, fp8)))
    providers["torch_copy"] = ((lambda c, i: flat_copy_fn(*flat[i])), {})
    for name, (make, extra) in providers.items():
        for method in ("cold", "rotation"):
            if method == "cold":
                t, more = cold_us(make(copies[0], 0), reps=reps), {}
            else:
                t = rotation_us([make(c, i) for i, c in enumerate(copies)], reps=rot_reps)
                more = dict(copies=n)
            row = res.add(name, t, method=method, **fields, tbps=nbytes / (t * 1e-6) / 1e12, **extra, **more)
            print(f"bound T={T:>5} {hq:>2}/{hkv} {kv:>4} {method:>8} {name:>11}: {t:8.2f} us  floor "
                  f"{fields['floor_us']:6.2f}  {row['tbps']:.2f} TB/s", flush=True)


def flat_copy_fn(src: torch.Tensor, dst: torch.Tensor):
    return lambda: dst.copy_(src)


def empty_rows(res, ext, reps, rot_reps) -> None:
    from hpc_common.bench import cold_us, rotation_us
    from hpc_common.launch import stream_ptr

    dev = torch.device("cuda")
    for blocks in (1, prologue_blocks(2048, 8, 1)):
        fn = lambda b=blocks: ext.empty(b, stream_ptr(dev), True)  # noqa: E731
        for method in ("cold", "rotation"):
            t = cold_us(fn, reps=reps) if method == "cold" else rotation_us([fn] * 64, reps=rot_reps)
            res.add("empty_pdl", t, part="empty", method=method, blocks=blocks,
                    **({"copies": 64} if method == "rotation" else {}))
            print(f"empty blocks={blocks:>4} {method:>8}: {t:8.2f} us", flush=True)


def step_rows(res, ext, name, hq, hkv, kv, reps, rot_reps, cos_sin, gen) -> None:
    from hpc_attention.bench import decode as bd
    from hpc_attention.bench import prologue as pb
    from hpc_common.bench import cold_us, floor_us, rotation_copies, rotation_us
    from hpc_common.launch import pdl_enabled, stream_ptr

    lens = bd.parse_case(name)
    B = len(lens)
    pages = sum(-(-L // bd.PAGE) for L in lens)
    nbytes = bd.kv_bytes_of(lens, hkv, kv) + 2 * B * hq * 128 * 2 + pages * 4 + pb.prologue_bytes(B, hq, hkv,
                                                                                                   kv == "fp8")
    n = rotation_copies(bd.kv_bytes_of(lens, hkv, kv), cap=bd.MAX_COPIES)
    steps = [pb.Step(name, hq, hkv, kv, cos_sin, gen) for _ in range(n)]
    blocks = prologue_blocks(B, hq, hkv)
    dev = torch.device("cuda")

    def make(s, provider):
        dec = s.decode()
        if provider == "decode_only":
            return dec
        if provider == "empty_decode":
            def run():
                ext.empty(blocks, stream_ptr(dev), True)
                dec()
            return run
        return s.fn("ours")

    fields = dict(part="step", case=name, T=B, Hq=hq, Hkv=hkv, kv_dtype=kv, floor_us=floor_us(nbytes))
    for provider in ("decode_only", "prologue_decode", "empty_decode", "prologue_decode_pdl_off"):
        with pdl_enabled(provider != "prologue_decode_pdl_off"):
            fns = [make(s, provider) for s in steps]
            for s in steps:  # Q for decode_only / empty_decode, and no decode is the first after its plan
                s.pro.ours()()
                s.out.fill_(float("nan"))
            for f in fns:
                f()
            torch.cuda.synchronize()
            if not all(torch.isfinite(s.out).all() for s in steps):
                raise RuntimeError(f"step {name} {hq}/{hkv} {kv} {provider}: non-finite decode output")
            for method in ("cold", "rotation"):
                if method == "cold":
                    t, more = cold_us(fns[0], reps=reps), {}
                else:
                    t, more = rotation_us(fns, reps=rot_reps), dict(copies=n)
                res.add(provider, t, method=method, **fields, tbps=nbytes / (t * 1e-6) / 1e12, **more)
                print(f"step {name:>13} {hq:>2}/{hkv} {kv:>4} {method:>8} {provider:>23}: {t:8.2f} us", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=None, help="default: $OUT, else ./prologue_bound_out")
    ap.add_argument("--parts", default="bound,empty,step")
    ap.add_argument("--step-cases", default=",".join(STEP_CASES))
    ap.add_argument("--reps", type=int, default=50, help="cold replays (at least 50)")
    ap.add_argument("--rotation-reps", type=int, default=20, help="rotation replays (at least 20)")
    ap.add_argument("--quick", action="store_true", help="T = 2048 and the 64x4K step only")
    args = ap.parse_args(argv)
    out = args.out_dir or Path(os.environ.get("OUT") or "prologue_bound_out")
    parts = args.parts.split(",")
    tokens, cases = (TOKENS, args.step_cases.split(",")) if not args.quick else ([2048], ["64x4K"])

    from hpc_attention.bench import prologue as pb
    from hpc_attention.reference import rope_cos_sin_cache
    from hpc_common.bench import BenchResults

    t0 = time.time()
    ext = load_probe_ext()
    print(f"probe extension ready in {time.time() - t0:.1f} s", flush=True)
    t0 = time.time()
    res = BenchResults("prologue_bound", out)
    gen = torch.Generator(device="cuda").manual_seed(0)
    cos_sin = rope_cos_sin_cache(pb.MAX_POS, pb.ROTARY).cuda()
    if "bound" in parts:
        for hq, hkv in HEADS:
            for kv in KVS:
                for T in tokens:
                    bound_rows(res, ext, T, hq, hkv, kv, args.reps, args.rotation_reps, cos_sin, gen)
                    torch.cuda.empty_cache()
    if "empty" in parts:
        empty_rows(res, ext, args.reps, args.rotation_reps)
    if "step" in parts:
        for kv in KVS:
            for name in cases:
                step_rows(res, ext, name, 8, 1, kv, args.reps, args.rotation_reps, cos_sin, gen)
                torch.cuda.empty_cache()
    print(res.markdown())
    print(f"wrote {res.write()} ({time.time() - t0:.1f} s of measurement)")


if __name__ == "__main__":
    main()
