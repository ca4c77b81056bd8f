"""Probe: where the end-to-end decode step's time goes, ours against the baseline runner (issue 41's
1.3x target at batch 4-64).

For each model and batch of hpc_integration.runner.bench (the e2e table's setting: LAYERS layers, an
8K-token synthetic context, FP8 KV), both providers' runners are built as the benchmark builds them,
and each part of a layer is timed on its own, over the model's LAYERS layers (distinct weights and
caches, as in the step), under both methods of hpc_common.bench.timing (cold: one layer's part after
a written 128 MB flush; rotation: the LAYERS layers' parts back to back in one graph, time per layer):

  part "attention"  the prologue (QK-Norm, RoPE, KV write) and the decode attention of one layer, after
                    the step's plan (begin_decode, once, outside the timing);
  part "router"     the router scores of one layer;
  part "moe"        the routed experts of one layer (top-k from that router's scores);
  part "step"       the whole step (as the e2e table, for the sum to hold against).

Rows: model, batch, part, method, provider (ours / baseline), median_us, impl (the provider's kernels).
LAYERS x (attention + router + moe) against step says what the rest (embedding, norms, QKV and output
projections, lm_head, greedy token) costs; the ratio per part says which operator sets the step's speed-up.

    python tools/probes/e2e/step_parts.py [--out-dir DIR] [--models hy3_tp8,qwen3_30b_a3b] [--batches 4,16,64]

Writes DIR/e2e_step_parts.json and .md (DIR: --out-dir, else $OUT, else ./e2e_step_parts_out). SGLang's
kernels are the baseline where SGLang imports (its bundle on PYTHONPATH, integration/README.md).
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path

import torch


def layer_inputs(rt, st, seed: int):
    """Per layer: (qkv [B, (Hq + 2 Hkv) D], x [B, H] post-norm activations, top-k ids and weights from that
    layer's router), from random hidden states of the model's activation dtype."""
    from hpc_integration.runner.model import rms_norm, topk_softmax

    g = torch.Generator(device=rt.device).manual_seed(seed)
    cfg, be, eps = rt.cfg, rt.backend, rt.cfg.rms_norm_eps
    B = st.ids.shape[0]
    out = []
    for layer in rt.layers:
        h = torch.randn(B, cfg.hidden_size, generator=g, device=rt.device).to(rt.act)
        qkv = rms_norm(h, layer.input_norm, eps) @ layer.wqkv.T
        x = rms_norm(h, layer.post_norm, eps)
        ids, w = topk_softmax(be.router(rt, layer.backend, x), cfg.top_k, cfg.norm_topk_prob)
        out.append((qkv, x, ids, w))
    return out


def part_fns(rt, st, inputs) -> dict[str, list]:
    """{part: [one callable per layer]} (the step: one callable)."""
    be = rt.backend

    def attention(i, qkv):
        q = be.prologue(rt, i, rt.layers[i].backend, qkv, st.positions, st.slots)
        return be.decode(rt, i, q, st)

    fns = {"attention": [], "router": [], "moe": []}
    for i, (qkv, x, ids, w) in enumerate(inputs):
        layer = rt.layers[i].backend
        fns["attention"].append(functools.partial(attention, i, qkv))
        fns["router"].append(functools.partial(be.router, rt, layer, x))
        fns["moe"].append(functools.partial(be.moe, rt, layer, x, ids, w))
    fns["step"] = [functools.partial(rt.step_body, st)]
    return fns


def run(models, batches, res, log=print) -> None:
    from hpc_common.bench import cold_us, rotation_us
    from hpc_integration.runner import bench as e2e

    dev = torch.device("cuda", torch.cuda.current_device())
    for model in models:
        quant = e2e.MODELS[model][1]
        runners = e2e.build_runners(model, max(batches), dev)
        for B in batches:
            for p, rt in runners.items():
                impl = ",".join(f"{k}={v}" for k, v in sorted(rt.impl.items()))
                st = rt.synthetic_context(B, e2e.CONTEXT, seed=1000 + B)
                start = st.ids.clone()
                inputs = layer_inputs(rt, st, seed=B)
                rt.backend.begin_decode(rt, st)  # the step's plan, which the attention parts read
                for part, fns in part_fns(rt, st, inputs).items():
                    if part == "step":
                        st.start(rt.cache, start, e2e.CONTEXT)
                    cold = cold_us(fns[0], device=dev)
                    if part == "step":
                        st.start(rt.cache, start, e2e.CONTEXT)
                        rot = rotation_us(fns * e2e.ROTATION_STEPS, device=dev)
                    else:
                        rot = rotation_us(fns, device=dev)
                    for method, us in (("cold", cold), ("rotation", rot)):
                        res.add(p, us, model=model, batch=B, part=part, method=method, layers=e2e.LAYERS,
                                context=e2e.CONTEXT, kv_dtype=e2e.KV_DTYPE, moe_quant=quant, impl=impl)
                    log(f"  {model} B={B} {p} {part}: cold {cold:.1f} us, rotation {rot:.1f} us")
        del runners
        torch.cuda.empty_cache()


def main() -> None:
    from hpc_common.bench import BenchResults
    from hpc_integration.runner import bench as e2e

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=os.environ.get("OUT", "e2e_step_parts_out"))
    ap.add_argument("--models", default=",".join(e2e.MODELS))
    ap.add_argument("--batches", default="4,16,64")
    args = ap.parse_args()
    t0 = time.time()
    res = BenchResults("e2e_step_parts", Path(args.out_dir))
    run([m for m in args.models.split(",") if m], [int(b) for b in args.batches.split(",")], res)
    print(f"wrote {res.write()} ({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
