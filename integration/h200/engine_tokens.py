"""The tiny Qwen3-MoE through SGLang's offline Engine, 8 greedy tokens for three prompts.

usage: engine_tokens.py MODEL_DIR default|ours|ours_fp32router nograph|graph OUT_JSON
"default": SGLang's triton attention and MoE, BF16 gates; "ours": --attention-backend hpc (decode
steps through the fused prologue: QK-Norm, RoPE and KV write in one qk_norm_rope_store call) and
our MoE runner (HPC_INTEGRATION_OPS names it: SGLang 0.5.17 has no register_moe_runner_core; on
releases that have it --moe-runner-backend hpc does the same), BF16 gates as in "default";
"ours_fp32router": the same plus the gates held in FP32 and scored by hpc_router_gemm
(HPC_INTEGRATION_ROUTER_FP32=1: SGLang's own gate cannot take FP32 weights with BF16
activations, so this run has no default twin, and its dummy gate weights are drawn in FP32), with
the prologue switched off (HPC_SGLANG_PROLOGUE=0: SGLang's norm / rope / KV write before our decode).
Writes tokens and per-token logprobs.
"""

import json
import os
import sys
import time

PROMPTS = ["t5 t6 t7 t8 t9", "t100 t200 t300", "t42"]


def main(model: str, mode: str, graph: str, out_json: str) -> None:
    os.environ["HPC_INTEGRATION_OPS"] = {"default": "none", "ours": "attention,moe",
                                         "ours_fp32router": "attention,moe,router"}[mode]
    os.environ["HPC_SGLANG_PROLOGUE"] = "0" if mode == "ours_fp32router" else "1"
    if mode == "ours_fp32router":
        os.environ["HPC_INTEGRATION_ROUTER_FP32"] = "1"
    import sglang as sgl

    kw = dict(model_path=model, load_format="dummy", sampling_backend="pytorch", dtype="bfloat16",
              context_length=512, max_total_tokens=8192, max_running_requests=8, mem_fraction_static=0.5,
              random_seed=0, log_level="info", page_size=64,
              attention_backend="triton" if mode == "default" else "hpc")
    if graph == "nograph":
        kw["disable_cuda_graph"] = True
    else:
        kw.update(disable_prefill_cuda_graph=True, cuda_graph_max_bs_decode=4)
    t0 = time.time()
    llm = sgl.Engine(**kw)
    sp = {"temperature": 0.0, "max_new_tokens": 8, "ignore_eos": True}
    try:
        outs = llm.generate(prompt=PROMPTS, sampling_params=sp, return_logprob=True)
        again = llm.generate(prompt=PROMPTS, sampling_params=sp, return_logprob=True)
        res = []
        for o, o2 in zip(outs, again):
            lp = [x[0] for x in o["meta_info"].get("output_token_logprobs") or []]
            res.append({"ids": o.get("output_ids"), "text": o["text"], "logprobs": lp,
                        "repeat_same": o.get("output_ids") == o2.get("output_ids")})
        json.dump({"mode": mode, "graph": graph, "results": res, "seconds": round(time.time() - t0, 1)},
                  open(out_json, "w"))
        print("ENGINE", mode, graph, [r["ids"] for r in res], flush=True)
    finally:
        llm.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:5])
