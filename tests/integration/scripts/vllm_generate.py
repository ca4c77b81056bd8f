"""Greedy generation of the tiny Qwen3-MoE through vLLM's offline LLM, in-process.

usage: python vllm_generate.py MODEL_DIR OUT_JSON [ATTENTION_BACKEND]
Writes {"tokens": [[...], ...], "logprobs": the chosen tokens' logprobs, "calls":
hpc_integration.ops.CALLS, "oot": vLLM's out-of-tree registry names}. Whether
our plugin loads is the environment's business (VLLM_PLUGINS, HPC_INTEGRATION_*).
"""

import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # keep the engine in this process

PROMPTS = ["t5 t6 t7 t8 t9", "t100 t200 t300", "t42"]


def main(model: str, out_json: str, backend: str | None) -> None:
    from vllm import LLM, SamplingParams

    kw = dict(model=model, load_format="dummy", dtype="bfloat16", enforce_eager=True, max_model_len=256,
              max_num_seqs=4, seed=0, block_size=64,
              gpu_memory_utilization=float(os.environ.get("HPC_TEST_MEM_FRACTION", "0.05")))
    if backend:
        kw["attention_backend"] = backend
    llm = LLM(**kw)
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True, logprobs=1)
    outs = llm.generate(PROMPTS, params)
    tokens = [list(o.outputs[0].token_ids) for o in outs]
    logprobs = [[float(step[t].logprob) for t, step in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)]
                for o in outs]
    calls = {}
    try:
        from hpc_integration import ops

        calls = dict(ops.CALLS)
    except ImportError:
        pass
    from vllm.model_executor.custom_op import op_registry_oot

    json.dump({"tokens": tokens, "logprobs": logprobs, "calls": calls, "oot": sorted(op_registry_oot)}, open(out_json, "w"))
    print("tokens", tokens, "calls", calls, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
