"""Greedy generation of a tiny checkpoint WITH its weights (make_tiny_qwen3_moe_fp8.py) through
vLLM's offline LLM, in-process; vllm_generate.py's counterpart for real weights.

usage: python vllm_generate_ckpt.py MODEL_DIR OUT_JSON [QUANTIZATION]
Writes {"tokens": [[...], ...], "logprobs": per step the top-5 {token: logprob}, "calls":
hpc_integration.ops.CALLS, "quantization": the method vLLM resolved, "moe_methods": the FusedMoE
layers' method classes}. Whether our plugin loads is the environment's business.
"""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine in this process

PROMPTS = ["t5 t6 t7 t8 t9", "t100 t200 t300", "t42"]


def main(model: str, out_json: str, quantization: str | None) -> None:
    from vllm import LLM, SamplingParams

    kw = dict(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=256, max_num_seqs=4, seed=0,
              block_size=64, gpu_memory_utilization=float(os.environ.get("HPC_TEST_MEM_FRACTION", "0.05")))
    if quantization:
        kw["quantization"] = quantization
    llm = LLM(**kw)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=5))
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    logprobs = [[{str(t): float(lp.logprob) for t, lp in step.items()} for step in o.outputs[0].logprobs]
                for o in outs]
    model_cfg = llm.llm_engine.vllm_config.model_config
    methods = []

    def collect(model_module):
        from vllm.model_executor.layers.fused_moe import RoutedExperts

        return sorted({type(m.quant_method).__name__ for m in model_module.modules() if isinstance(m, RoutedExperts)})

    try:
        methods = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        methods = collect(methods)
    except AttributeError:
        methods = []
    calls = {}
    try:
        from hpc_integration import ops

        calls = dict(ops.CALLS)
    except ImportError:
        pass
    json.dump({"tokens": tokens, "logprobs": logprobs, "calls": calls, "quantization": model_cfg.quantization,
               "moe_methods": methods}, open(out_json, "w"))
    print("tokens", tokens, "calls", calls, "quantization", model_cfg.quantization, "moe", methods, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
