"""Model and parallel configurations of the decode-step runner.

`ModelConfig` is what the runner reads from a `transformers` config (`from_hf`): the shapes of a
Qwen3-MoE-style decoder (QK-Norm, GQA, RoPE, every layer a top-k softmax MoE, no shared expert).
`hf_config(name, ...)` builds the `transformers.Qwen3MoeConfig` of each preset:

| preset | hidden | heads q/kv | experts, top-k | expert I | what it stands for |
|---|---|---|---|---|---|
| `qwen3_30b_a3b` | 2048 | 32 / 4 | 128, 8 | 768 | Qwen3-30B-A3B at TP1 |
| `qwen3_30b_a3b_64x8` | 2048 | 64 / 8 | 128, 8 | 768 | the same with 64/8 heads (the BRIEF's 64/8 decode setting) |
| `hy3_tp8` | 4096 | 8 / 1 | 192, 8 | 192 | Hy3 at TP8 as one rank sees it (64/8 heads, I = 1536 split 8 ways) |
| `tiny` | 256 | 4 / 2 | 64, 4 | 64 | CPU tests (head dim 128 like the kernels; E = 64 for the router GEMM) |

Hy3 is built as a Qwen3MoeConfig: transformers (>= 5.2x) also has `HYV3Config` (`hy_v3`), whose
router is a sigmoid with a score-correction bias and a scaling factor, with one shared expert and a
dense first layer; the kernels a decode step runs have the same shapes either way, and the H200
machine's transformers (5.12, from the SGLang bundle) predates it, so the runner keeps one model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

KV_DTYPES = {"bf16": torch.bfloat16, "fp8": torch.float8_e4m3fn, "fp32": torch.float32}
MOE_QUANTS = ("bf16", "fp8_block")


@dataclass(frozen=True)
class ModelConfig:
    """The decoder's full (unsharded) shapes."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_qo_heads: int
    num_kv_heads: int
    head_dim: int
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1e6
    norm_topk_prob: bool = True
    max_position: int = 32768
    name: str = "custom"

    def __post_init__(self):
        for field in ("vocab_size", "hidden_size", "num_layers", "num_qo_heads", "num_kv_heads", "head_dim",
                      "num_experts", "top_k", "moe_intermediate_size", "max_position"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"ModelConfig: {field} must be an int >= 1, got {v!r}")
        if self.num_qo_heads % self.num_kv_heads:
            raise ValueError(f"ModelConfig: num_qo_heads {self.num_qo_heads} must be a multiple of num_kv_heads "
                             f"{self.num_kv_heads}")
        if self.top_k > self.num_experts:
            raise ValueError(f"ModelConfig: top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.head_dim % 2:
            raise ValueError(f"ModelConfig: head_dim must be even (RoPE pairs), got {self.head_dim}")

    @classmethod
    def from_hf(cls, cfg, name: str | None = None) -> "ModelConfig":
        """From a transformers Qwen3MoeConfig (or any config with the same fields). Features the
        runner does not model are refused with the field to change."""
        def need(field, ok, what):
            if not ok:
                raise ValueError(f"ModelConfig.from_hf: {field}={getattr(cfg, field, None)!r} is not supported "
                                 f"({what})")
        need("hidden_act", getattr(cfg, "hidden_act", "silu") == "silu", "experts compute silu(gate) * up")
        need("attention_bias", not getattr(cfg, "attention_bias", False), "projections have no bias")
        need("mlp_only_layers", not getattr(cfg, "mlp_only_layers", []), "every layer is a MoE layer")
        need("decoder_sparse_step", getattr(cfg, "decoder_sparse_step", 1) == 1, "every layer is a MoE layer")
        need("sliding_window", not (getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None)),
             "attention over the whole context")
        need("tie_word_embeddings", not getattr(cfg, "tie_word_embeddings", False), "separate lm_head")
        rope = dict(getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {})
        need("rope_parameters", rope.get("rope_type", rope.get("type", "default")) == "default", "plain RoPE")
        theta = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
        experts = getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts")
        heads = cfg.num_attention_heads
        return cls(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_layers=cfg.num_hidden_layers,
                   num_qo_heads=heads, num_kv_heads=cfg.num_key_value_heads,
                   head_dim=getattr(cfg, "head_dim", None) or cfg.hidden_size // heads, num_experts=experts,
                   top_k=cfg.num_experts_per_tok, moe_intermediate_size=cfg.moe_intermediate_size,
                   rms_norm_eps=float(cfg.rms_norm_eps), rope_theta=float(theta),
                   norm_topk_prob=bool(cfg.norm_topk_prob), max_position=cfg.max_position_embeddings,
                   name=name or getattr(cfg, "model_type", "custom"))


# name: (hidden, Hq, Hkv, experts, top_k, I, rope_theta, rms eps)
PRESETS = {
    "qwen3_30b_a3b": (2048, 32, 4, 128, 8, 768, 1e6, 1e-6),
    "qwen3_30b_a3b_64x8": (2048, 64, 8, 128, 8, 768, 1e6, 1e-6),
    "hy3_tp8": (4096, 8, 1, 192, 8, 192, 11158840.0, 1e-5),
    "tiny": (256, 4, 2, 64, 4, 64, 1e6, 1e-6),
}


def hf_config(name: str, *, num_layers: int = 2, vocab_size: int = 4096, max_position: int = 16384):
    """The transformers.Qwen3MoeConfig of a preset (a few layers, a small vocabulary: see PRESETS)."""
    from transformers import Qwen3MoeConfig

    if name not in PRESETS:
        raise ValueError(f"hf_config: name must be one of {sorted(PRESETS)}, got {name!r}")
    hidden, hq, hkv, experts, top_k, inter, theta, eps = PRESETS[name]
    return Qwen3MoeConfig(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=4 * inter,
                          num_hidden_layers=num_layers, num_attention_heads=hq, num_key_value_heads=hkv, head_dim=128,
                          num_experts=experts, num_experts_per_tok=top_k, moe_intermediate_size=inter,
                          norm_topk_prob=True, rms_norm_eps=eps, rope_theta=theta, max_position_embeddings=max_position,
                          tie_word_embeddings=False, decoder_sparse_step=1, mlp_only_layers=[])


def preset(name: str, **kw) -> ModelConfig:
    """ModelConfig of a preset, through its transformers config when transformers is importable."""
    try:
        return ModelConfig.from_hf(hf_config(name, **kw), name=name)
    except ImportError:
        hidden, hq, hkv, experts, top_k, inter, theta, eps = PRESETS[name]
        return ModelConfig(vocab_size=kw.get("vocab_size", 4096), hidden_size=hidden, num_layers=kw.get("num_layers", 2),
                           num_qo_heads=hq, num_kv_heads=hkv, head_dim=128, num_experts=experts, top_k=top_k,
                           moe_intermediate_size=inter, rms_norm_eps=eps, rope_theta=theta,
                           max_position=kw.get("max_position", 16384), name=name)


@dataclass(frozen=True)
class ParallelConfig:
    """Which shard of the model this process holds. Attention heads are split by TP; the MoE by TP
    (a slice of every expert's intermediate dim) when ep_size == 1, else by EP (a contiguous range
    of experts, global ids kept). `group` is the torch.distributed process group of the all-reduces
    after the O projection and after the MoE (None: the default group; unused at world 1)."""

    tp_rank: int = 0
    tp_size: int = 1
    ep_rank: int = 0
    ep_size: int = 1
    group: object = None

    def __post_init__(self):
        for rank, size, what in ((self.tp_rank, self.tp_size, "tp"), (self.ep_rank, self.ep_size, "ep")):
            if size < 1 or not 0 <= rank < size:
                raise ValueError(f"ParallelConfig: {what}_rank must be in [0, {what}_size), got {rank} of {size}")

    @property
    def world(self) -> int:
        """Ranks that hold a part of each layer's output (the all-reduce's size)."""
        return max(self.tp_size, self.ep_size)

    @property
    def moe_tp_size(self) -> int:
        return 1 if self.ep_size > 1 else self.tp_size

    @property
    def moe_tp_rank(self) -> int:
        return 0 if self.ep_size > 1 else self.tp_rank

    def check(self, cfg: ModelConfig) -> None:
        """The splits must divide the shapes."""
        tp = self.tp_size
        if cfg.num_qo_heads % tp:
            raise ValueError(f"ParallelConfig: tp_size {tp} must divide num_qo_heads {cfg.num_qo_heads}")
        if cfg.num_kv_heads % tp and tp % cfg.num_kv_heads:
            raise ValueError(f"ParallelConfig: tp_size {tp} and num_kv_heads {cfg.num_kv_heads} must divide one "
                             "another (KV heads are split, or replicated when fewer than the ranks)")
        if cfg.num_experts % self.ep_size:
            raise ValueError(f"ParallelConfig: ep_size {self.ep_size} must divide num_experts {cfg.num_experts}")
        if cfg.moe_intermediate_size % self.moe_tp_size:
            raise ValueError(f"ParallelConfig: tp_size {self.moe_tp_size} must divide moe_intermediate_size "
                             f"{cfg.moe_intermediate_size}")
        if self.tp_size > 1 and self.ep_size > 1 and self.tp_size != self.ep_size:
            raise ValueError("ParallelConfig: with both TP attention and EP MoE, tp_size and ep_size must be equal "
                             "(one group all-reduces both)")


@dataclass(frozen=True)
class LocalShapes:
    """One rank's shapes."""

    num_qo_heads: int
    num_kv_heads: int
    num_local_experts: int
    expert_start: int
    moe_intermediate_size: int


def local_shapes(cfg: ModelConfig, par: ParallelConfig) -> LocalShapes:
    par.check(cfg)
    tp = par.tp_size
    e_local = cfg.num_experts // par.ep_size
    return LocalShapes(num_qo_heads=cfg.num_qo_heads // tp, num_kv_heads=max(1, cfg.num_kv_heads // tp),
                       num_local_experts=e_local, expert_start=par.ep_rank * e_local,
                       moe_intermediate_size=cfg.moe_intermediate_size // par.moe_tp_size)


@dataclass(frozen=True)
class RunOptions:
    """Per-runner settings: the KV cache ("bf16", "fp8"; "fp32" for the reference backend only), the
    MoE weight format ("bf16", "fp8_block"), the page size, and the most requests / tokens."""

    kv_dtype: str = "bf16"
    moe_quant: str = "bf16"
    page_size: int = 64
    max_batch: int = 64
    max_kv_len: int = 4096
    kv_scale: float = 1.0 / 64  # per-tensor FP8 K and V scale (values up to 448 / 64 = 7 are representable)

    def __post_init__(self):
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"RunOptions: kv_dtype must be one of {sorted(KV_DTYPES)}, got {self.kv_dtype!r}")
        if self.moe_quant not in MOE_QUANTS:
            raise ValueError(f"RunOptions: moe_quant must be one of {MOE_QUANTS}, got {self.moe_quant!r}")
        ps = self.page_size
        if isinstance(ps, bool) or not isinstance(ps, int) or ps < 1 or ps & (ps - 1):
            raise ValueError(f"RunOptions: page_size must be a power of two, got {ps!r}")
        if self.max_batch < 1 or self.max_kv_len < 1:
            raise ValueError(f"RunOptions: max_batch and max_kv_len must be >= 1, got {self.max_batch}, "
                             f"{self.max_kv_len}")
        if not self.kv_scale > 0:
            raise ValueError(f"RunOptions: kv_scale must be > 0, got {self.kv_scale}")

    @property
    def kv_torch_dtype(self) -> torch.dtype:
        return KV_DTYPES[self.kv_dtype]
