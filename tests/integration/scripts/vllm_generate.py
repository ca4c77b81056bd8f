"""Greedy generation of a tiny Qwen3-MoE through vLLM's offline LLM, in-process.

usage: python vllm_generate.py MODEL_DIR OUT_JSON [--checkpoint]
Random weights (`load_format="dummy"`) unless --checkpoint: then the folder's own weights (a tiny FP8
or BF16 checkpoint of make_tiny_qwen3_moe_fp8.py), whose quantization_config vLLM resolves.
Writes {"tokens": [[...], ...], "logprobs": the chosen tokens' logprobs, "top_logprobs": per step the
top-5 {token: logprob}, "calls": hpc_integration.ops.CALLS, "oot": vLLM's out-of-tree registry names,
"quantization": the method vLLM resolved, "moe_methods": the FusedMoE layers' method classes}.
Whether our plugin loads is the environment's business (VLLM_PLUGINS, HPC_INTEGRATION_*).
"""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine in this process

PROMPTS = ["t5 t6 t7 t8 t9", "t100 t200 t300", "t42"]


def moe_methods(llm) -> list[str]:
    from vllm.model_executor.layers.fused_moe import RoutedExperts

    try:
        model = llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
    except AttributeError:
        return []
    return sorted({type(m.quant_method).__name__ for m in model.modules() if isinstance(m, RoutedExperts)})


def main(model: str, out_json: str, checkpoint: bool) -> None:
    from vllm import LLM, SamplingParams
    from vllm.model_executor.custom_op import op_registry_oot

    kw = dict(model=model, dtype="bfloat16", enforce_eager=True, max_model_len=256, max_num_seqs=4, seed=0,
              block_size=64, gpu_memory_utilization=float(os.environ.get("HPC_TEST_MEM_FRACTION", "0.05")))
    if not checkpoint:
        kw["load_format"] = "dummy"
    llm = LLM(**kw)
    outs = llm.generate(PROMPTS, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=5))
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    chosen = [[float(step[t].logprob) for t, step in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
              for o in outs]
    top = [[{str(t): float(lp.logprob) for t, lp in step.items()} for step in o.outputs[0].logprobs] for o in outs]
    calls = {}
    try:
        from hpc_integration import ops

        calls = dict(ops.CALLS)
    except ImportError:
        pass
    quantization = llm.llm_engine.vllm_config.model_config.quantization
    json.dump({"tokens": tokens, "logprobs": chosen, "top_logprobs": top, "calls": calls,
               "oot": sorted(op_registry_oot), "quantization": quantization, "moe_methods": moe_methods(llm)},
              open(out_json, "w"))
    print("tokens", tokens, "calls", calls, "quantization", quantization, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], "--checkpoint" in sys.argv[3:])
