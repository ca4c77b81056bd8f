"""The end-to-end benchmark: one decode step of a few-layer model, ours against the baseline runner,
both replayed as CUDA graphs (`hpc-bench` suite `e2e`, and benchmarks/bench_e2e.py).

Setting: every request has a synthetic 8K-token context (random K / V written into the FP8 paged
cache, the same bytes for both providers) and decodes one token per step; LAYERS layers, a
VOCAB-token lm_head (small, so the layers, not the lm_head, dominate the step). Models: Hy3 at TP8
(8/1 heads, FP8 128x128 block MoE weights), Qwen3-30B-A3B (32/4 heads, BF16 MoE) and its 64/8-head
variant. Batches 1, 4, 16, 64.

What is timed (field `method`; hpc_common.bench's two methods, applied to the whole step):
- cold: the step (attention plan, every layer, lm_head, greedy token, the in-place advance to the
  next step) captured in a CUDA graph after a written 128 MB L2 flush, CUDA events around the step
  inside the graph, median of >= 50 replays (`cold_us`); each replay is the next decode step.
- rotation: ROTATION_STEPS consecutive decode steps captured back to back in one graph (no flush,
  each step advances the state on the device), time per step, median of >= 20 replays
  (`rotation_us`): the steady state of a decode loop.

Before timing, GREEDY_STEPS steps of each provider replay its StepGraph from the same state:
`greedy_match` says whether ours and the baseline chose the same token for every request at every
one of those steps, and `logit_err` is max |ours - baseline| / max |baseline| over their logits.
"""

from __future__ import annotations

import functools
import time

import torch

from .config import preset
from .config import RunOptions
from .model import DecodeRunner

MODELS = {  # row name: (preset, MoE weight format)
    "hy3_tp8": ("hy3_tp8", "fp8_block"),
    "qwen3_30b_a3b": ("qwen3_30b_a3b", "bf16"),
    "qwen3_30b_a3b_64x8": ("qwen3_30b_a3b_64x8", "bf16"),
}
BATCHES = (1, 4, 16, 64)
QUICK = {"models": ("hy3_tp8",), "batches": (1, 16)}
CONTEXT = 8192
LAYERS = 4
VOCAB = 8192
KV_DTYPE = "fp8"
GREEDY_STEPS = 8
ROTATION_STEPS = 4
PROVIDERS = ("ours", "baseline")


def model_config(model: str):
    name, _ = MODELS[model]
    return preset(name, num_layers=LAYERS, vocab_size=VOCAB, max_position=CONTEXT + 1024)


def build_runners(model: str, max_batch: int, dev: torch.device) -> dict[str, DecodeRunner]:
    """{provider: DecodeRunner} of one model, both on the same random weights (seed 0), as timed."""
    from .weights import random_weights

    cfg = model_config(model)
    weights = random_weights(cfg, seed=0, device=dev)
    opts = RunOptions(kv_dtype=KV_DTYPE, moe_quant=MODELS[model][1], max_batch=max_batch,
                      max_kv_len=CONTEXT + 512)
    return {p: DecodeRunner(cfg, weights, p, opts, device=dev) for p in PROVIDERS}


def run_model(model: str, batches=BATCHES, log=print) -> list[dict]:
    """Rows of one model: every batch, both providers, both methods."""
    from hpc_common.bench import cold_us, rotation_us

    from .graphs import StepGraph

    cfg = model_config(model)
    quant = MODELS[model][1]
    dev = torch.device("cuda", torch.cuda.current_device())
    t0 = time.time()
    runners = build_runners(model, max(batches), dev)
    base_impl = ",".join(f"{k}={v}" for k, v in sorted(runners["baseline"].impl.items()))
    log(f"  {model}: runners built in {time.time() - t0:.1f}s (baseline: {base_impl})")
    rows = []
    for B in batches:
        greedy, times = {}, {}
        for p, rt in runners.items():
            st = rt.synthetic_context(B, CONTEXT, seed=1000 + B)
            start_ids = st.ids.clone()
            graph = StepGraph(rt, st)
            greedy[p] = rt.generate(st, GREEDY_STEPS, graph=graph)
            del graph
            step = functools.partial(rt.step_body, st)
            st.start(rt.cache, start_ids, CONTEXT)
            cold = cold_us(step, device=dev)
            st.start(rt.cache, start_ids, CONTEXT)
            rot = rotation_us([step] * ROTATION_STEPS, device=dev)
            times[p] = {"cold": cold, "rotation": rot}
        (t_ours, l_ours), (t_base, l_base) = greedy["ours"], greedy["baseline"]
        match = bool(torch.equal(t_ours, t_base))
        err = ((l_ours - l_base).abs().max() / l_base.abs().max()).item()
        for p in PROVIDERS:
            for method, us in times[p].items():
                rows.append({"model": model, "batch": B, "Hq": cfg.num_qo_heads, "Hkv": cfg.num_kv_heads,
                             "kv_dtype": KV_DTYPE, "moe_quant": quant, "method": method, "provider": p,
                             "median_us": round(float(us), 3), "greedy_match": match, "logit_err": err,
                             "greedy_steps": GREEDY_STEPS, "layers": LAYERS, "context": CONTEXT, "vocab": VOCAB,
                             "baseline_impl": base_impl,
                             "impl": ",".join(f"{k}={v}" for k, v in sorted(runners[p].impl.items()))})
        c = {p: times[p]["cold"] for p in PROVIDERS}
        log(f"  {model} B={B}: cold ours {c['ours']:.1f} us, baseline {c['baseline']:.1f} us "
            f"({c['baseline'] / c['ours']:.2f}x); rotation ours {times['ours']['rotation']:.1f}, baseline "
            f"{times['baseline']['rotation']:.1f}; greedy_match {match}, logit_err {err:.2e}")
    del runners
    torch.cuda.empty_cache()
    return rows


def cpu_parity(steps: int = 8) -> dict:
    """The tiny config on the CPU: the reference backend (float32) against transformers' own
    Qwen3MoeForCausalLM in float32 with the same weights, greedy from the same prompts."""
    from .config import ModelConfig, hf_config
    from .hf import build_hf_model, hf_greedy
    from .weights import random_weights

    hcfg = hf_config("tiny", num_layers=2, vocab_size=512, max_position=1024)
    cfg = ModelConfig.from_hf(hcfg, name="tiny")
    w = random_weights(cfg, seed=0)
    prompts = torch.randint(0, cfg.vocab_size, (2, 8), generator=torch.Generator().manual_seed(1))
    ht, hl = hf_greedy(build_hf_model(hcfg, w, "bf16"), prompts, steps)
    rt = DecodeRunner(cfg, w, "reference", RunOptions(kv_dtype="fp32", max_batch=2, max_kv_len=64, page_size=16))
    st, l0 = rt.prefill(prompts)
    toks, logs = rt.generate(st, steps, logits0=l0)
    return {"tokens_equal": bool(torch.equal(toks, ht)), "tokens_differ": int((toks != ht).sum()),
            "max_err": (logs - hl).abs().max().item(), "scale": hl.abs().max().item(), "steps": steps}


def _suite():
    from hpc_common.bench.layouts import Layout
    from hpc_common.bench.suite import BenchCase, BenchSuite, check_row

    class E2ESuite(BenchSuite):
        op = "e2e"
        title = "End-to-end decode step (hpc_integration.runner): ours vs the baseline runner, CUDA graphs"
        order = 60
        layouts = (
            Layout("End-to-end decode step (TPOT proxy)", case=("batch", "Hq", "Hkv", "kv_dtype"), split=("model",),
                   ours="ours", show=("greedy_match", "logit_max_abs_err")),
        )

        def cases(self, quick: bool) -> list[BenchCase]:
            models = QUICK["models"] if quick else tuple(MODELS)
            batches = QUICK["batches"] if quick else BATCHES
            est = 4.0 * len(batches) + 10.0
            return [BenchCase(label=f"e2e {m} ({LAYERS} layers, {CONTEXT} context, FP8 KV)",
                              run=functools.partial(run_model, m, batches, lambda *_: None), est_s=est)
                    for m in models]

        def cpu_check(self) -> list[dict]:
            try:
                r = cpu_parity()
            except ImportError as e:  # transformers not installed: say so as a failed check
                return [check_row(f"runner reference vs transformers (not importable: {e})", float("nan"), 0.0)]
            return [check_row("runner reference vs transformers float32: max |logit diff|, tiny config, "
                              f"{r['steps']} greedy steps", r["max_err"], 1e-4, tokens_equal=r["tokens_equal"]),
                    check_row("runner reference vs transformers: greedy steps whose token differs (count)",
                              float(r["tokens_differ"]), 0.0)]

        def meta(self) -> dict:
            shapes = {}
            for m, (name, quant) in MODELS.items():
                c = model_config(m)
                shapes[m] = {"hidden": c.hidden_size, "Hq": c.num_qo_heads, "Hkv": c.num_kv_heads,
                             "experts": c.num_experts, "top_k": c.top_k, "moe_intermediate": c.moe_intermediate_size,
                             "moe_quant": quant}
            return {"e2e_models": shapes, "e2e_context": CONTEXT, "e2e_layers": LAYERS, "e2e_vocab": VOCAB,
                    "e2e_kv_dtype": KV_DTYPE,
                    "e2e_methods": {"cold": "one decode step per graph replay, L2 flushed before it, events inside",
                                    "rotation": f"{ROTATION_STEPS} consecutive decode steps per graph replay, "
                                                "no flush, time per step"}}

    return E2ESuite()


SUITE = _suite()
