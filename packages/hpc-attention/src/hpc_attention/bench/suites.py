"""hpc-bench suites of hpc-attention (entry points `hpc_ops.bench: decode, prologue`): the cases of
hpc_attention.bench.decode and .prologue, and without a GPU the references checked against
formulas written out here (softmax(q k^T) v per request; RMSNorm then neox RoPE)."""

from __future__ import annotations

import torch
from hpc_common.bench.layouts import Layout
from hpc_common.bench.suite import BenchCase, BenchSuite, check_row

# --quick: both KV dtypes at 8/1 (Hy3 TP8) on the smallest, a mid and the longest case.
QUICK_DECODE = ("64x0.5K", "64x4K", "1x128K+31x4K")
QUICK_TOKENS = (1, 64, 2048)


def _rows():
    from hpc_common.bench.results import Rows

    return Rows()


class DecodeSuite(BenchSuite):
    op = "decode"
    title = "Decode attention (hpc_attention.decode)"
    order, aliases = 10, ("attention",)
    layouts = (
        Layout("Decode attention, page 64, head dim 128", case=("case",), split=("Hq", "Hkv", "kv_dtype"),
               hide=("ours_plan",), show=("rel_err",), error="rel_err", precision="kv_dtype"),
        Layout("Decode planner (`plan_decode`, once per step for all layers)", case=("case", "Hq", "Hkv", "kv_dtype"),
               providers=("ours_plan",), ours="ours_plan"),
    )

    def __init__(self):
        self._gen = None

    def _generator(self):
        if self._gen is None:
            self._gen = torch.Generator(device="cuda").manual_seed(0)
        return self._gen

    def cases(self, quick: bool) -> list[BenchCase]:
        from . import decode as bd

        reps, rot_reps = (50, 20) if quick else (100, 30)
        heads = bd.HEADS[:1] if quick else bd.HEADS
        names = QUICK_DECODE if quick else bd.CASES
        out = [BenchCase("decode planner, batch 256", self._plan_runner(reps), est_s=1.0)]
        for hq, hkv in heads:
            for kv in ("bf16", "fp8"):
                for name in names:
                    out.append(BenchCase(f"decode {name} {hq}/{hkv} {kv}", self._runner(name, hq, hkv, kv, reps, rot_reps),
                                         est_s=4.0 if hq == 64 else 2.5))
        return out

    def _plan_runner(self, reps):
        def run() -> list[dict]:
            from . import decode as bd

            rows = _rows()
            bd.plan_256_rows(rows, reps)
            return rows.rows

        return run

    def _runner(self, name, hq, hkv, kv, reps, rot_reps):
        def run() -> list[dict]:
            from . import decode as bd

            rows = _rows()
            c = bd.Case(name, hq, hkv, kv, self._generator())
            bd.cold_rows(rows, c, reps)
            bd.rotation_rows(rows, c, rot_reps)
            del c
            torch.cuda.empty_cache()
            return rows.rows

        return run

    def cpu_check(self) -> list[dict]:
        from ..reference import decode_reference

        g = torch.Generator().manual_seed(0)
        rows = []
        for kv, (hq, hkv), lens in (("bf16", (8, 1), [5, 130, 64]), ("fp8", (16, 2), [1, 77]),
                                    ("bf16", (4, 4), [200])):
            page, D = 16, 128
            need = [-(-L // page) for L in lens]
            pages = torch.randperm(sum(need), generator=g)
            pt = torch.zeros(len(lens), max(need), dtype=torch.int32)
            pos = 0
            for b, n in enumerate(need):
                pt[b, :n] = pages[pos:pos + n]
                pos += n
            k = torch.randn(sum(need), page, hkv, D, generator=g)
            v = torch.randn(sum(need), page, hkv, D, generator=g)
            ks, vs = (0.5, 0.75) if kv == "fp8" else (1.0, 1.0)
            cast = torch.float8_e4m3fn if kv == "fp8" else torch.bfloat16
            k, v = k.to(cast), v.to(cast)
            q = torch.randn(len(lens), hq, D, generator=g).to(torch.bfloat16)
            got = decode_reference(q, k, v, pt, lens, sm_scale=D ** -0.5, k_scale=ks, v_scale=vs)
            want = torch.zeros_like(got)
            for b, L in enumerate(lens):  # request by request, head by head, straight from the formula
                slots = torch.arange(L)
                ids = pt[b, slots // page].long()
                kb = k[ids, slots % page].double() * ks  # [L, Hkv, D]
                vb = v[ids, slots % page].double() * vs
                for h in range(hq):
                    s = (kb[:, h // (hq // hkv)] @ q[b, h].double()) * D ** -0.5
                    p = torch.exp(s - s.max())
                    want[b, h] = (p / p.sum()) @ vb[:, h // (hq // hkv)]
            rows.append(check_row("decode reference vs softmax(q k^T / sqrt(d)) v per request",
                                  (got - want).abs().max().item(), 1e-12, kv_dtype=kv, heads=f"{hq}/{hkv}",
                                  lens="+".join(map(str, lens))))
        return rows


class PrologueSuite(BenchSuite):
    op = "prologue"
    title = "Fused attention prologue (hpc_attention.qk_norm_rope_store)"
    order, aliases = 20, ("attention",)
    layouts = (
        Layout("Fused prologue alone (QK-Norm, RoPE, Q out, paged KV write)", case=("T",),
               split=("Hq", "Hkv", "kv_dtype"), where={"part": "prologue"}),
        Layout("A decode layer's attention step (prologue, then decode)", case=("case",),
               split=("Hq", "Hkv", "kv_dtype"), where={"part": "step"}),
    )

    def __init__(self):
        self._state = None

    def _inputs(self):
        if self._state is None:
            from ..reference import rope_cos_sin_cache
            from . import prologue as bp

            self._state = (rope_cos_sin_cache(bp.MAX_POS, bp.ROTARY).cuda(),
                           torch.Generator(device="cuda").manual_seed(0))
        return self._state

    def cases(self, quick: bool) -> list[BenchCase]:
        from . import prologue as bp

        reps, rot_reps = (50, 20) if quick else (100, 30)
        heads = bp.HEADS[:1] if quick else bp.HEADS
        out = []
        for hq, hkv in heads:
            for kv in bp.KV:
                for T in (QUICK_TOKENS if quick else bp.TOKENS):
                    out.append(BenchCase(f"prologue T={T} {hq}/{hkv} {kv}",
                                         self._runner(bp.prologue_rows, T, hq, hkv, kv, ("cold", "rotation"),
                                                      reps, rot_reps), est_s=2.0))
        if not quick:
            for hq, hkv in heads:
                for kv in bp.KV:
                    for name in bp.STEP_CASES:
                        out.append(BenchCase(f"prologue step {name} {hq}/{hkv} {kv}",
                                             self._runner(bp.step_rows, name, hq, hkv, kv, rot_reps), est_s=4.0))
        return out

    def _runner(self, fn, *args):
        def run() -> list[dict]:
            cos_sin, gen = self._inputs()
            rows = _rows()
            fn(rows, *args, cos_sin, gen)
            torch.cuda.empty_cache()
            return rows.rows

        return run

    def cpu_check(self) -> list[dict]:
        from ..reference import prologue_reference, rope_cos_sin_cache

        g = torch.Generator().manual_seed(1)
        rows = []
        for T, hq, hkv in ((1, 8, 1), (9, 16, 2)):
            D, eps = 128, 1e-5
            cs = rope_cos_sin_cache(512, D)
            qkv = torch.randn(T, (hq + 2 * hkv) * D, generator=g).to(torch.bfloat16)
            pos = torch.randint(0, 512, (T,), generator=g)
            wq = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16)
            wk = (1 + 0.1 * torch.randn(D, generator=g)).to(torch.bfloat16)
            q, k, v = prologue_reference(qkv, pos, cs, num_qo_heads=hq, num_kv_heads=hkv, q_norm_weight=wq,
                                         k_norm_weight=wk, eps=eps, rotary_dim=D, dtype=torch.float64)
            x = qkv.double().view(T, hq + 2 * hkv, D)

            def norm_rope(t, w):  # RMSNorm over the head dim, then neox RoPE (pairs i, i + D/2)
                t = t / torch.sqrt((t * t).mean(-1, keepdim=True) + eps) * w.double()
                cos, sin = cs.double()[pos].chunk(2, dim=-1)
                a, b = t[..., :D // 2], t[..., D // 2:]
                return torch.cat([a * cos[:, None] - b * sin[:, None], b * cos[:, None] + a * sin[:, None]], -1)

            want = (norm_rope(x[:, :hq], wq), norm_rope(x[:, hq:hq + hkv], wk), x[:, hq + hkv:])
            err = max((a - b).abs().max().item() for a, b in zip((q, k, v), want))
            rows.append(check_row("prologue reference vs RMSNorm + neox RoPE formula", err, 1e-10, T=T,
                                  heads=f"{hq}/{hkv}"))
        return rows


DECODE = DecodeSuite()
PROLOGUE = PrologueSuite()
