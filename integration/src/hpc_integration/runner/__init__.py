"""A small paged-KV decode-step runner for Qwen3-MoE-style models (not a server): the model forward
over a paged KV cache, one CUDA graph per batch size, run by our kernels (`ours`), by what a
framework runs by default (`baseline`) or by the operators' references (`reference`).

    from hpc_integration.runner import DecodeRunner, RunOptions, StepGraph, preset, random_weights
    cfg = preset("hy3_tp8", num_layers=4)
    w = random_weights(cfg, seed=0, device="cuda")
    rt = DecodeRunner(cfg, w, "ours", RunOptions(kv_dtype="fp8", moe_quant="fp8_block", max_batch=16,
                                                  max_kv_len=9216))
    st = rt.synthetic_context(batch=16, context=8192)      # or rt.prefill(prompts)
    g = StepGraph(rt, st)                                   # capture once per batch size
    g.replay()                                              # one decode step; st.ids = greedy tokens

Files: config.py (ModelConfig, presets, ParallelConfig, RunOptions), weights.py (seeded random
weights, weight formats), sharding.py (one rank's slices), kv_cache.py (the paged cache), state.py
(a step's static buffers), model.py (the step), backends/ (ours, baseline, reference), graphs.py
(capture), hf.py (the same model in transformers), bench.py (the e2e benchmark suite).
"""

from .config import ModelConfig, ParallelConfig, RunOptions, hf_config, preset
from .graphs import GraphCache, StepGraph
from .kv_cache import PagedKVCache
from .model import DecodeRunner
from .state import StepState
from .weights import ModelWeights, random_weights

__all__ = ["DecodeRunner", "GraphCache", "ModelConfig", "ModelWeights", "PagedKVCache", "ParallelConfig", "RunOptions",
           "StepGraph", "StepState", "hf_config", "preset", "random_weights"]
