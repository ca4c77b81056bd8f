"""Fused MoE on the H200 (BRIEF 2.3 / 3.3): ours against an unfused run of the same kernels, a torch
grouped-GEMM MoE and SGLang's Triton `fused_experts`, at decode sizes, by both timing methods of
BRIEF section 3, with the floor of every row and each provider's cosine against a float32 reference.

Cases: Hy3 TP8/EP1 (E=192, top-8, H=4096, I=192; T = 1 .. 256), Hy3 TP1/EP8 (24 local experts of
192 on EP rank 0, I=1536; T = 4 .. 256), Qwen3-235B-A22B TP8 (E=128, top-8, H=4096, I=192), each in
bf16, fp8_block (128x128 weight blocks, activations per token and group of 128) and fp8_tensor
(per-expert weight scales, activations per token). Routing: top-k of softmax(randn) (seeded, on the
CPU, renormalised), the same for every provider.

Methods (field `method`):
* cold: the call captured in a CUDA graph after a written 128 MB L2 flush, events around the call,
  median of >= 50 replays (hpc_common.bench.bench_us).
* rotation: L copies of the call's weights and activations (together >= 256 MB of the bytes a call
  reads, so none finds its data in the L2), the L calls back to back in one graph, time = replay / L,
  median of >= 20 replays (hpc_common.bench.bench_back_to_back_us); ours launches with PDL.

Floor per row = max(bytes / 4.27 TB/s, FLOPs / (1000 TFLOP/s FP8 | 660 BF16)), bytes = the distinct
local experts hit x (their weight + scale bytes) + the activations in and out; FLOPs = 6 H I per
routed local pair. The cosine compares each provider's first output with the float32 MoE computed
from the same FP8 activations (hpc_common.fp8's reference) and dequantised weights.

Providers: `ours` (hpc_moe.fused_moe with a workspace), `ours_unfused` (the same kernels, PDL off:
hpc_moe.kernels.run_fused_moe(unfused=True)), `torch_grouped` (routing sort in torch, then
torch._grouped_mm / torch._scaled_grouped_mm; where those do not run, every local expert in turn,
field `impl`), `sglang_triton` (SGLang's `fused_experts`, run with PYTHONPATH at the bundle of
../shared/recipes/sglang-h200; FP8 block weights need I padded to 256 there, field `I_kernel`).
A provider that cannot run is skipped with a printed reason.

    python -m hpc_moe.bench [--out-dir benchmarks/results] [--method cold|rotation|both] [--quick]
        [--providers ours,ours_unfused,torch_grouped,sglang_triton] [--models hy3_tp8,...] [--dtypes ...]
        [--T 1,16] [--dry-run]

(benchmarks/bench_moe.py is the same command; `hpc-bench --ops moe` runs a subset through
hpc_moe.bench_suite.) Writes DIR/<gpu>/moe.json and moe.md (after each model and format, so a cut-short run keeps its rows).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import time
from pathlib import Path

import torch
from hpc_common.bench.suite import skip

from .reference import quantize_blocks
from .sglang_triton import block_fp8_weights, fused_experts_api
from .torch_grouped import combine_pairs, grouped_mm_moe, sort_pairs

FP8 = torch.float8_e4m3fn
BW = 4.27e12
TFLOPS = {"bf16": 660e12, "fp8_block": 1000e12, "fp8_tensor": 1000e12}
DTYPES = ("bf16", "fp8_block", "fp8_tensor")
PROVIDERS = ("ours", "ours_unfused", "torch_grouped", "sglang_triton")
T_ALL = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    tp: int
    ep: int
    num_experts: int
    top_k: int
    hidden: int
    inter: int
    tokens: tuple[int, ...]

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.ep


MODELS = {m.name: m for m in (
    Model("hy3_tp8", 8, 1, 192, 8, 4096, 192, T_ALL),
    Model("hy3_ep8", 1, 8, 192, 8, 4096, 1536, tuple(t for t in T_ALL if t >= 4)),
    Model("qwen3_235b_tp8", 8, 1, 128, 8, 4096, 192, T_ALL),
    # the MoE of the end-to-end table's Qwen3-30B-A3B layers (hpc_integration.runner, TP1)
    Model("qwen3_30b_a3b", 1, 1, 128, 8, 2048, 768, T_ALL),
)}
QUICK = {"hy3_tp8": ((1, 16, 256), ("bf16", "fp8_block", "fp8_tensor")), "hy3_ep8": ((4, 64), ("fp8_block",))}
ROTATION_BYTES = 256 << 20
MAX_COPIES = 32


def routing(m: Model, T: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(global ids int32 [T, k], weights FP32 [T, k]) from softmax(randn) top-k, seeded per (model, T)."""
    g = torch.Generator().manual_seed(1000 * m.num_experts + T)
    probs = torch.softmax(torch.randn(T, m.num_experts, generator=g), dim=-1)
    w, ids = probs.topk(m.top_k, dim=-1)
    return ids.to(torch.int32), (w / w.sum(-1, keepdim=True)).float()


def scale_bytes(m: Model, dtype: str) -> int:
    """Checkpoint scale bytes per expert."""
    if dtype == "fp8_block":
        return 4 * (math.ceil(2 * m.inter / 128) * (m.hidden // 128) + (m.hidden // 128) * math.ceil(m.inter / 128))
    return 8 if dtype == "fp8_tensor" else 0


def case_stats(m: Model, dtype: str, ids: torch.Tensor) -> dict:
    """experts hit, bytes, floor of one call (EP rank 0 owns experts [0, E_local))."""
    T = ids.shape[0]
    local = ids[(ids >= 0) & (ids < m.local_experts)]
    hit = int(torch.unique(local).numel())
    elem = 2 if dtype == "bf16" else 1
    nbytes = hit * (3 * m.hidden * m.inter * elem + scale_bytes(m, dtype)) + 2 * T * m.hidden * 2
    flops = 6.0 * local.numel() * m.hidden * m.inter
    floor = max(nbytes / BW, flops / TFLOPS[dtype]) * 1e6
    return {"experts_hit": hit, "bytes": nbytes, "floor_us": floor}


def copies_for(nbytes: int) -> int:
    return min(MAX_COPIES, max(2, math.ceil(ROTATION_BYTES / nbytes)))


def case_table(models, dtypes, tokens_override, quick) -> list[dict]:
    rows = []
    for m in models:
        for dtype in dtypes:
            ts = m.tokens
            if quick:
                if m.name not in QUICK or dtype not in QUICK[m.name][1]:
                    continue
                ts = QUICK[m.name][0]
            if tokens_override:
                ts = tuple(t for t in tokens_override if m.name != "hy3_ep8" or t >= 4)
            for T in ts:
                ids, _ = routing(m, T)
                st = case_stats(m, dtype, ids)
                rows.append({"model": m.name, "tp": m.tp, "ep": m.ep, "T": T, "dtype": dtype, **st,
                             "copies": copies_for(st["bytes"])})
    return rows


# ---- weights -----------------------------------------------------------------------------------

def checkpoint(m: Model, dtype: str, device) -> dict:
    """One layer's local experts in checkpoint layout (w13 [E, 2I, H] gate then up, w2 [E, H, I]),
    from 0.02 N(0, 1) weights: BF16, or FP8 with 128x128 block / per-expert scales."""
    g = torch.Generator(device=device).manual_seed(7)
    E, H, inter = m.local_experts, m.hidden, m.inter
    w13 = torch.randn(E, 2 * inter, H, device=device, generator=g, dtype=torch.bfloat16) * 0.02
    w2 = torch.randn(E, H, inter, device=device, generator=g, dtype=torch.bfloat16) * 0.02
    if dtype == "bf16":
        return {"w13": w13, "w2": w2}
    if dtype == "fp8_block":
        q13, s13 = quantize_blocks(w13)
        q2, s2 = quantize_blocks(w2)
        return {"w13": q13, "w2": q2, "w13_scale": s13, "w2_scale": s2, "base": (w13, w2)}
    s13 = (w13.float().abs().amax(dim=(1, 2)) / 448).clamp(min=1e-12)
    s2 = (w2.float().abs().amax(dim=(1, 2)) / 448).clamp(min=1e-12)
    q13 = (w13.float() / s13[:, None, None]).clamp(-448, 448).to(FP8)
    q2 = (w2.float() / s2[:, None, None]).clamp(-448, 448).to(FP8)
    return {"w13": q13, "w2": q2, "w13_scale": s13, "w2_scale": s2, "base": (w13, w2)}


def ckpt_args(ck: dict) -> dict:
    return {k: v for k, v in ck.items() if k in ("w13", "w2", "w13_scale", "w2_scale")}


def dequantize(w: torch.Tensor, s: torch.Tensor | None) -> torch.Tensor:
    """One expert's [R, C] weight as BF16: as is, times a per-expert scale, or times 128 x 128 block scales."""
    if s is None:
        return w
    if s.dim() == 0:
        return (w.float() * s).to(torch.bfloat16)
    R, C = w.shape
    full = s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:R, :C]
    return (w.float() * full).to(torch.bfloat16)


class TorchGroupedMoE:
    """A torch MoE: the routing sort in torch (stable sort by local expert, offsets by scatter-add, no
    host sync), then one grouped GEMM per stage: torch._grouped_mm (BF16) or torch._scaled_grouped_mm
    (fp8_tensor: per-token activation scales, the per-expert weight scale as a per-row scale; the
    intermediate requantised per token). fp8_block (no block-scaled grouped GEMM in torch) and any
    format whose grouped GEMM does not run here: every local expert in turn on all tokens, weights
    dequantised to BF16 in the call (`impl` = "per_expert")."""

    def __init__(self, E: int, inter: int, dtype: str, ck: dict, copies: int):
        self.E, self.inter, self.dtype = E, inter, dtype
        sets = [(ck["w13"], ck["w2"])] + [(ck["w13"].clone(), ck["w2"].clone()) for _ in range(copies - 1)]
        self.sets = sets
        self.s13, self.s2 = ck.get("w13_scale"), ck.get("w2_scale")
        if dtype == "fp8_tensor":  # per-expert scale as the per-output-row scale of the grouped GEMM
            H = ck["w13"].shape[2]
            self.rows13 = self.s13[:, None].expand(E, 2 * inter).contiguous().float()
            self.rows2 = self.s2[:, None].expand(E, H).contiguous().float()
        self.impl = "per_expert" if dtype == "fp8_block" else ("grouped_mm" if dtype == "bf16" else "scaled_grouped_mm")
        if self.impl != "per_expert":
            try:  # a small call: does this torch run the grouped GEMM on this device?
                dev = ck["w13"].device
                x = torch.randn(2, ck["w13"].shape[2], device=dev).to(torch.bfloat16)
                self._grouped(0, x, torch.zeros(2, 1, dtype=torch.int32, device=dev), torch.ones(2, 1, device=dev))
                if dev.type == "cuda":
                    torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001
                print(f"  torch_grouped {dtype}: grouped GEMM unavailable ({type(e).__name__}: {str(e)[:160]}); "
                      "per-expert matmuls instead", flush=True)
                self.impl = "per_expert"

    @staticmethod
    def _quant_rows(a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = (a.float().abs().amax(-1).clamp(min=1e-10) / 448)
        return (a.float() / s[:, None]).clamp(-448, 448).to(FP8), s

    def _grouped(self, i: int, x, ids, wts) -> torch.Tensor:
        w13, w2 = self.sets[i]
        inter = self.inter
        if self.dtype == "bf16":
            return grouped_mm_moe(x, w13, w2, ids, wts)
        order, offs, tok, local = sort_pairs(ids, self.E)
        xq, xs = self._quant_rows(x)
        h = torch._scaled_grouped_mm(xq[tok], w13.transpose(-2, -1), xs[tok], self.rows13, offs=offs,
                                     out_dtype=torch.bfloat16)
        act = (torch.nn.functional.silu(h[:, :inter].float()) * h[:, inter:].float()).to(torch.bfloat16)
        aq, as_ = self._quant_rows(act)
        y = torch._scaled_grouped_mm(aq, w2.transpose(-2, -1), as_, self.rows2, offs=offs, out_dtype=torch.bfloat16)
        return combine_pairs(y, order, tok, local, wts, x.shape[0])

    def _per_expert(self, i: int, x, ids, wts) -> torch.Tensor:
        w13, w2 = self.sets[i]
        inter = self.inter
        acc = torch.zeros(x.shape, device=x.device)
        for e in range(self.E):
            we = (wts * (ids == e)).sum(-1)  # this expert's weight per token (0 where not routed)
            s13 = None if self.s13 is None else self.s13[e]
            s2 = None if self.s2 is None else self.s2[e]
            h = x @ dequantize(w13[e], s13).T
            act = (torch.nn.functional.silu(h[:, :inter].float()) * h[:, inter:].float()).to(torch.bfloat16)
            acc += (act @ dequantize(w2[e], s2).T).float() * we[:, None]
        return acc.to(torch.bfloat16)

    def bind(self, i: int, x, ids, wts):
        run = self._per_expert if self.impl == "per_expert" else self._grouped
        box = [None]

        def fn():
            box[0] = run(i, x, ids, wts)

        return fn, (lambda: box[0])


class SglangTriton:
    """SGLang's Triton fused_experts. FP8 block: its 128-block path needs I % 128 == 0, so I is
    padded (zero gate/up rows and Down columns) to the next multiple of 128 (192 -> 256) and the
    weights quantised again in blocks. EP: other ranks' pairs get expert 0 and weight 0 (this entry
    point has no -1 skip)."""

    def __init__(self, E: int, inter: int, dtype: str, ck: dict, copies: int):
        self.fused_experts, self.runner_config = fused_experts_api()
        self.dtype, self.E = dtype, E
        self.i_kernel = inter
        s13, s2 = ck.get("w13_scale"), ck.get("w2_scale")
        w13, w2 = ck["w13"], ck["w2"]
        if dtype == "fp8_block" and inter % 128:
            w13, s13, w2, s2, self.i_kernel = block_fp8_weights(*ck["base"])
        self.s13, self.s2 = s13, s2
        self.sets = [(w13, w2)] + [(w13.clone(), w2.clone()) for _ in range(copies - 1)]
        self.impl = f"sglang_fused_experts_I{self.i_kernel}"

    def bind(self, i: int, x, ids, wts):
        w13, w2 = self.sets[i]
        keep = (ids >= 0) & (ids < self.E)  # all pairs at EP1
        wts = torch.where(keep, wts, torch.zeros_like(wts))
        ids = torch.where(keep, ids, torch.zeros_like(ids)).to(torch.int32)
        kw = {"moe_runner_config": self.runner_config(inplace=False)}
        if self.dtype != "bf16":
            kw.update(use_fp8_w8a8=True, w1_scale=self.s13, w2_scale=self.s2)
            if self.dtype == "fp8_block":
                kw["block_shape"] = [128, 128]
        box = [None]
        fe = self.fused_experts

        def fn():
            box[0] = fe(x, w13, w2, (wts, ids, None), **kw)

        return fn, (lambda: box[0])


class Ours:
    """hpc_moe.fused_moe on L copies of the prepared weights, one workspace for all calls."""

    def __init__(self, m: Model, dtype: str, ck: dict, copies: int, max_tokens: int, unfused: bool = False):
        from hpc_moe import MoEWeights

        w = MoEWeights.prepare(**ckpt_args(ck), quant=dtype, ep_rank=0, ep_size=m.ep, num_experts=m.num_experts)
        clone = lambda t: None if t is None else t.clone()  # noqa: E731
        self.weights = [w] + [dataclasses.replace(w, w13=w.w13.clone(), w2=w.w2.clone(), w13_scale=clone(w.w13_scale),
                                                  w2_scale=clone(w.w2_scale)) for _ in range(copies - 1)]
        self.workspace = w.workspace(max_tokens, m.top_k)
        self.unfused = unfused
        self.impl = "unfused_no_pdl" if unfused else "fused_pdl"

    def bind(self, i: int, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor):
        from hpc_moe import fused_moe, kernels

        w, ws = self.weights[i], self.workspace
        out = torch.full_like(x, float("nan"))
        if self.unfused:
            return (lambda: kernels.run_fused_moe(w, x, ids, wts, None, out, ws, unfused=True)), (lambda: out)
        return (lambda: fused_moe(x, w, ids, wts, out=out, workspace=ws)), (lambda: out)


def reference(m: Model, dtype: str, ck: dict, x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
    from hpc_moe.reference import fused_moe_reference_quant

    return fused_moe_reference_quant(x, ck["w13"], ck["w2"], ids, wts, quant=dtype, w13_scale=ck.get("w13_scale"),
                                     w2_scale=ck.get("w2_scale"), expert_offset=0, dtype=torch.float32)


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().flatten(), b.double().flatten()
    if not bool(torch.isfinite(a).all()):
        return float("nan")
    return torch.nn.functional.cosine_similarity(a, b, dim=0).item()


# ---- the run -------------------------------------------------------------------------------------

def make_provider(name: str, m: Model, dtype: str, ck: dict, copies: int, max_tokens: int):
    if name == "ours":
        return Ours(m, dtype, ck, copies, max_tokens)
    if name == "ours_unfused":
        return Ours(m, dtype, ck, copies, max_tokens, unfused=True)
    if name == "torch_grouped":
        return TorchGroupedMoE(m.local_experts, m.inter, dtype, ck, copies)
    if name == "sglang_triton":
        return SglangTriton(m.local_experts, m.inter, dtype, ck, copies)
    raise ValueError(f"unknown provider {name!r}")


def run_model_dtype(res, m: Model, dtype: str, cases: list[dict], providers, methods, reps_cold, reps_rot, dev):
    from hpc_common.bench import bench_back_to_back_us, bench_us

    ck = checkpoint(m, dtype, dev)
    inputs = {}
    for c in cases:  # routing, activations and the float32 reference, once per case
        T = c["T"]
        ids, wts = routing(m, T)
        g = torch.Generator(device=dev).manual_seed(T)
        xs = [torch.randn(T, m.hidden, device=dev, generator=g).to(torch.bfloat16) for _ in range(c["copies"])]
        ids, wts = ids.to(dev), wts.to(dev)
        inputs[T] = (xs, ids, wts, reference(m, dtype, ck, xs[0], ids, wts))
    max_copies = max(c["copies"] for c in cases) if "rotation" in methods else 1
    all_bytes = m.local_experts * (3 * m.hidden * m.inter * (2 if dtype == "bf16" else 1) + scale_bytes(m, dtype))
    max_tokens = max(c["T"] for c in cases)
    for name in providers:
        t0 = time.time()
        try:
            prov = make_provider(name, m, dtype, ck, max_copies, max_tokens)
        except Exception as e:  # noqa: BLE001 - a baseline that cannot run is reported, not fatal
            print(f"  skip {name} for {m.name} {dtype}: {type(e).__name__}: {str(e)[:300]}", flush=True)
            skip(f"{name} ({m.name} {dtype})", f"{type(e).__name__}: {str(e)[:200]}")
            continue
        for c in cases:
            T = c["T"]
            xs, ids, wts, ref = inputs[T]
            base = {"model": m.name, "tp": m.tp, "ep": m.ep, "T": T, "dtype": dtype, "experts_hit": c["experts_hit"],
                    "impl": prov.impl}
            base.update({"I_kernel": prov.i_kernel} if hasattr(prov, "i_kernel") else {})
            try:
                fn, result = prov.bind(0, xs[0], ids, wts)
                fn()
                torch.cuda.synchronize()
                cos = cosine(result(), ref)
                for method in methods:
                    if method == "cold":
                        us, copies = bench_us(fn, reps=reps_cold), 1
                    else:
                        copies = c["copies"]
                        if prov.impl == "per_expert":  # reads every local expert: fewer copies pass 256 MB
                            copies = min(copies, copies_for(all_bytes))
                        fns = [prov.bind(i, xs[i], ids, wts)[0] for i in range(copies)]
                        us = bench_back_to_back_us(fns, reps=reps_rot)
                    res.add(name, us, **base, method=method, us=round(us, 3), copies=copies,
                            floor_us=c["floor_us"], cosine=cos)
                    print(f"  {m.name:15s} {dtype:10s} T={T:4d} {name:14s} {method:8s} {us:8.1f} us  floor "
                          f"{c['floor_us']:6.1f}  cos {cos:.6f}", flush=True)
            except Exception as e:  # noqa: BLE001
                print(f"  {name} failed at {m.name} {dtype} T={T}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                skip(f"{name} ({m.name} {dtype} T={T})", f"failed: {type(e).__name__}: {str(e)[:200]}")
                torch.cuda.synchronize()
        del prov
        torch.cuda.empty_cache()
        print(f"  {name}: {time.time() - t0:.0f} s", flush=True)
    del ck, inputs
    torch.cuda.empty_cache()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results"))
    ap.add_argument("--method", choices=("cold", "rotation", "both"), default="both")
    ap.add_argument("--providers", default=",".join(PROVIDERS))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--T", default="", help="comma-separated token counts instead of each model's list")
    ap.add_argument("--quick", action="store_true", help="a ~2-minute subset: Hy3 TP8 T=1/16/256, Hy3 EP8 FP8 block T=4/64")
    ap.add_argument("--dry-run", action="store_true", help="print the case table (runs on the CPU) and exit")
    ap.add_argument("--reps-cold", type=int, default=None)
    ap.add_argument("--reps-rotation", type=int, default=None)
    args = ap.parse_args(argv)
    providers = [p for p in args.providers.split(",") if p]
    for p in providers:
        if p not in PROVIDERS:
            ap.error(f"unknown provider {p!r} (choose from {', '.join(PROVIDERS)})")
    models = [MODELS[n] for n in args.models.split(",") if n]
    dtypes = [d for d in args.dtypes.split(",") if d]
    for d in dtypes:
        if d not in DTYPES:
            ap.error(f"unknown dtype {d!r}")
    methods = ("cold", "rotation") if args.method == "both" else (args.method,)
    tokens = tuple(int(t) for t in args.T.split(",") if t)
    table = case_table(models, dtypes, tokens, args.quick)
    if args.dry_run:
        print(f"{len(table)} cases x {len(providers)} providers x {len(methods)} methods")
        for r in table:
            print(f"  {r['model']:15s} tp{r['tp']} ep{r['ep']} {r['dtype']:10s} T={r['T']:4d} hit {r['experts_hit']:3d} "
                  f"{r['bytes'] / 2**20:8.1f} MiB floor {r['floor_us']:7.2f} us  copies {r['copies']}")
        return
    from hpc_common.bench import BenchResults, gpu_slug

    dev = torch.device("cuda", torch.cuda.current_device())
    res = BenchResults("moe", args.out_dir / gpu_slug(), methods=list(methods), providers=providers)
    reps_cold = args.reps_cold or (30 if args.quick else 50)
    reps_rot = args.reps_rotation or (10 if args.quick else 20)
    reps_cold, reps_rot = max(reps_cold, 1), max(reps_rot, 1)
    for m in models:
        for dtype in dtypes:
            cases = [r for r in table if r["model"] == m.name and r["dtype"] == dtype]
            if not cases:
                continue
            print(f"== {m.name} {dtype}: T = {[c['T'] for c in cases]}", flush=True)
            run_model_dtype(res, m, dtype, cases, providers, methods, reps_cold, reps_rot, dev)
            res.write()
    path = res.write()
    print(res.markdown())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
