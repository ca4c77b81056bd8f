"""The fused attention prologue (`hpc_attention.qk_norm_rope_store`): alone, and in a decode layer's attention step.

Every row has `part`: "prologue" or "step" (tools/readme_results.py tabulates the first).

Prologue rows (part "prologue"): T = 1, 8, 64, 256 (decode) and 2048, 8192 (prefill) tokens at 8/1 (Hy3 TP8) and
64/8 heads, QK-Norm on, neox RoPE over 128 dims, eps 1e-5; BF16 KV with BF16 Q, FP8 KV with FP8 Q (per-token-head
scales). Providers: `ours` (one kernel) and `unfused` (the torch sequence a user writes without it: rms_norm on
q and k, RoPE from the gathered cos / sin rows, the per-token-head FP8 quantisation of Q and the KV quantisation
as torch element-wise ops, index_copy_ into the caches). Both methods (`--method`, default both):
- cold: the call in a CUDA graph after a 128 MB written L2 flush (hpc_common.bench.cold_us);
- rotation: one copy of the call's inputs (qkv, ids, norm weights, caches, outputs) per call, at least 256 MB
  together (at most 256 copies), back to back in one CUDA graph with PDL (hpc_common.bench.rotation_us). The
  cos / sin cache is one tensor for all copies, as it is one for all layers of a model.
floor_us: the bytes the call must move (qkv, ids and cos / sin rows read; Q, its scales and the K / V rows
written) over 4.27 TB/s.

Step rows (part "step", `case` = a decode case of hpc_attention.bench.decode; rotation only): per copy one decode step of one
layer on that case's batch, each request's newest token written by the step, at 8/1 and 64/8, BF16 and FP8 KV.
Providers: `ours` (the prologue, then decode(new_tokens=1) chained by PDL), `unfused` (the torch sequence, then the same
decode), `decode_only` (the decode alone: what the step would cost if the prologue were free). floor_us: the
decode's bytes plus the prologue's.

    python -m hpc_attention.bench.prologue [--out-dir DIR] [--method cold|rotation|both] [--part prologue,step]
        [--reps 100] [--rotation-reps 30] [--quick] [--dry-run]

Results: DIR/<gpu>/prologue.json and prologue.md (DIR defaults to benchmarks/results, as the other benchmarks).
--quick: T = 1, 64, 2048 and the step cases 64x4K, 1x128K+31x4K at 8/1 only (about a minute). --dry-run (no GPU
needed): print the case table and the floors. (benchmarks/bench_prologue.py is the same command; `hpc-bench --ops
prologue` runs a subset through hpc_attention.bench.suites.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from . import decode as bd  # the decode cases, their inputs and bytes

FP8 = torch.float8_e4m3fn
D = 128
TOKENS = [1, 8, 64, 256, 2048, 8192]
HEADS = [(8, 1), (64, 8)]
KV = ["bf16", "fp8"]
STEP_CASES = bd.CASES
ROTARY, EPS, MAX_POS = 128, 1e-5, 131072  # positions up to the 128K context of the longest step case
KV_SCALE = 0.05
MAX_COPIES = 256


def prologue_bytes(T: int, hq: int, hkv: int, fp8: bool) -> int:
    """Bytes the prologue must move: qkv, positions, slots and one cos / sin row per token read (int64 ids, FP32
    cache); Q (+ its FP32 scales with FP8 Q) and K, V of every token written."""
    e = 1 if fp8 else 2
    read = T * (hq + 2 * hkv) * D * 2 + T * (8 + 8 + ROTARY * 4)
    written = T * hq * D * e + (T * hq * 4 if fp8 else 0) + 2 * T * hkv * D * e
    return read + written


def case_table(parts, tokens, heads, kvs, step_cases) -> list[dict]:
    from hpc_common.bench import floor_us

    rows = []
    if "prologue" in parts:
        for hq, hkv in heads:
            for kv in kvs:
                for T in tokens:
                    rows.append(dict(part="prologue", T=T, Hq=hq, Hkv=hkv, kv_dtype=kv,
                                     floor_us=floor_us(prologue_bytes(T, hq, hkv, kv == "fp8"))))
    if "step" in parts:
        for hq, hkv in heads:
            for kv in kvs:
                for name in step_cases:
                    lens = bd.parse_case(name)
                    B = len(lens)
                    pages = sum(-(-L // bd.PAGE) for L in lens)
                    dec = bd.kv_bytes_of(lens, hkv, kv) + 2 * B * hq * D * 2 + pages * 4
                    rows.append(dict(part="step", case=name, T=B, Hq=hq, Hkv=hkv, kv_dtype=kv,
                                     floor_us=floor_us(dec + prologue_bytes(B, hq, hkv, kv == "fp8"))))
    return rows


# ---- the two prologues ----------------------------------------------------------------------------------------

class Prologue:
    """One copy of a prologue call's inputs and outputs (its own qkv, ids, weights, caches, outputs)."""

    def __init__(self, T, hq, hkv, fp8, cos_sin, gen, *, caches=None, positions=None, slots=None):
        dev = cos_sin.device  # CUDA in the benchmark; the CPU in tests of the unfused sequence
        self.T, self.hq, self.hkv, self.fp8 = T, hq, hkv, fp8
        self.qkv = torch.randn(T, (hq + 2 * hkv) * D, device=dev, generator=gen).to(torch.bfloat16)
        self.cos_sin = cos_sin
        self.wq = (1 + 0.1 * torch.randn(D, device=dev, generator=gen)).to(torch.bfloat16)
        self.wk = (1 + 0.1 * torch.randn(D, device=dev, generator=gen)).to(torch.bfloat16)
        if caches is None:
            pages = -(-T // bd.PAGE) + 1
            kv = FP8 if fp8 else torch.bfloat16
            caches = tuple(torch.zeros(pages, bd.PAGE, hkv, D, device=dev, dtype=torch.bfloat16).to(kv)
                           for _ in range(2))
            slots = torch.randperm(pages * bd.PAGE, device=dev, generator=gen)[:T]
            positions = torch.randint(0, MAX_POS, (T,), device=dev, generator=gen)
        self.k_cache, self.v_cache = caches
        self.positions, self.slots = positions, slots
        self.out_q = torch.empty(T, hq, D, device=dev, dtype=FP8 if fp8 else torch.bfloat16)
        self.out_qs = torch.empty(T, hq, device=dev, dtype=torch.float32) if fp8 else None
        self.scales = dict(k_scale=KV_SCALE, v_scale=KV_SCALE) if fp8 else {}

    def ours(self):
        import hpc_attention as ha

        return lambda: ha.qk_norm_rope_store(
            self.qkv, self.positions, self.cos_sin, self.k_cache, self.v_cache, self.slots, num_qo_heads=self.hq,
            num_kv_heads=self.hkv, q_norm_weight=self.wq, k_norm_weight=self.wk, eps=EPS,
            q_out_dtype=self.out_q.dtype, out_q=self.out_q, out_q_scale=self.out_qs, validate=False, **self.scales)

    def unfused(self):
        F = torch.nn.functional
        hq, hkv, T = self.hq, self.hkv, self.T
        half = ROTARY // 2
        inv = torch.full((1,), 1.0 / KV_SCALE, device=self.qkv.device)

        def quant(x, inv_scale):  # e4m3(x * (1 / scale)), saturating
            return (x * inv_scale).clamp(-448.0, 448.0).to(FP8)

        def run():
            x = self.qkv.view(T, hq + 2 * hkv, D)
            q = F.rms_norm(x[:, :hq], (D,), self.wq, EPS)
            k = F.rms_norm(x[:, hq:hq + hkv], (D,), self.wk, EPS)
            cos, sin = self.cos_sin[self.positions].unsqueeze(1).chunk(2, dim=-1)

            def rope(t):
                a, b = t[..., :half].float(), t[..., half:].float()
                return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

            q, k = rope(q), rope(k)
            v = x[:, hq + hkv:]
            if self.fp8:
                s = q.abs().amax(-1, keepdim=True).clamp(min=1e-10) / 448.0
                self.out_q.copy_(quant(q, 1.0 / s))
                self.out_qs.copy_(s.squeeze(-1))
                k8, v8 = quant(k, inv), quant(v.float(), inv)
                self.k_cache.view(torch.uint8).view(-1, hkv, D).index_copy_(0, self.slots, k8.view(torch.uint8))
                self.v_cache.view(torch.uint8).view(-1, hkv, D).index_copy_(0, self.slots, v8.view(torch.uint8))
            else:
                self.out_q.copy_(q)
                self.k_cache.view(-1, hkv, D).index_copy_(0, self.slots, k.to(torch.bfloat16))
                self.v_cache.view(-1, hkv, D).index_copy_(0, self.slots, v)

        return run


def check_close(p: Prologue) -> float:
    """ours against unfused on one copy: max |difference| of Q (dequantised) over max |Q|, a sanity check that
    both providers compute the same thing (they round differently: the unfused norm rounds to BF16)."""
    p.ours()()
    q1 = p.out_q.float() * (p.out_qs[..., None] if p.fp8 else 1)
    p.unfused()()
    q2 = p.out_q.float() * (p.out_qs[..., None] if p.fp8 else 1)
    torch.cuda.synchronize()
    err = float((q1 - q2).abs().max() / q2.abs().max())
    if not err < 0.1:
        raise RuntimeError(f"ours and unfused disagree (max |dq| {err}) at T={p.T} {p.hq}/{p.hkv} fp8={p.fp8}")
    return err


def prologue_rows(res, T, hq, hkv, kv, run_methods, reps, rot_reps, cos_sin, gen) -> None:
    from hpc_common.bench import cold_us, floor_us, rotation_copies, rotation_us

    fp8 = kv == "fp8"
    nbytes = prologue_bytes(T, hq, hkv, fp8)
    fields = dict(part="prologue", T=T, Hq=hq, Hkv=hkv, kv_dtype=kv, q_dtype="fp8" if fp8 else "bf16",
                  floor_us=floor_us(nbytes))
    first = Prologue(T, hq, hkv, fp8, cos_sin, gen)
    err = check_close(first)
    copies = None
    for provider in ("ours", "unfused"):
        for method in run_methods:
            if method == "cold":
                t = cold_us(getattr(first, provider)(), reps=reps)
                extra = {}
            else:
                if copies is None:
                    n = rotation_copies(nbytes, cap=MAX_COPIES)
                    copies = [first] + [Prologue(T, hq, hkv, fp8, cos_sin, gen) for _ in range(n - 1)]
                t = rotation_us([getattr(c, provider)() for c in copies], reps=rot_reps)
                extra = dict(copies=len(copies), timing="back_to_back")
            row = res.add(provider, t, method=method, **fields, tbps=nbytes / (t * 1e-6) / 1e12, **extra)
            print(f"T={T:>5} {hq:>2}/{hkv} {kv:>4} {method:>8} {provider:>8}: {t:8.2f} us  floor "
                  f"{fields['floor_us']:7.2f}  {row['tbps']:.2f} TB/s  (ours vs unfused {err:.1e})", flush=True)
    del copies


# ---- a decode layer's attention step ------------------------------------------------------------------------------

class Step:
    """One copy of a decode step on a decode benchmark case: its KV caches, page table and lengths (the newest token
    of each request is the one the step writes), its prologue inputs, plan and output."""

    def __init__(self, name, hq, hkv, kv, cos_sin, gen):
        import hpc_attention as ha

        lens = bd.parse_case(name)
        self.inputs = bd.make_inputs(lens, hq, hkv, kv, gen)
        q, k, v, pt, kv_lens, _ = self.inputs
        B = len(lens)
        last = kv_lens.long() - 1
        slots = pt.gather(1, (last // bd.PAGE)[:, None]).squeeze(1).long() * bd.PAGE + last % bd.PAGE
        fp8 = kv == "fp8"
        self.pro = Prologue(B, hq, hkv, fp8, cos_sin, gen, caches=(k, v), positions=last.clamp(max=MAX_POS - 1),
                            slots=slots)
        ws = ha.DecodeWorkspace(B, hkv, hq, max(lens))
        self.plan = ha.plan_decode(kv_lens, hkv, hq, workspace=ws, kv_dtype=k.dtype, page_table=pt,
                                   page_size=bd.PAGE)
        self.out = torch.full((B, hq, D), float("nan"), dtype=torch.bfloat16, device="cuda")
        self.scales = dict(k_scale=KV_SCALE, v_scale=KV_SCALE) if fp8 else {}

    def decode(self):
        import hpc_attention as ha

        _, k, v, pt, kv_lens, _ = self.inputs
        p = self.pro
        return lambda: ha.decode(p.out_q, k, v, pt, kv_lens, self.plan, q_scale=p.out_qs, out=self.out,
                                 new_tokens=1, **self.scales)

    def fn(self, provider):
        dec = self.decode()
        if provider == "decode_only":
            return dec
        pro = getattr(self.pro, provider)()

        def run():
            pro()
            dec()

        return run


def step_rows(res, name, hq, hkv, kv, rot_reps, cos_sin, gen) -> None:
    from hpc_common.bench import floor_us, rotation_copies, rotation_us

    lens = bd.parse_case(name)
    B = len(lens)
    pages = sum(-(-L // bd.PAGE) for L in lens)
    dec_bytes = bd.kv_bytes_of(lens, hkv, kv) + 2 * B * hq * D * 2 + pages * 4
    nbytes = dec_bytes + prologue_bytes(B, hq, hkv, kv == "fp8")
    n = rotation_copies(bd.kv_bytes_of(lens, hkv, kv), cap=bd.MAX_COPIES)
    copies = [Step(name, hq, hkv, kv, cos_sin, gen) for _ in range(n)]
    fields = dict(part="step", case=name, T=B, Hq=hq, Hkv=hkv, kv_dtype=kv,
                  q_dtype="fp8" if kv == "fp8" else "bf16", floor_us=floor_us(nbytes))
    for provider in ("ours", "unfused", "decode_only"):
        fns = [c.fn(provider) for c in copies]
        for c in copies:  # the Q of decode_only, and the first decode after each plan (never early)
            c.pro.ours()()
            c.out.fill_(float("nan"))
        for f in fns:
            f()
        torch.cuda.synchronize()
        bad = [i for i, c in enumerate(copies) if not torch.isfinite(c.out).all()]
        if bad:
            raise RuntimeError(f"{name} {hq}/{hkv} {kv} {provider}: copies {bad[:8]} left non-finite outputs")
        t = rotation_us(fns, reps=rot_reps)
        row = res.add(provider, t, method="rotation", **fields, tbps=nbytes / (t * 1e-6) / 1e12, copies=n,
                      timing="back_to_back")
        print(f"{name:>14} {hq:>2}/{hkv} {kv:>4} step {provider:>11}: {t:8.2f} us  floor {fields['floor_us']:7.2f}"
              f"  {row['tbps']:.2f} TB/s", flush=True)
    del copies


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"),
                    help="results go to OUT_DIR/<gpu>/prologue.{json,md}")
    ap.add_argument("--method", default="both", help="prologue rows: cold, rotation or both (step rows: rotation)")
    ap.add_argument("--part", default="prologue,step", help="comma list of prologue, step")
    ap.add_argument("--reps", type=int, default=100, help="cold: replays per row (at least 50)")
    ap.add_argument("--rotation-reps", type=int, default=30, help="rotation: graph replays (at least 20)")
    ap.add_argument("--quick", action="store_true", help="T = 1, 64, 2048 and two step cases, 8/1 only")
    ap.add_argument("--dry-run", action="store_true", help="print the case table and floors (no GPU)")
    args = ap.parse_args(argv)
    parts = args.part.split(",")
    tokens, heads, step_cases = TOKENS, HEADS, STEP_CASES
    reps, rot_reps = args.reps, args.rotation_reps
    if args.quick:
        tokens, heads, step_cases, reps, rot_reps = [1, 64, 2048], HEADS[:1], ["64x4K", "1x128K+31x4K"], 50, 20
    if args.dry_run:
        from hpc_common.bench.results import markdown_table

        rows = case_table(parts, tokens, heads, KV, step_cases)
        print("\n".join(markdown_table(rows, cell=lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))))
        print(f"{len(rows)} cases")
        return
    from hpc_attention.reference import rope_cos_sin_cache
    from hpc_common.bench import BenchResults, gpu_slug, methods

    run_methods = methods(args.method)
    res = BenchResults("prologue", args.out_dir / gpu_slug())
    gen = torch.Generator(device="cuda").manual_seed(0)
    cos_sin = rope_cos_sin_cache(MAX_POS, ROTARY).cuda()
    if "prologue" in parts:
        for hq, hkv in heads:
            for kv in KV:
                for T in tokens:
                    prologue_rows(res, T, hq, hkv, kv, run_methods, reps, rot_reps, cos_sin, gen)
                    torch.cuda.empty_cache()
    if "step" in parts:
        for hq, hkv in heads:
            for kv in KV:
                for name in step_cases:
                    step_rows(res, name, hq, hkv, kv, rot_reps, cos_sin, gen)
                    torch.cuda.empty_cache()
    print(res.markdown())
    print(f"wrote {res.write()}")


if __name__ == "__main__":
    main()
