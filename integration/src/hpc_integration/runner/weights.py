"""Random model weights, seeded, and the per-rank MoE checkpoint in each weight format.

The full (unsharded) weights are "checkpoint values": every dense tensor is BF16-representable
(stored as BF16), the router weight is FP32 (the router GEMM's input), so the BF16 backends and a
float32 `transformers` model compute with the very same values. Scales are chosen so greedy tokens
are decisive: the lm_head holds a successor map of the embeddings (row s(u) is embedding u / sqrt(H)),
so the next token is s(current) by a wide margin while every layer adds a residual contribution of
about half the embedding's RMS (attention ~0.5, MoE ~0.6-0.65, measured on the tiny, Qwen3 and Hy3
presets at two layers). Measured on the tiny config (H = 256, 2 layers, 3 seeds, 33 greedy steps):
the smallest top-1 margin is 3.8 logits; BF16 paths differ from float32 transformers by at most 0.51
(median step 0.05), FP8 KV + FP8 MoE by at most 0.72 (median 0.25), of logits up to 15; the margin
grows as sqrt(H) (25 on Qwen3-30B shapes, 36 on Hy3). So the tokens are decisive, the layers still
move every logit by amounts the logit checks see, and the greedy sequence itself mostly follows s:
token equality checks the path end to end, the logit tolerances check the layers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from hpc_moe.reference import quantize_blocks

from .config import ModelConfig


# Gains of the random weights (std = gain / sqrt(fan_in)). A router gain of 5 makes the softmax peaked
# enough that a top-k set change between BF16 and float32 activations (a near tie) moves the output
# little (at gain 2 such flips gave single-step logit errors of 0.4-0.6, 10x the others).
GAINS = {"qkv": 1.0, "o": 0.7, "router": 5.0, "w13": 1.0, "w2": 1.5, "norm_noise": 0.1}


@dataclass
class LayerWeights:
    input_norm: torch.Tensor    # [H] BF16
    post_norm: torch.Tensor     # [H] BF16
    q_norm: torch.Tensor        # [D] BF16
    k_norm: torch.Tensor        # [D] BF16
    wq: torch.Tensor            # [Hq D, H] BF16
    wk: torch.Tensor            # [Hkv D, H] BF16
    wv: torch.Tensor            # [Hkv D, H] BF16
    wo: torch.Tensor            # [H, Hq D] BF16
    gate: torch.Tensor          # [E, H] FP32 router weight
    w13: torch.Tensor           # [E, 2I, H] BF16, gate rows then up rows (transformers' gate_up_proj)
    w2: torch.Tensor            # [E, H, I] BF16


@dataclass
class ModelWeights:
    embed: torch.Tensor         # [V, H] BF16
    lm_head: torch.Tensor       # [V, H] BF16
    final_norm: torch.Tensor    # [H] BF16
    layers: list[LayerWeights] = field(default_factory=list)
    successor: torch.Tensor | None = None  # [V] int64: the token each token's lm_head row favours


def random_weights(cfg: ModelConfig, seed: int = 0, device: torch.device | str = "cpu") -> ModelWeights:
    """Seeded random weights of `cfg` on `device` (see the module docstring for the scales)."""
    device = torch.device(device)
    g = torch.Generator(device=device).manual_seed(seed)
    H, D, V = cfg.hidden_size, cfg.head_dim, cfg.vocab_size
    Hq, Hkv, E, inter = cfg.num_qo_heads, cfg.num_kv_heads, cfg.num_experts, cfg.moe_intermediate_size

    def randn(*shape, std=1.0, dtype=torch.bfloat16):
        return (torch.randn(*shape, generator=g, device=device) * std).to(dtype)

    def norm(n):
        return (1.0 + randn(n, std=GAINS["norm_noise"], dtype=torch.float32)).to(torch.bfloat16)

    embed = randn(V, H)
    succ = torch.randperm(V, generator=g, device=device)
    lm_head = torch.empty_like(embed)
    lm_head[succ] = (embed.float() / math.sqrt(H)).to(torch.bfloat16)
    layers = []
    for _ in range(cfg.num_layers):
        layers.append(LayerWeights(
            input_norm=norm(H), post_norm=norm(H), q_norm=norm(D), k_norm=norm(D),
            wq=randn(Hq * D, H, std=GAINS["qkv"] / math.sqrt(H)), wk=randn(Hkv * D, H, std=GAINS["qkv"] / math.sqrt(H)),
            wv=randn(Hkv * D, H, std=GAINS["qkv"] / math.sqrt(H)), wo=randn(H, Hq * D, std=GAINS["o"] / math.sqrt(Hq * D)),
            gate=randn(E, H, std=GAINS["router"] / math.sqrt(H), dtype=torch.float32),
            w13=randn(E, 2 * inter, H, std=GAINS["w13"] / math.sqrt(H)),
            w2=randn(E, H, inter, std=GAINS["w2"] / math.sqrt(inter))))
    return ModelWeights(embed=embed, lm_head=lm_head, final_norm=norm(H), layers=layers, successor=succ)


def moe_checkpoint(w13: torch.Tensor, w2: torch.Tensor, quant: str) -> dict:
    """One rank's experts in the checkpoint layout hpc_moe.MoEWeights.prepare takes: BF16 as is, or
    FP8 E4M3 with 128 x 128 block scales quantised from the BF16 values of this rank's shard."""
    if quant == "bf16":
        return {"w13": w13.to(torch.bfloat16).contiguous(), "w2": w2.to(torch.bfloat16).contiguous()}
    if quant == "fp8_block":
        q13, s13 = quantize_blocks(w13)
        q2, s2 = quantize_blocks(w2)
        return {"w13": q13, "w2": q2, "w13_scale": s13, "w2_scale": s2}
    raise ValueError(f"moe_checkpoint: quant must be 'bf16' or 'fp8_block', got {quant!r}")


def effective_experts(ckpt: dict, quant: str, dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13, w2) as the values the kernels multiply: BF16 as is, FP8 times its block scales."""
    from hpc_moe.reference import dequantize_w2, dequantize_w13

    return (dequantize_w13(ckpt["w13"], ckpt.get("w13_scale"), quant, dtype),
            dequantize_w2(ckpt["w2"], ckpt.get("w2_scale"), quant, dtype))
