"""Decode attention (`hpc_attention.decode`) on the brief's six cases: 8/1 and 64/8 heads, BF16 and FP8 KV, page 64.

Providers: `ours` (the dynamic plan, built once per step outside the timed call, given the page table),
`ours_static` (the same kernel on the static split-KV plan), `ours_plan` (the device planner alone, per case and
at batch 256, cold only), `ours_early_kv` (rotation only: `decode(new_tokens=1)`, each call's producer reads its
plan entries and first older KV tiles before its PDL wait while the previous call ends; the promise holds, since
no call writes another copy's inputs), and FlashInfer's paged batch decode (the better of its CUDA-core and
tensor-core paths, `plan()` outside the timed call) and FlashAttention-3 when importable (cold only).

Methods (`--method`, default both; every row carries it in `method`; all rows go to `decode.{json,md}`):
- cold: the call captured in a CUDA graph after a 128 MB written L2 flush, events around the call, median of
  `--reps` replays (hpc_common.bench.cold_us).
- rotation: n copies of the call's inputs (KV, q, page table, lengths, plan, workspace; together >= 256 MB of
  KV), n calls back to back in one CUDA graph with PDL, time per call = replay / n, median of `--rotation-reps`
  replays (hpc_common.bench.rotation_us). Every copy's output is NaN-poisoned first and must be finite.

Every row carries the bandwidth floor (KV + q + out + page-table bytes over 4.27 TB/s) and the achieved TB/s;
rows with outputs carry the error against float32 attention on the dequantised inputs.

    python -m hpc_attention.bench.decode [--out-dir benchmarks/results] [--method cold|rotation|both]
        [--heads 8/1,64/8] [--kv bf16,fp8] [--cases 64x4K,1x128K+31x4K] [--reps 100] [--rotation-reps 30] [--quick]

(benchmarks/bench_decode.py is the same command; `hpc-bench --ops decode` runs a subset through
hpc_attention.bench.suites.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from hpc_common.bench import BenchResults, cold_us, floor_us, gpu_slug, methods, rotation_copies, rotation_us
from hpc_common.bench.suite import skip
from hpc_common.testing import error_stats

import hpc_attention as ha
from hpc_attention.reference import decode_reference

CASES = ["64x0.5K", "64x4K", "32x128+32x4K", "2x32K+30x4K", "1x64K+15x4K", "1x128K+31x4K"]
HEADS = [(8, 1), (64, 8)]
PAGE = 64
FP8 = torch.float8_e4m3fn
MAX_COPIES = 64  # rotation copies at most (the smallest case, 8/1 FP8 64x0.5K, takes 32)


def parse_case(case: str) -> list[int]:
    lens = []
    for part in case.split("+"):
        n, length = part.split("x")
        tokens = int(float(length[:-1]) * 1024) if length.endswith("K") else int(length)
        lens += [tokens] * int(n)
    return lens


def page_table_of(need, pages):
    """[B, max pages] int32 table whose row b holds the next need[b] ids of `pages`, in order."""
    pt = torch.zeros(len(need), max(need), dtype=torch.int32, device=pages.device)
    pos = 0
    for b, n in enumerate(need):
        pt[b, :n] = pages[pos:pos + n]
        pos += n
    return pt


def kv_bytes_of(lens, hkv, kv_dtype) -> int:
    """K and V bytes of a case's requests (head dim 128)."""
    return 2 * sum(lens) * hkv * 128 * (1 if kv_dtype == "fp8" else 2)


def call_bytes(lens, hkv, kv_dtype, q, pt) -> int:
    """The bytes a decode call must move, its floor's numerator: K and V, q read and the output written (BF16,
    q's shape), the page table."""
    return kv_bytes_of(lens, hkv, kv_dtype) + 2 * q.numel() * 2 + pt.numel() * 4


def make_inputs(lens, hq, hkv, kv_dtype, gen):
    """q, K / V caches (pages in a random permutation), page table, lengths and the per-tensor KV scales."""
    dev = torch.device("cuda")
    need = [(L + PAGE - 1) // PAGE for L in lens]
    num_pages = sum(need)
    shape = (num_pages, PAGE, hkv, 128)
    if kv_dtype == "fp8":
        k = torch.randn(shape, device=dev, generator=gen).to(FP8)
        v = torch.randn(shape, device=dev, generator=gen).to(FP8)
        scales = (0.5, 0.75)
    else:
        k = torch.randn(shape, device=dev, generator=gen, dtype=torch.bfloat16)
        v = torch.randn(shape, device=dev, generator=gen, dtype=torch.bfloat16)
        scales = (1.0, 1.0)
    pt = page_table_of(need, torch.randperm(num_pages, device=dev, generator=gen).int())
    q = torch.randn(len(lens), hq, 128, device=dev, generator=gen, dtype=torch.bfloat16)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=dev)
    return q, k, v, pt, kv_lens, scales


class Case:
    """One case under one head layout and KV dtype: its inputs, floor and float32 reference."""

    def __init__(self, name, hq, hkv, kv_dtype, gen):
        self.name, self.hq, self.hkv, self.kv_dtype = name, hq, hkv, kv_dtype
        self.lens = parse_case(name)
        self.gen = gen
        self.kv_torch = FP8 if kv_dtype == "fp8" else torch.bfloat16
        self.inputs = make_inputs(self.lens, hq, hkv, kv_dtype, gen)
        q, k, v, pt, _, (ks, vs) = self.inputs
        self.nbytes = call_bytes(self.lens, hkv, kv_dtype, q, pt)
        self.fields = dict(case=name, Hq=hq, Hkv=hkv, kv_dtype=kv_dtype, floor_us=floor_us(self.nbytes))
        self.ref = decode_reference(q, k, v, pt, self.lens, sm_scale=128 ** -0.5, k_scale=ks, v_scale=vs,
                                    dtype=torch.float32)

    def plan(self, inputs, static_splits=None):
        q, k, v, pt, kv_lens, _ = inputs
        ws = ha.DecodeWorkspace(len(self.lens), self.hkv, self.hq, max(self.lens), static_splits=static_splits)
        return ha.plan_decode(kv_lens, self.hkv, self.hq, workspace=ws, static_splits=static_splits,
                              kv_dtype=self.kv_torch, page_table=pt, page_size=PAGE)

    def call(self, inputs, plan, out, new_tokens=None):
        q, k, v, pt, kv_lens, (ks, vs) = inputs
        return lambda: ha.decode(q, k, v, pt, kv_lens, plan, k_scale=ks, v_scale=vs, out=out, new_tokens=new_tokens)

    def add(self, res, method, provider, t, out=None, **extra):
        err = error_stats(out, self.ref) if out is not None else {}
        tbps = self.nbytes / (t * 1e-6) / 1e12 if self.fields["floor_us"] is not None else None
        row = res.add(provider, t, method=method, **self.fields, tbps=tbps, **extra, **err)
        print(f"{self.name:>14} {self.hq:>2}/{self.hkv} {self.kv_dtype:>4} {method:>8} {provider:>14}: {t:8.2f} us"
              f"  floor {self.fields['floor_us']:7.2f}  {row['tbps']:.2f} TB/s"
              + (f"  rel_err {err['rel_err']:.2e}" if err else ""), flush=True)


# ---- cold: one call after the written flush ---------------------------------------------------------------------

def flashinfer_us(c: Case, reps: int) -> float:
    import flashinfer  # optional

    q, k, v, pt, _, (ks, vs) = c.inputs
    dev = q.device
    need = [(L + PAGE - 1) // PAGE for L in c.lens]
    indptr = torch.tensor([0] + list(torch.tensor(need).cumsum(0).tolist()), dtype=torch.int32, device=dev)
    indices = torch.cat([pt[b, :n] for b, n in enumerate(need)])
    last = torch.tensor([L - (n - 1) * PAGE for L, n in zip(c.lens, need)], dtype=torch.int32, device=dev)
    best = None
    for tc in (False, True):
        ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=tc)
        w.plan(indptr, indices, last, c.hq, c.hkv, 128, PAGE, q_data_type=torch.bfloat16, kv_data_type=k.dtype)
        t = cold_us(lambda w=w: w.run(q, (k, v), k_scale=ks, v_scale=vs), reps=reps)
        best = t if best is None else min(best, t)
    return best


def flash_attn_us(c: Case, reps: int) -> float:
    from flash_attn_interface import flash_attn_with_kvcache  # FA3 (optional)

    q, k, v, pt, kv_lens, _ = c.inputs
    return cold_us(lambda: flash_attn_with_kvcache(q.unsqueeze(1), k, v, cache_seqlens=kv_lens, page_table=pt),
                    reps=reps)


def cold_rows(res, c: Case, reps: int) -> None:
    B = len(c.lens)
    for provider, static in (("ours", None), ("ours_static", "auto")):
        plan = c.plan(c.inputs, static)
        out = torch.empty(B, c.hq, 128, dtype=torch.bfloat16, device="cuda")
        fn = c.call(c.inputs, plan, out)
        fn()
        torch.cuda.synchronize()
        c.add(res, "cold", provider, cold_us(fn, reps=reps), out.clone())
        if provider == "ours":
            q, k, v, pt, kv_lens, _ = c.inputs
            ws = plan.workspace
            t = cold_us(lambda: ha.plan_decode(kv_lens, c.hkv, c.hq, workspace=ws, kv_dtype=c.kv_torch,
                                                page_table=pt, page_size=PAGE, validate=False), reps=reps)
            res.add("ours_plan", t, method="cold", **dict(c.fields, floor_us=None))
            print(f"{c.name:>14} {c.hq:>2}/{c.hkv} {c.kv_dtype:>4} {'cold':>8} {'ours_plan':>14}: {t:8.2f} us",
                  flush=True)
    for name, timed in (("flashinfer", flashinfer_us), ("flash_attn", flash_attn_us)):
        try:
            c.add(res, "cold", name, timed(c, reps))
        except Exception as e:  # optional baselines: absent or unsupported here
            print(f"{c.name:>14} {c.hq:>2}/{c.hkv} {c.kv_dtype:>4} {'cold':>8} {name:>14}: skipped "
                  f"({type(e).__name__}: {str(e)[:80]})")
            skip(name, f"{type(e).__name__}: {str(e)[:160]}")


def plan_256_rows(res, reps: int) -> None:
    """The planner alone at batch 256 (once per decode step for all layers). Timed twice, the second kept: the
    first timing of the plan in a process reads 0.3-0.5 us lower than every later one on the same buffers, so
    it is not what a serving process sees step after step."""
    for hkv in (1, 8):
        kv_lens = torch.full((256,), 4096, dtype=torch.int32, device="cuda")
        kv_lens[::7] = 100
        ws = ha.DecodeWorkspace(256, hkv, 8 * hkv, 4096)

        def plan():
            ha.plan_decode(kv_lens, hkv, 8 * hkv, workspace=ws, validate=False)

        cold_us(plan, reps=reps)
        t = cold_us(plan, reps=reps)
        res.add("ours_plan", t, method="cold", case="256x4K", Hq=8 * hkv, Hkv=hkv, kv_dtype="any")
        print(f"{'256x4K':>14} {8 * hkv:>2}/{hkv}  any {'cold':>8} {'ours_plan':>14}: {t:8.2f} us", flush=True)


# ---- rotation: a stream of calls, each on its own cold inputs -----------------------------------------------------

def rotation_rows(res, c: Case, reps: int) -> None:
    B = len(c.lens)
    n = rotation_copies(kv_bytes_of(c.lens, c.hkv, c.kv_dtype), cap=MAX_COPIES)  # their KV: >= 256 MB
    copies = [c.inputs] + [make_inputs(c.lens, c.hq, c.hkv, c.kv_dtype, c.gen) for _ in range(n - 1)]
    for provider, static, new_tokens in (("ours", None, None), ("ours_early_kv", None, 1),
                                         ("ours_static", "auto", None)):
        fns, outs = [], []
        for inputs in copies:
            out = torch.full((B, c.hq, 128), float("nan"), dtype=torch.bfloat16, device="cuda")
            fns.append(c.call(inputs, c.plan(inputs, static), out, new_tokens))
            outs.append(out)
        for fn in fns:  # also the first decode after each plan, which never loads KV before its PDL wait
            fn()
        torch.cuda.synchronize()
        bad = [i for i, out in enumerate(outs) if not torch.isfinite(out).all()]
        if bad:
            raise RuntimeError(f"{c.name} {c.hq}/{c.hkv} {c.kv_dtype} {provider}: copies {bad[:8]} left "
                               "non-finite outputs")
        c.add(res, "rotation", provider, rotation_us(fns, reps=reps), outs[0].clone(), copies=n,
              timing="back_to_back")
    del copies


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--method", default="both", help="cold, rotation or both (default)")
    ap.add_argument("--heads", default=None, help="comma list of Hq/Hkv (default: 8/1,64/8; --quick: 8/1)")
    ap.add_argument("--kv", default="bf16,fp8", help="comma list of KV dtypes")
    ap.add_argument("--cases", default=None, help="comma list of cases (default: all six)")
    ap.add_argument("--reps", type=int, default=100, help="cold: replays per row (at least 50)")
    ap.add_argument("--rotation-reps", type=int, default=30, help="rotation: graph replays (at least 20)")
    ap.add_argument("--quick", action="store_true", help="8/1 heads only, 50 / 20 replays")
    args = ap.parse_args(argv)
    heads = HEADS[:1] if args.quick else HEADS
    if args.heads:
        heads = [tuple(int(x) for x in h.split("/")) for h in args.heads.split(",")]
    reps, rot_reps = (50, 20) if args.quick else (args.reps, args.rotation_reps)
    cases = args.cases.split(",") if args.cases else CASES
    run_methods = methods(args.method)
    res = BenchResults("decode", args.out_dir / gpu_slug())
    gen = torch.Generator(device="cuda").manual_seed(0)
    if "cold" in run_methods:
        plan_256_rows(res, reps)
    for hq, hkv in heads:
        for kv_dtype in args.kv.split(","):
            for name in cases:
                c = Case(name, hq, hkv, kv_dtype, gen)
                if "cold" in run_methods:
                    cold_rows(res, c, reps)
                if "rotation" in run_methods:
                    rotation_rows(res, c, rot_reps)
                del c
                torch.cuda.empty_cache()
    print(res.markdown())
    print(f"wrote {res.write()}")


if __name__ == "__main__":
    main()
