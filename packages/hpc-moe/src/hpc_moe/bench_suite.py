"""hpc-bench suite of the fused MoE (entry point `hpc_ops.bench: moe`): the cases of hpc_moe.bench, one
per model and weight format, and without a GPU the references checked against a per-token loop."""

from __future__ import annotations

import torch
from hpc_common.bench.layouts import Layout
from hpc_common.bench.suite import BenchCase, BenchSuite, check_row

# --quick: Hy3 TP8 in both formats of the README at T = 1, 16, 256, ours against the baselines.
QUICK = (("hy3_tp8", "fp8_block"), ("hy3_tp8", "bf16"))
QUICK_T = (1, 16, 256)
QUICK_PROVIDERS = ("ours", "torch_grouped", "sglang_triton")


class MoESuite(BenchSuite):
    op = "moe"
    title = "Fused MoE (hpc_moe.fused_moe)"
    order = 50
    layouts = (
        Layout("Fused MoE", case=("T",), split=("model", "dtype"), show=("cosine",), error="cosine",
               precision="dtype"),
    )

    def cases(self, quick: bool) -> list[BenchCase]:
        from . import bench

        models = [bench.MODELS[name] for name in dict.fromkeys(m for m, _ in QUICK)] if quick \
            else list(bench.MODELS.values())
        table = bench.case_table(models, bench.DTYPES, QUICK_T if quick else (), False)
        pairs = QUICK if quick else list(dict.fromkeys((r["model"], r["dtype"]) for r in table))
        providers = QUICK_PROVIDERS if quick else bench.PROVIDERS
        out = []
        for model, dtype in pairs:
            cases = [r for r in table if r["model"] == model and r["dtype"] == dtype]
            if cases:
                out.append(BenchCase(f"moe {model} {dtype} T={','.join(str(c['T']) for c in cases)}",
                                     self._runner(bench.MODELS[model], dtype, cases, providers, quick),
                                     est_s=2.0 * len(cases) * len(providers)))
        return out

    def _runner(self, model, dtype, cases, providers, quick):
        def run() -> list[dict]:
            from hpc_common.bench.results import Rows
            from hpc_common.bench.timing import METHODS

            from . import bench

            rows = Rows()
            dev = torch.device("cuda", torch.cuda.current_device())
            bench.run_model_dtype(rows, model, dtype, cases, providers, METHODS, 30 if quick else 50,
                                  10 if quick else 20, dev)
            return rows.rows

        return run

    def meta(self) -> dict:
        from . import bench

        return {"models": {m.name: {"E": m.num_experts, "top_k": m.top_k, "H": m.hidden, "I": m.inter,
                                    "tp": m.tp, "ep": m.ep} for m in bench.MODELS.values()}}

    def cpu_check(self) -> list[dict]:
        from hpc_common.fp8 import reference as fp8_ref

        from . import reference as ref

        g = torch.Generator().manual_seed(0)
        T, H, inter, E, k = 5, 256, 64, 8, 3
        x = torch.randn(T, H, generator=g).to(torch.bfloat16)
        w13 = (torch.randn(E, 2 * inter, H, generator=g) * 0.05).to(torch.bfloat16)
        w2 = (torch.randn(E, H, inter, generator=g) * 0.05).to(torch.bfloat16)
        ids = torch.stack([torch.randperm(2 * E, generator=g)[:k] for _ in range(T)]).int() - 1  # -1, other ranks
        wts = torch.softmax(torch.randn(T, k, generator=g), -1)
        rows = []
        s13 = w13.float().abs().amax(dim=(1, 2)) / 448
        s2 = w2.float().abs().amax(dim=(1, 2)) / 448
        formats = {"bf16": (w13, w2, None, None),
                   "fp8_tensor": (fp8_ref.quantize_with_scale(w13, s13[:, None, None]),
                                  fp8_ref.quantize_with_scale(w2, s2[:, None, None]), s13, s2)}
        for quant, (a, b, sa, sb) in formats.items():
            got = ref.fused_moe_reference_quant(x, a, b, ids, wts, quant=quant, w13_scale=sa, w2_scale=sb,
                                                expert_offset=2)
            xd = ref.dequantize_activations(x, quant)
            wa, wb = ref.dequantize_w13(a, sa, quant), ref.dequantize_w2(b, sb, quant)
            want = torch.zeros(T, H, dtype=torch.float64)
            for t in range(T):  # token by token, pair by pair
                for j in range(k):
                    e = int(ids[t, j]) - 2
                    if int(ids[t, j]) < 0 or not 0 <= e < E:
                        continue
                    h = wa[e] @ xd[t]
                    want[t] += float(wts[t, j]) * (wb[e] @ (torch.nn.functional.silu(h[:inter]) * h[inter:]))
            rows.append(check_row("MoE reference vs per-token loop", (got - want).abs().max().item(), 1e-12,
                                  quant=quant, T=T, E_local=E, top_k=k))
        return rows


SUITE = MoESuite()
