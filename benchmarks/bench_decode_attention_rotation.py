"""Paged decode attention the way a decode step runs it: layer after layer, each with its own inputs.

The brief's six cases (8/1 and 64/8 heads, BF16 and FP8 KV, page 64) timed by input rotation, the other method
STYLE.md allows besides the L2 flush: n calls back to back in one CUDA graph
(`hpc_common.bench.bench_back_to_back_us`), every call reading its own q, KV cache, page table, lengths, plan
and workspace, the n copies together >= 256 MB of KV (over 4x the L2), so no call finds its inputs in the L2.
What this leaves out, against `bench_decode_attention.py`'s cold call: the written flush's dirty lines (their
write-back shares DRAM with the KV stream) and each call's own event pair and launch latency; the calls launch
with PDL, as the layers of a captured step do, so one call's start overlaps the previous call's end. The 4.27
TB/s copy ceiling is itself a back-to-back rate. Each copy has its own plan, cold like its KV (a step shares one
plan over its layers, but the GEMMs between two attention calls evict it).

Providers: `ours` (dynamic plan), `ours_early_kv` (the same with `new_tokens=1`: each call's producer reads its
plan entries and first older KV tiles before its PDL wait, while the previous call ends; the promise holds here,
since no call writes another copy's inputs) and `ours_static` (the static split-KV plan), per call; every copy's
output is poisoned (NaN) before the first run and must be finite after it, and the first copy's is compared with float32
attention on the dequantised inputs. Diagnostics (`decode_attention_rotation_diag.*`): `diag_pdl_off` (the
same stream with PDL off: what the overlap of neighbouring calls is worth) and `diag_cold_call` (the first
copy's call alone under the written flush, `bench_us`, as the main table times it, same process; and
`diag_cold_call_early_kv`, the same for ours_early_kv); with `--diag`
also `diag_decode_only` (the decode kernel without the in-kernel merge or combine) and `diag_stream_only` (the
consumers skip the math as well), the same stream of calls, wrong outputs (timing only): what the merges and the
math cost per call when no flush is in the way; with `--early-ab n,...` also `diag_early_kv_tiles<n>` (ours_early_kv
from a build whose producer copies at most n tiles before the PDL wait, HPC_ATTN_EARLY_TILES; n = 0: a lap of the
ring, row `diag_early_kv_ring`). With `--fp8q-step` also `step_fp8q` and `step_fp8q_early_kv` (main table): per layer
hpc_common's FP8 Q quantiser (a PDL kernel writing q and its scales, as an attention prologue does) and then the
decode with FP8 Q, plain or with `new_tokens=1`: the early loads overlapping a short kernel, as in serving; the time
is per layer (quantiser included), outputs checked finite. With `--l2-policy` also `diag_kv_l2_normal` (ours with
the KV loads' normal L2 policy instead of evict_first, DIAG flags bit 6).

    python benchmarks/bench_decode_attention_rotation.py [--out-dir benchmarks/results] [--heads 8/1,64/8]
        [--kv bf16,fp8] [--cases 64x0.5K,...] [--reps 30] [--diag] [--early-ab 0,1,3] [--fp8q-step] [--l2-policy]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from bench_decode_attention import CASES, HEADS, PAGE, call_bytes, kv_bytes_of, make_inputs, overrides, parse_case
from hpc_common import pdl_enabled
from hpc_common.bench import BenchResults, bench_back_to_back_us, bench_us, floor_us, gpu_slug
from hpc_common.fp8 import quantize_per_token_head
from hpc_common.testing import error_stats

import hpc_attention as ha
from hpc_attention.reference import decode_reference

ROTATION_BYTES = 256 << 20  # KV bytes of the n copies together: > 4x the H200's L2
MAX_COPIES = 64


def copies_for(kv_bytes: int) -> int:
    """How many input copies a case rotates through (at least 2, so no call follows itself)."""
    return min(MAX_COPIES, max(2, math.ceil(ROTATION_BYTES / kv_bytes)))


def bench_case_rotated(res, case, hq, hkv, kv_dtype, gen, reps, diag=False, early_ab=(), fp8q_step=False,
                       l2_policy=False):
    lens = parse_case(case)
    B, max_len = len(lens), max(lens)
    n = copies_for(kv_bytes_of(lens, hkv, kv_dtype))
    copies = [make_inputs(lens, hq, hkv, kv_dtype, gen) for _ in range(n)]
    q0, k0, v0, pt0, _, (ks, vs) = copies[0]
    nbytes = call_bytes(lens, hkv, kv_dtype, q0, pt0)
    floor = floor_us(nbytes)
    fields = dict(case=case, Hq=hq, Hkv=hkv, kv_dtype=kv_dtype, floor_us=floor, copies=n)
    ref = decode_reference(q0, k0, v0, pt0, lens, sm_scale=128 ** -0.5, k_scale=ks, v_scale=vs, dtype=torch.float32)
    kv_torch = torch.float8_e4m3fn if kv_dtype == "fp8" else torch.bfloat16

    def add(provider, t, out=None, timing="back_to_back"):
        extra = error_stats(out, ref) if out is not None else {}
        row = res.add(provider, t, **fields, tbps=nbytes / (t * 1e-6) / 1e12, timing=timing, **extra)
        print(f"{case:>14} {hq:>2}/{hkv} {kv_dtype:>4} {provider:>14} ({n:>2} copies): {t:8.2f} us  floor {floor:7.2f}"
              f"  {row['tbps']:.2f} TB/s" + (f"  rel_err {extra['rel_err']:.2e}" if extra else ""), flush=True)

    def layer_calls(provider, make_call, static=None):
        """One call per copy: make_call(copy, plan, out) -> a function running it, each copy with its own workspace,
        plan and NaN-poisoned output; every call run once (also the first decode after each plan, which never loads
        KV before its PDL wait) and its output checked finite. Returns the functions and the outputs."""
        fns, outs = [], []
        for copy in copies:
            q, k, v, pt, kv_lens, _ = copy
            ws = ha.DecodeWorkspace(B, hkv, hq, max_len, static_splits=static)
            plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, static_splits=static, kv_dtype=kv_torch,
                                  page_table=pt, page_size=PAGE)
            out = torch.full((B, hq, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
            fns.append(make_call(copy, plan, out))
            outs.append(out)
        for fn in fns:
            fn()
        torch.cuda.synchronize()
        bad = [i for i, out in enumerate(outs) if not torch.isfinite(out).all()]
        if bad:
            raise RuntimeError(f"{case} {hq}/{hkv} {kv_dtype} {provider}: copies {bad[:8]} left non-finite outputs")
        return fns, outs

    providers = (("ours", None, None), ("ours_early_kv", None, 1), ("ours_static", "auto", None))
    for provider, static, new_tokens in providers:
        def decode_call(copy, plan, out, new_tokens=new_tokens):
            q, k, v, pt, kv_lens, _ = copy
            return lambda: ha.decode(q, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, out=out, new_tokens=new_tokens)

        fns, outs = layer_calls(provider, decode_call, static)
        add(provider, bench_back_to_back_us(fns, reps=reps), outs[0].clone())
        if provider == "ours_early_kv":  # the same call alone after the written flush: nothing to overlap
            add("diag_cold_call_early_kv", bench_us(fns[0], reps=100), timing="cold_written_flush")
        for tiles in early_ab if provider == "ours_early_kv" else ():
            # a build copying at most `tiles` tiles (0: a lap of the ring) before the PDL wait
            with overrides(defines=(f"-DHPC_ATTN_EARLY_TILES={tiles}",)):
                name = f"diag_early_kv_tiles{tiles}" if tiles else "diag_early_kv_ring"
                add(name, bench_back_to_back_us(fns, reps=reps))
        if provider == "ours":
            with pdl_enabled(False):
                add("diag_pdl_off", bench_back_to_back_us(fns, reps=reps))
            add("diag_cold_call", bench_us(fns[0], reps=100), timing="cold_written_flush")
            for name, flags in (("diag_decode_only", 0), ("diag_stream_only", 1)) if diag else ():
                with overrides(skip_combine=True, flags=flags):  # read at capture: the graph keeps it
                    add(name, bench_back_to_back_us(fns, reps=reps))
            if l2_policy:
                with overrides(flags=64):  # the KV loads with the normal L2 policy (read at capture)
                    add("diag_kv_l2_normal", bench_back_to_back_us(fns, reps=reps))
    for provider, new_tokens in (("step_fp8q", None), ("step_fp8q_early_kv", 1)) if fp8q_step else ():
        def step_call(copy, plan, out, new_tokens=new_tokens):
            q, k, v, pt, kv_lens, _ = copy
            q8 = torch.empty(B, hq, 128, dtype=torch.float8_e4m3fn, device="cuda")
            q_scale = torch.empty(B, hq, 1, dtype=torch.float32, device="cuda")

            def step():
                # The layer's FP8 Q (a PDL kernel that writes q, as the attention prologue would), then its decode.
                quantize_per_token_head(q, out=q8, scale_out=q_scale)
                ha.decode(q8, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, q_scale=q_scale.view(B, hq), out=out,
                          new_tokens=new_tokens)

            return step

        fns, _ = layer_calls(provider, step_call)
        add(provider, bench_back_to_back_us(fns, reps=reps))
    del copies
    torch.cuda.empty_cache()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--heads", default=None, help="comma list of Hq/Hkv (default: 8/1,64/8)")
    ap.add_argument("--kv", default="bf16,fp8", help="comma list of KV dtypes")
    ap.add_argument("--cases", default=None, help="comma list of cases (default: all six)")
    ap.add_argument("--reps", type=int, default=30, help="graph replays (each runs every copy once)")
    ap.add_argument("--diag", action="store_true", help="also the decode-only and stream-only rows (timing only)")
    ap.add_argument("--fp8q-step", action="store_true",
                    help="also step_fp8q / step_fp8q_early_kv: per layer, Q quantised to FP8 then the decode")
    ap.add_argument("--early-ab", default="",
                    help="comma list of tile counts n: also diag_early_kv_tiles<n>, ours_early_kv built to copy at "
                         "most n tiles before the PDL wait (0: a lap of the ring, row diag_early_kv_ring)")
    ap.add_argument("--l2-policy", action="store_true",
                    help="also diag_kv_l2_normal: the KV loads with the normal L2 policy instead of evict_first")
    args = ap.parse_args()
    heads = [tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")] if args.heads else HEADS
    cases = args.cases.split(",") if args.cases else CASES
    res = BenchResults("decode_attention_rotation", args.out_dir / gpu_slug(), method="input rotation, back to back")
    gen = torch.Generator(device="cuda").manual_seed(0)
    early_ab = [int(x) for x in args.early_ab.split(",") if x]
    for hq, hkv in heads:
        for kv_dtype in args.kv.split(","):
            for case in cases:
                bench_case_rotated(res, case, hq, hkv, kv_dtype, gen, args.reps, diag=args.diag, early_ab=early_ab,
                                   fp8q_step=args.fp8q_step, l2_policy=args.l2_policy)
    diag = res.split_off("decode_attention_rotation_diag", lambda row: row["provider"].startswith("diag_"))
    print(res.markdown())
    print(f"wrote {res.write()}")
    print(f"wrote {diag.write()}")


if __name__ == "__main__":
    main()
