"""The same model in `transformers` (Qwen3MoeForCausalLM, float32 by default) with the runner's
weights, and its greedy decode: the yardstick of the runner's tests.

The MoE weights given to transformers are the values of the runner's weight format (BF16, or FP8
block-dequantised), so both compute with the same numbers. Works with both expert layouts of
transformers: 5.x's fused `mlp.experts.gate_up_proj` / `down_proj`, and 4.x's per-expert modules.
"""

from __future__ import annotations

import torch

from .weights import ModelWeights, effective_experts, moe_checkpoint


def hf_state_dict(weights: ModelWeights, moe_quant: str, keys, dtype=torch.float32) -> dict:
    """The transformers state dict of `weights` (full model, TP 1); `keys`: the target model's keys
    (they decide the expert layout)."""
    fused = any(k.endswith("mlp.experts.gate_up_proj") for k in keys)
    f = lambda t: t.to(dtype)  # noqa: E731
    sd = {"model.embed_tokens.weight": f(weights.embed), "lm_head.weight": f(weights.lm_head),
          "model.norm.weight": f(weights.final_norm)}
    for i, lw in enumerate(weights.layers):
        p = f"model.layers.{i}."
        sd.update({p + "input_layernorm.weight": f(lw.input_norm), p + "post_attention_layernorm.weight": f(lw.post_norm),
                   p + "self_attn.q_proj.weight": f(lw.wq), p + "self_attn.k_proj.weight": f(lw.wk),
                   p + "self_attn.v_proj.weight": f(lw.wv), p + "self_attn.o_proj.weight": f(lw.wo),
                   p + "self_attn.q_norm.weight": f(lw.q_norm), p + "self_attn.k_norm.weight": f(lw.k_norm),
                   p + "mlp.gate.weight": f(lw.gate)})
        w13, w2 = effective_experts(moe_checkpoint(lw.w13, lw.w2, moe_quant), moe_quant, dtype)
        if fused:
            sd[p + "mlp.experts.gate_up_proj"], sd[p + "mlp.experts.down_proj"] = w13, w2
        else:
            inter = w2.shape[2]
            for e in range(w13.shape[0]):
                q = f"{p}mlp.experts.{e}."
                sd[q + "gate_proj.weight"], sd[q + "up_proj.weight"] = w13[e, :inter], w13[e, inter:]
                sd[q + "down_proj.weight"] = w2[e]
    return sd


def build_hf_model(hf_cfg, weights: ModelWeights, moe_quant: str = "bf16", device="cpu", dtype=torch.float32):
    """Qwen3MoeForCausalLM of `hf_cfg` holding `weights`, in `dtype`, eager attention and experts, eval mode."""
    from transformers import Qwen3MoeForCausalLM

    hf_cfg._attn_implementation = "eager"
    hf_cfg._experts_implementation = "eager"  # its plain per-expert loop (grouped_mm kernels are BF16-only)
    with torch.device(device):
        model = Qwen3MoeForCausalLM(hf_cfg)
    sd = hf_state_dict(weights, moe_quant, model.state_dict().keys(), dtype)
    model.load_state_dict({k: v.to(device) for k, v in sd.items()}, strict=True)
    return model.to(device=device, dtype=dtype).eval()


@torch.no_grad()
def hf_greedy(model, prompts: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy decode of prompts [B, P]: (tokens [steps + 1, B], logits [steps + 1, B, V]): token 0 and
    logits 0 come from the prompt, then one per decode step (transformers' generate, no sampling)."""
    out = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=steps + 1,
                         min_new_tokens=steps + 1, do_sample=False, output_logits=True,
                         return_dict_in_generate=True, pad_token_id=0)
    toks = out.sequences[:, prompts.shape[1]:].T
    return toks, torch.stack([x.float() for x in out.logits])
