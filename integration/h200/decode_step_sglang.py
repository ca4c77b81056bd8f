"""The end-to-end decode-step table through SGLang itself (0.5.17, from the H200 bundle): our backends
against SGLang's triton backends, in SGLang's own model runner.

usage:
    decode_step_sglang.py run --provider ours|sglang_triton --model NAME --out RUN.json [--layers N] [--batches 1,4]
    decode_step_sglang.py combine RUN_DIR --out OUT_DIR        # -> OUT_DIR/sglang_step.json and .md

One `run` process per backend configuration (provider x model): SGLang's plugins are loaded once per
process and HPC_INTEGRATION_OPS is read then. A run builds the model the way `python -m
sglang.bench_one_batch` does (`sglang.benchmark.one_batch.load_model`: ModelRunner, memory pool,
attention backends, decode CUDA graphs captured for the table's batch sizes) from a transformers
`Qwen3MoeConfig` of the e2e table's shapes (hpc_integration.runner.config.hf_config: head dim 128,
LAYERS layers, a VOCAB-token lm_head), `load_format="dummy"`, `kv_cache_dtype="fp8_e4m3"`, page size 64.

The 8K-token context of each request: SGLang 0.5.17 has no dummy-prefix switch, and a real prefill of
64 x 8K tokens would cost seconds and a triton extend-kernel JIT per process. So each request gets a
synthetic prefix, as the e2e runner's table does: CONTEXT KV slots taken from SGLang's own allocator,
every layer's K and V there filled with seeded random FP8 values (the same bytes, position by position,
in both providers' processes), handed to the request as its `prefix_indices` (what a radix-cache hit
does, and what bench_one_batch's correctness test does with its first extend), then one extend of
NEW_TOKENS tokens per request through bench_one_batch's `extend`, then decode steps through its
`decode` (prepare_for_decode, ForwardBatch, ModelRunner.forward = the captured graph's replay, greedy
sampling).

What is timed (field `method`); the decode graph runner's `backend.replay` is wrapped, so the time
is SGLang's graph replay of one decode step (every layer, lm_head), CUDA events around the replay
outside the graph (the graph's ~4 us launch included; SGLang's host-side input copies and metadata,
done before the replay, are not):
- cold: each step's replay after a written 128 MB L2 flush (hpc_common.bench.empty_l2); median of
  COLD_STEPS consecutive decode steps;
- rotation: each step's graph replayed ROTATION_REPLAYS times back to back (the same step: the KV
  write lands on the same slot with the same value, so the result is the step's), time per replay;
  median of ROTATION_STEPS steps;
- wall: bench_one_batch's own number, host clock around `decode` + synchronize (host work included),
  median of WALL_STEPS steps.
`greedy_match`: the two providers chose the same greedy token for every request at every timed step
(both start from the same prefix and the same extend tokens).

"ours": attention_backend "hpc" (decode on hpc_attention, decode steps through the fused prologue),
MoE through hpc_moe (HPC_INTEGRATION_OPS=attention,moe: 0.5.17 has no register_moe_runner_core), BF16
gates as SGLang's; "sglang_triton": attention_backend "triton", SGLang's Triton fused MoE
(HPC_INTEGRATION_OPS=none). MoE weights are BF16 for every model: SGLang's FP8 128x128 block MoE needs
the expert intermediate size a multiple of 128, and hy3_tp8's is 192.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

CONTEXT = 8192          # tokens of KV per request before the timed steps (the e2e table's)
LAYERS = 4
VOCAB = 8192
BATCHES = (1, 4, 16, 64)
PAGE_SIZE = 64          # a power of two (our decode kernel); the same for both providers
KV_DTYPE = "fp8_e4m3"
NEW_TOKENS = 4          # tokens of the extend that follows the synthetic prefix
WARMUP_STEPS = 2
COLD_STEPS = 20
ROTATION_STEPS = 10
ROTATION_REPLAYS = 4
WALL_STEPS = 10
METHODS = ("cold", "rotation", "wall")
DEFAULT_MODELS = ("qwen3_30b_a3b", "hy3_tp8")
MODELS = ("qwen3_30b_a3b", "qwen3_30b_a3b_64x8", "hy3_tp8")
PROVIDERS = {  # provider: (attention_backend, HPC_INTEGRATION_OPS)
    "ours": ("hpc", "attention,moe"),
    "sglang_triton": ("triton", "none"),
}


def steps_per_batch() -> int:
    """Decode steps one batch runs (warm-up and every timed phase)."""
    return WARMUP_STEPS + COLD_STEPS + ROTATION_STEPS + WALL_STEPS


def pool_tokens(batches, context: int = CONTEXT, page_size: int = PAGE_SIZE) -> int:
    """KV slots for the largest batch: its prefixes, the extend and every decode step, page-rounded
    per request (the paged allocator hands out whole pages), plus one page per request of slack."""
    per_req = context + NEW_TOKENS + steps_per_batch()
    per_req = -(-per_req // page_size) * page_size + page_size
    return max(batches) * per_req


def check_args(provider: str, model: str, batches, layers: int, context: int = CONTEXT) -> None:
    if provider not in PROVIDERS:
        raise ValueError(f"provider must be one of {sorted(PROVIDERS)}, got {provider!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {list(MODELS)}, got {model!r}")
    if not batches or any(int(b) < 1 for b in batches):
        raise ValueError(f"batches must be positive batch sizes, got {batches!r}")
    if layers < 1:
        raise ValueError(f"layers must be >= 1, got {layers}")
    if context % PAGE_SIZE:
        raise ValueError(f"context {context} must be a multiple of the page size {PAGE_SIZE}")


def hf_model_config(model: str, layers: int = LAYERS):
    """The transformers Qwen3MoeConfig SGLang loads (the e2e table's shapes, BF16, a few layers)."""
    from hpc_integration.runner.config import hf_config

    cfg = hf_config(model, num_layers=layers, vocab_size=VOCAB, max_position=CONTEXT + 1024)
    cfg.architectures = ["Qwen3MoeForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    cfg.bos_token_id, cfg.eos_token_id = 1, 2
    return cfg


def write_model_dir(model: str, out_dir: str, layers: int = LAYERS) -> dict:
    """config.json and a WordLevel tokenizer (bench_one_batch's load_model loads one) into out_dir;
    no weights (load_format="dummy"). Returns the config's shape fields."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    cfg = hf_model_config(model, layers)
    cfg.save_pretrained(out_dir)
    vocab = {"<unk>": 0, **{f"t{i}": i for i in range(1, cfg.vocab_size)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="t1", eos_token="t2",
                            pad_token="t3").save_pretrained(out_dir)
    return {"Hq": cfg.num_attention_heads, "Hkv": cfg.num_key_value_heads, "hidden": cfg.hidden_size,
            "experts": cfg.num_experts, "top_k": cfg.num_experts_per_tok, "moe_I": cfg.moe_intermediate_size,
            "layers": cfg.num_hidden_layers, "vocab": cfg.vocab_size}


def server_kwargs(provider: str, model_path: str, batches) -> dict:
    """ServerArgs of one run: the same for both providers but for the attention backend."""
    attention, _ = PROVIDERS[provider]
    return dict(model_path=model_path, load_format="dummy", dtype="bfloat16", kv_cache_dtype=KV_DTYPE,
                attention_backend=attention, sampling_backend="pytorch", page_size=PAGE_SIZE,
                context_length=CONTEXT + 512, max_total_tokens=pool_tokens(batches),
                max_running_requests=max(batches), cuda_graph_bs_decode=sorted(set(batches)),
                disable_prefill_cuda_graph=True, disable_radix_cache=True, mem_fraction_static=0.7,
                random_seed=0, log_level="info")


def provider_env(provider: str) -> dict:
    """Environment read by our SGLang plugin when it loads (once per process)."""
    return {"HPC_INTEGRATION_OPS": PROVIDERS[provider][1], "HPC_SGLANG_PROLOGUE": "1"}


class ReplayTimer:
    """Wraps a CUDA-graph replay function `replay(*args, **kw)`: in mode "cold" flushes the L2 and
    times one replay, in "rotation" times `rotation_replays` replays back to back (time per replay),
    in "off" just replays. Events are read at `collect()` (one synchronisation per batch, not per step).
    new_event / flush / synchronize are injectable (CPU tests)."""

    def __init__(self, replay, new_event, flush, synchronize, rotation_replays: int = ROTATION_REPLAYS):
        if rotation_replays < 1:
            raise ValueError(f"rotation_replays must be >= 1, got {rotation_replays}")
        self.replay, self.new_event, self.flush, self.synchronize = replay, new_event, flush, synchronize
        self.rotation_replays = rotation_replays
        self.mode = "off"
        self.replays = 0
        self._pending: list[tuple[str, object, object, int]] = []

    def __call__(self, *args, **kw):
        if self.mode not in ("off", "cold", "rotation"):
            raise ValueError(f"ReplayTimer: mode must be off, cold or rotation, got {self.mode!r}")
        if self.mode == "off":
            self.replays += 1
            return self.replay(*args, **kw)
        n = self.rotation_replays if self.mode == "rotation" else 1
        if self.mode == "cold":
            self.flush()
        start, end = self.new_event(), self.new_event()
        start.record()
        for _ in range(n):
            out = self.replay(*args, **kw)
        end.record()
        self.replays += n
        self._pending.append((self.mode, start, end, n))
        return out

    def collect(self) -> dict[str, list[float]]:
        """Microseconds per replay of every timed step since the last collect, by mode."""
        self.synchronize()
        times: dict[str, list[float]] = {"cold": [], "rotation": []}
        for mode, start, end, n in self._pending:
            times[mode].append(start.elapsed_time(end) * 1e3 / n)
        self._pending = []
        return times


def median_us(samples) -> float:
    if not samples:
        raise ValueError("median_us: no samples (the step did not run under the timer)")
    return float(statistics.median(samples))


def assemble_rows(runs: list[dict]) -> list[dict]:
    """Results rows (fields before BenchResults.add) of run JSONs: one row per model, batch, method
    and provider; greedy_match where both providers ran that model and batch, else None."""
    by = {(r["model"], r["provider"]): r for r in runs}
    rows = []
    for r in runs:
        other = by.get((r["model"], "sglang_triton" if r["provider"] == "ours" else "ours"))
        for b, res in sorted(r["batches"].items(), key=lambda kv: int(kv[0])):
            match = None
            if other is not None and b in other["batches"]:
                match = res["tokens"] == other["batches"][b]["tokens"]
            for method in METHODS:
                rows.append({"model": r["model"], "batch": int(b), "Hq": r["shape"]["Hq"], "Hkv": r["shape"]["Hkv"],
                             "kv_dtype": r["kv_dtype"], "moe_quant": "bf16", "method": method,
                             "provider": r["provider"], "median_us": median_us(res[method]),
                             "steps": len(res[method]), "greedy_match": match,
                             "greedy_steps": len(res["tokens"]), "layers": r["shape"]["layers"],
                             "context": r["context"], "vocab": r["shape"]["vocab"],
                             "attention_backend": r["attention_backend"], "sglang": r["sglang"],
                             "prefix": "synthetic"})
    return rows


def summary_lines(rows: list[dict]) -> list[str]:
    """One line per model, batch and method: both providers and the speed-up of ours."""
    t = {(r["model"], r["batch"], r["method"], r["provider"]): r for r in rows}
    lines = []
    for (m, b, meth, p), r in t.items():
        if p != "ours":
            continue
        base = t.get((m, b, meth, "sglang_triton"))
        if base is None:
            lines.append(f"{m} B={b} {meth}: ours {r['median_us']:.1f} us (no sglang_triton run)")
        else:
            lines.append(f"{m} B={b} {meth}: ours {r['median_us']:.1f} us, sglang_triton {base['median_us']:.1f} us "
                         f"({base['median_us'] / r['median_us']:.2f}x), greedy_match {r['greedy_match']}")
    return lines


def combine(run_dir: str, out_dir: str) -> int:
    """sglang_step.json / .md (op e2e_sglang) from the run JSONs; prints the table and a verdict line."""
    from hpc_common.bench.results import BenchResults, dump_results

    runs = [json.loads(p.read_text()) for p in sorted(Path(run_dir).glob("*.json"))]
    if not runs:
        print(f"sglstep: FAIL: no run JSON in {run_dir}")
        return 1
    versions = sorted({r["sglang"] for r in runs})
    res = BenchResults("e2e_sglang", Path(out_dir), sglang=",".join(versions), context=CONTEXT,
                       prefix="synthetic: seeded random FP8 K/V in SGLang's own pool, then an extend of "
                              f"{NEW_TOKENS} tokens", runs=[f"{r['model']}:{r['provider']}" for r in runs])
    for row in assemble_rows(runs):
        res.add(row.pop("provider"), row.pop("median_us"), **row)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sglang_step.json").write_text(dump_results(res.meta, res.rows))
    (out / "sglang_step.md").write_text(res.markdown())
    print("\n".join(summary_lines(res.rows)))
    fails = []
    for r in runs:
        if r["provider"] == "ours":
            calls = r.get("calls", {})
            for k in ("attention.kernel", "moe.kernel", "prologue.kernel"):
                if not calls.get(k):
                    fails.append(f"{r['model']} ours never called {k} ({calls})")
    pairs = {(r["model"], r["provider"]) for r in runs}
    for m in sorted({r["model"] for r in runs}):
        for p in PROVIDERS:
            if (m, p) not in pairs:
                fails.append(f"{m}: no {p} run")
    mismatched = sorted({f"{r['model']} B={r['batch']}" for r in res.rows if r["greedy_match"] is False})
    if mismatched:
        print(f"INFO greedy tokens differ at {mismatched}")
    print(f"wrote {out / 'sglang_step.json'} ({len(res.rows)} rows)")
    print("sglstep: PASS" if not fails else f"sglstep: FAIL: {'; '.join(fails)}")
    return 0 if not fails else 1


# ---------------------------------------------------------------- the GPU part (SGLang on CUDA)

def _fill_prefix(pool, slots, num_layers: int, seed: int) -> None:
    """Seeded random FP8 K and V at `slots` of every layer (position by position the same values in
    every process, whichever slots the allocator gave)."""
    import torch

    g = torch.Generator(device=slots.device)
    g.manual_seed(seed)
    for layer in range(num_layers):  # the raw stores (uint8 for FP8), not get_key_buffer's read views
        for buf in (pool.k_buffer[layer], pool.v_buffer[layer]):
            vals = torch.randn((slots.numel(),) + tuple(buf.shape[1:]), generator=g, device=slots.device)
            buf.view(torch.uint8)[slots] = vals.to(torch.float8_e4m3fn).view(torch.uint8)
            del vals


def _one_batch(ob, mr, timer, batch: int, num_layers: int) -> dict:
    import numpy as np
    import torch

    mr.req_to_token_pool.clear()
    mr.token_to_kv_pool_allocator.clear()
    slots = mr.token_to_kv_pool_allocator.alloc(batch * CONTEXT)
    if slots is None:
        raise RuntimeError(f"batch {batch}: the KV pool cannot hold {batch} x {CONTEXT} tokens")
    _fill_prefix(mr.token_to_kv_pool, slots, num_layers, seed=1000 + batch)
    # bench_one_batch draws ids below 10000; this vocabulary is VOCAB tokens
    ids = np.random.default_rng(batch).integers(3, VOCAB, (batch, CONTEXT + NEW_TOKENS)).tolist()
    reqs = ob.prepare_synthetic_inputs_for_latency_test(batch, CONTEXT + NEW_TOKENS, ids)
    for i, req in enumerate(reqs):
        req.prefix_indices = slots[i * CONTEXT:(i + 1) * CONTEXT].to(req.prefix_indices.dtype)
        req.set_extend_range(CONTEXT, CONTEXT + NEW_TOKENS)
    ids, _, sbatch = ob.extend(reqs, mr)
    tokens = [ids.tolist()]
    res = {"cold": [], "rotation": [], "wall": []}
    for phase, n in (("off", WARMUP_STEPS), ("cold", COLD_STEPS), ("rotation", ROTATION_STEPS), ("wall", WALL_STEPS)):
        timer.mode = "off" if phase == "wall" else phase
        for _ in range(n):
            before = timer.replays
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            ids, _ = ob.decode(ids, sbatch, mr)
            torch.cuda.synchronize()
            if phase == "wall":
                res["wall"].append((time.perf_counter() - t0) * 1e6)
            if timer.replays == before:
                raise RuntimeError(f"batch {batch}: a decode step ran without the CUDA graph")
            if phase != "off":
                tokens.append(ids.tolist())
    timed = timer.collect()
    res["cold"], res["rotation"] = timed["cold"], timed["rotation"]
    res["tokens"] = tokens
    return res


def run(provider: str, model: str, out_json: str, layers: int = LAYERS, batches=BATCHES) -> None:
    check_args(provider, model, batches, layers)
    os.environ.update(provider_env(provider))
    t0 = time.time()
    import tempfile

    import torch

    model_dir = tempfile.mkdtemp(prefix=f"sglstep_{model}_")
    shape = write_model_dir(model, model_dir, layers)
    from sglang.srt.plugins import load_plugins

    load_plugins()  # our entry point (bench_one_batch itself loads none)
    try:
        from sglang.benchmark import one_batch as ob
    except ImportError:
        import sglang.bench_one_batch as ob
    import sglang
    from sglang.srt.server_args import PortArgs, ServerArgs

    sa = ServerArgs(**server_kwargs(provider, model_dir, batches))
    try:  # as bench_one_batch's main: the decode graphs' largest batch
        from sglang.srt.model_executor.cuda_graph_config import Phase
        if sa.cuda_graph_config is not None:
            sa.cuda_graph_config[Phase.DECODE].max_bs = max(batches)
    except ImportError:
        pass
    ob._set_envs_and_config(sa)
    if hasattr(ob, "configure_logger"):  # as latency_test: SGLang's (and our plugin's) start-up lines shown
        ob.configure_logger(sa, prefix=" TP0")
    for init in ("initialize_moe_config", "initialize_fp8_gemm_config", "initialize_fp4_gemm_config"):
        if hasattr(ob, init):
            getattr(ob, init)(sa)
    bench_runner, _ = ob.load_model(sa, PortArgs.init_new(sa), 0, 0)
    mr = bench_runner.torch_runner
    t_load = time.time() - t0
    gr = mr.decode_cuda_graph_runner
    if gr is None or not hasattr(gr, "backend"):
        raise RuntimeError("no decode CUDA-graph runner: CUDA graphs are off")
    from hpc_common.bench.timing import empty_l2

    dev = torch.device("cuda", torch.cuda.current_device())
    empty_l2(dev)  # allocate the flush buffer once, outside the timed steps
    timer = ReplayTimer(gr.backend.replay, lambda: torch.cuda.Event(enable_timing=True),
                        lambda: empty_l2(dev), torch.cuda.synchronize)
    gr.backend.replay = timer
    out = {"provider": provider, "model": model, "attention_backend": PROVIDERS[provider][0],
           "sglang": getattr(sglang, "__version__", "unknown"), "kv_dtype": KV_DTYPE, "context": CONTEXT,
           "shape": shape, "page_size": PAGE_SIZE, "batches": {}, "gpu": torch.cuda.get_device_name()}
    with torch.no_grad():
        for b in batches:
            tb = time.time()
            res = _one_batch(ob, mr, timer, int(b), shape["layers"])
            out["batches"][str(b)] = res
            print(f"SGLSTEP {model} {provider} B={b}: cold {median_us(res['cold']):.1f} us, rotation "
                  f"{median_us(res['rotation']):.1f} us, wall {median_us(res['wall']):.1f} us "
                  f"({time.time() - tb:.1f}s)", flush=True)
    from hpc_integration import ops

    out["calls"] = dict(ops.CALLS)
    out["seconds"] = {"load": round(t_load, 1), "total": round(time.time() - t0, 1)}
    Path(out_json).parent.mkdir(parents=True, exist_ok=True)
    Path(out_json).write_text(json.dumps(out))
    print(f"SGLSTEP {model} {provider}: load {t_load:.1f}s, total {time.time() - t0:.1f}s, calls {out['calls']}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--provider", required=True, choices=sorted(PROVIDERS))
    r.add_argument("--model", required=True, choices=MODELS)
    r.add_argument("--out", required=True)
    r.add_argument("--layers", type=int, default=LAYERS)
    r.add_argument("--batches", default=",".join(map(str, BATCHES)))
    c = sub.add_parser("combine")
    c.add_argument("run_dir")
    c.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "combine":
        return combine(a.run_dir, a.out)
    run(a.provider, a.model, a.out, a.layers, [int(x) for x in a.batches.split(",") if x])
    return 0


if __name__ == "__main__":
    sys.exit(main())
