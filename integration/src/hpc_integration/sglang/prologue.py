"""The fused attention prologue inside SGLang: Qwen3-MoE and Qwen3 attention layers whose decode runs
on backend "hpc" replace `q/k norm -> rotary -> KV write` with one hpc_attention.qk_norm_rope_store
call (QK-Norm, RoPE from the layer's own cos/sin cache and style, K / V written at the batch's
cache locations, FP8 KV with the layer's scales), then decode with the KV already in the cache.

Two AROUND hooks through SGLang's hook registry, on methods that exist in 0.5.17 and 0.5.23:
- `Qwen3MoeAttention.apply_qk_norm_rope(qkv, positions, forward_batch)`, the narrowest step that
  still sees the forward batch: returns (q, None, None); forward_core hands k = v = None to the
  attention, so the backend writes nothing (SGLang's own convention for KV already stored);
- `Qwen3Attention.forward(positions, hidden_states, forward_batch)`: its narrower step
  (forward_prepare_native) has no forward batch, so the hook runs the projection, the prologue,
  `attn(q, None, None, save_kv_cache=False)` and the output projection itself.

Which layers take it is decided once, when the backend is built (`plan`), with a one-line start-up
message; a layer outside what the prologue computes (rope variants with their own forward,
other norms, head dim != 128, other KV pools) keeps SGLang's path, as does every extend step
(extend runs on SGLang's own backend, which needs k / v as tensors) and every step the backend
does not decode itself. HPC_SGLANG_PROLOGUE=0 switches it off (no hooks are registered).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import support

MOE_APPLY = "sglang.srt.models.qwen3_moe.Qwen3MoeAttention.apply_qk_norm_rope"
DENSE_FORWARD = "sglang.srt.models.qwen3.Qwen3Attention.forward"
# The attention classes whose layer shape the hooks know (qkv split Hq | Hkv | Hkv, q_norm / k_norm
# RMSNorm per head, rotary_emb, attn = RadixAttention); subclasses are not assumed to keep it.
LAYER_CLASSES = {"Qwen3MoeAttention": "sglang.srt.models.qwen3_moe", "Qwen3Attention": "sglang.srt.models.qwen3"}
LAYER_HOOK = {"Qwen3MoeAttention": MOE_APPLY, "Qwen3Attention": DENSE_FORWARD}
# Pools whose per-layer key / value buffers are [slots, Hkv, D] rows the prologue writes in place.
POOLS = ("MHATokenToKVPool",)


@dataclass(frozen=True)
class PrologueLayer:
    """What one attention layer's prologue call needs beyond the step's tensors."""

    num_qo_heads: int
    num_kv_heads: int
    rope_style: str
    rotary_dim: int
    eps: float


def hooks():
    """(target, AROUND hook) pairs, registered by the plugin."""
    return ((MOE_APPLY, around_apply_qk_norm_rope), (DENSE_FORWARD, around_dense_forward))


# ---- which layers take the prologue (once, when the backend is built) ----------------------------

def _inherits_rotary_forward(rope) -> str | None:
    """The prologue rotates by cos_sin_cache[position] (neox or GPT-J pairs): any RotaryEmbedding
    whose application is the base class's computes that, whatever builds its cache (linear, NTK,
    YaRN and Llama-3 scaling only change the cache). A class with its own forward does not."""
    from sglang.srt.layers.rotary_embedding import RotaryEmbedding

    name = type(rope).__name__
    if not isinstance(rope, RotaryEmbedding):
        return f"rope {name} is not a RotaryEmbedding"
    for method in ("forward", "forward_native", "forward_cuda", "forward_cpu"):
        own = getattr(type(rope), method, None)
        if own is not None and own is not getattr(RotaryEmbedding, method, None):
            return f"rope {name} has its own {method} (a scaling the fused prologue does not implement)"
    if hasattr(rope, "sin_cos_cache"):  # forward_native reads this instead of cos_sin_cache when set
        return f"rope {name} reads a cache other than cos_sin_cache"
    return None


def layer_reason(module, *, kv_dtype: torch.dtype, act_dtype: torch.dtype, context_len: int) -> str | None:
    """None when the fused prologue computes exactly this layer's QK-Norm, RoPE and KV write."""
    name = type(module).__name__
    if LAYER_CLASSES.get(name) != type(module).__module__:
        return f"{name} is not a Qwen3 / Qwen3-MoE attention layer"
    attn, rope = getattr(module, "attn", None), getattr(module, "rotary_emb", None)
    q_norm, k_norm = getattr(module, "q_norm", None), getattr(module, "k_norm", None)
    if attn is None or rope is None or q_norm is None or k_norm is None:
        return f"{name} lacks attn / rotary_emb / q_norm / k_norm"
    if (attn.tp_q_head_num, attn.tp_k_head_num) != (module.num_heads, module.num_kv_heads) \
            or attn.qk_head_dim != module.head_dim or attn.v_head_dim != module.head_dim:
        return f"{name}'s RadixAttention heads differ from its projection's"
    for norm in (q_norm, k_norm):
        if type(norm).__name__ != "RMSNorm" or getattr(norm, "variance_size_override", None) is not None \
                or tuple(norm.weight.shape) != (module.head_dim,):
            return f"{type(norm).__name__} q/k norm: the fused prologue computes a per-head RMSNorm with a weight"
    reason = _inherits_rotary_forward(rope)
    if reason is not None:
        return reason
    if getattr(rope, "head_size", module.head_dim) != module.head_dim:
        return f"rope head size {rope.head_size} != head dim {module.head_dim}"
    if _rl_on_policy():
        return "--rl-on-policy-target is set (the layer casts q / k itself)"
    if not _hook_applied(LAYER_HOOK[name]):
        return (f"the hook on {LAYER_HOOK[name]} is not applied (the plugin loaded with "
                f"{support.ENV_SGLANG_PROLOGUE}=0, or SGLang's HookRegistry.apply_hooks has not run)")
    return support.prologue_reason(
        head_dim=module.head_dim, rotary_dim=rope.rotary_dim, cos_sin_shape=tuple(rope.cos_sin_cache.shape),
        max_positions=context_len, q_norm_eps=q_norm.variance_epsilon, k_norm_eps=k_norm.variance_epsilon,
        norm_dtypes=(q_norm.weight.dtype, k_norm.weight.dtype), act_dtype=act_dtype, kv_dtype=kv_dtype)


def pool_reason(pool) -> str | None:
    name = type(pool).__name__
    if name not in POOLS:
        return f"KV pool {name}: the fused prologue writes the rows of {' / '.join(POOLS)}"
    if getattr(pool, "use_hnd", False) or getattr(pool, "kv_cache_layout", "nhd") != "nhd":
        return f"KV cache layout {getattr(pool, 'kv_cache_layout', 'hnd')}: the fused prologue writes NHD rows"
    if getattr(pool, "is_quantized_kv_cache", False):
        return "a quantised (FP4 / MXFP8) KV pool: the fused prologue writes BF16 or FP8 E4M3 with per-tensor scales"
    return None


def plan(runner, kv_dtype: torch.dtype) -> tuple[dict[int, PrologueLayer], str]:
    """The layers of runner.model that take the prologue (by id of the attention module) and the
    start-up message that says which path runs and why."""
    off = "fused prologue off (SGLang's QK-Norm, RoPE and KV write run): "
    if not support.prologue_enabled():
        return {}, off + f"{support.ENV_SGLANG_PROLOGUE}=0"
    model = getattr(runner, "model", None)
    layers = [m for m in model.modules() if type(m).__name__ in LAYER_CLASSES] if model is not None else []
    if not layers:
        arch = type(model).__name__ if model is not None else "no model"
        return {}, off + f"{arch} has no Qwen3 / Qwen3-MoE attention layers (the layer shapes the hooks know)"
    reason = pool_reason(runner.token_to_kv_pool)
    if reason is not None:
        return {}, off + reason
    act_dtype = getattr(runner, "dtype", None) or getattr(runner.model_config, "dtype", torch.bfloat16)
    context_len = int(getattr(runner.model_config, "context_len", 0) or 0)
    chosen, first_off = {}, None
    for m in layers:
        reason = layer_reason(m, kv_dtype=kv_dtype, act_dtype=act_dtype, context_len=context_len)
        if reason is not None:
            first_off = first_off or f"layer {getattr(getattr(m, 'attn', None), 'layer_id', '?')}: {reason}"
            continue
        chosen[id(m)] = PrologueLayer(m.num_heads, m.num_kv_heads, "neox" if m.rotary_emb.is_neox_style else "gptj",
                                      int(m.rotary_emb.rotary_dim), float(m.q_norm.variance_epsilon))
    if not chosen:
        return {}, off + first_off
    names = sorted({type(m).__name__ for m in layers})
    msg = (f"fused prologue on: {len(chosen)} of {len(layers)} {'/'.join(names)} layers run QK-Norm, RoPE and the "
           "KV write as one hpc_attention.qk_norm_rope_store call per decode step (extend keeps SGLang's path)")
    return chosen, msg + (f"; the others keep SGLang's path ({first_off})" if first_off else "")


def _hook_applied(target: str) -> bool:
    from sglang.srt.plugins.hook_registry import HookRegistry

    return target in HookRegistry._patched


def _rl_on_policy() -> bool:
    try:
        from sglang.srt.runtime_context import get_exec

        return get_exec().deterministic.rl_on_policy_target is not None
    except Exception:  # releases or tests without the execution context
        return False


# ---- the hooks -----------------------------------------------------------------------------------

def _active(module, forward_batch):
    """(backend, layer plan) when this decode step of `module` runs our prologue, else None."""
    from sglang.srt.model_executor import forward_context as fc

    from .attention import HpcAttnBackend

    backend = fc.get_attn_backend() if fc.has_forward_context() else getattr(forward_batch, "attn_backend", None)
    if type(backend).__name__ == "HybridAttnBackend":  # --decode-attention-backend hpc
        backend = backend.decode_backend
    if not isinstance(backend, HpcAttnBackend):
        return None
    spec = backend.prologue_layer(module, forward_batch)
    return None if spec is None else (backend, spec)


def around_apply_qk_norm_rope(original, self, qkv, positions, forward_batch, *args, **kwargs):
    found = _active(self, forward_batch) if not args and not kwargs else None
    if found is None:
        return original(self, qkv, positions, forward_batch, *args, **kwargs)
    backend, spec = found
    q = backend.run_prologue(self, spec, qkv, positions, forward_batch)
    return q, None, None  # k = v = None: the attention call writes no KV (it is in the cache already)


def around_dense_forward(original, self, positions, hidden_states, forward_batch, *args, **kwargs):
    found = _active(self, forward_batch) if not args and not kwargs else None
    if found is None:
        return original(self, positions, hidden_states, forward_batch, *args, **kwargs)
    backend, spec = found
    qkv, _ = self.qkv_proj(hidden_states)
    q = backend.run_prologue(self, spec, qkv, positions, forward_batch)
    attn_output = self.attn(q, None, None, forward_batch, save_kv_cache=False)
    output, _ = self.o_proj(attn_output)
    return output
