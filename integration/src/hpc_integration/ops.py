"""The operator calls the adapters make, one place per operator, through the packages' public
APIs only: on an SM90 GPU the kernels, on any other device the operators' pure-torch references
(so the wiring of each framework can be tested on a CPU).

Layouts here are the operators' own: paged KV caches `[pages, page_size, Hkv, D]` (any strides
with a unit inner stride), page tables `[B, max_pages]` int32, KV lengths `[B]` int32.
"""

from __future__ import annotations

import torch

from . import support

# Calls per operator and path since the process started ("attention.kernel", "moe.reference", ...):
# the framework tests read them to show which path ran.
CALLS: dict[str, int] = {}


def _count(name: str) -> None:
    CALLS[name] = CALLS.get(name, 0) + 1


def on_kernels(t: torch.Tensor) -> bool:
    """Whether calls on `t`'s device run the hpc-ops kernels (else the references)."""
    return t.is_cuda and support.device_reason(t.device) is None


# ---- attention ----------------------------------------------------------------------------------

def vllm_kv_views(kv_cache: torch.Tensor, head_size: int, fp8: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V caches [blocks, block_size, Hkv, D] viewed without copy from the cache vLLM hands
    an attention layer: the logical [blocks, Hkv, block_size, 2 * D] tensor (K then V along the
    last dim), whatever its physical layout. FP8 caches arrive as uint8 and are viewed as E4M3."""
    k, v = kv_cache.transpose(1, 2).split(head_size, dim=-1)
    if fp8 and k.dtype != torch.float8_e4m3fn:
        k, v = k.view(torch.float8_e4m3fn), v.view(torch.float8_e4m3fn)
    return k, v


class DecodeState:
    """The decode workspace of one attention backend and the plan of the current step. Built once
    (outside graph capture) for the most requests and the longest context; `plan` is called once
    per step (inside the captured graph, so every replay re-plans from the device lengths) and
    `decode` once per layer."""

    def __init__(self, max_batch: int, num_kv_heads: int, num_qo_heads: int, max_kv_len: int,
                 device: torch.device, kv_dtype: torch.dtype):
        self.device = torch.device(device)
        self.kv_dtype = kv_dtype
        self.num_kv_heads, self.num_qo_heads = num_kv_heads, num_qo_heads
        self.max_kv_len = max_kv_len
        self.plan_ = None
        self.workspace = None
        if on_kernels(torch.empty(0, device=self.device)):
            import hpc_attention

            self.workspace = hpc_attention.DecodeWorkspace(max_batch, num_kv_heads, num_qo_heads, max_kv_len,
                                                           self.device)

    def plan(self, kv_lens: torch.Tensor, page_table: torch.Tensor | None = None,
             page_size: int | None = None) -> None:
        """Plan the step from the device-side lengths (kv_lens [B] int32 contiguous)."""
        if self.workspace is None:
            self.plan_ = None
            return
        import hpc_attention

        self.plan_ = hpc_attention.plan_decode(kv_lens, self.num_kv_heads, self.num_qo_heads,
                                               workspace=self.workspace, kv_dtype=self.kv_dtype,
                                               page_table=page_table, page_size=page_size, validate=False)

    def decode(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, page_table: torch.Tensor,
               kv_lens: torch.Tensor, *, sm_scale: float, k_scale=1.0, v_scale=1.0,
               out: torch.Tensor | None = None, new_tokens: int | None = None) -> torch.Tensor:
        """q [B, Hq, D] -> [B, Hq, D] in q's dtype (BF16 on the kernels). new_tokens=1 right after
        the fused prologue (the kernel before this one writes only each request's newest KV row):
        the decode starts streaming older KV before its PDL wait (hpc_attention.decode)."""
        if self.workspace is not None:
            import hpc_attention

            if self.plan_ is None:
                raise RuntimeError("hpc-integration: decode called before the step was planned")
            _count("attention.kernel")
            return hpc_attention.decode(q, k_cache, v_cache, page_table, kv_lens, self.plan_, sm_scale=sm_scale,
                                        k_scale=k_scale, v_scale=v_scale, out=out, new_tokens=new_tokens)
        from hpc_attention.reference import decode_reference

        _count("attention.reference")
        res = decode_reference(q, k_cache, v_cache, page_table, kv_lens, sm_scale=sm_scale, k_scale=k_scale,
                               v_scale=v_scale, dtype=torch.float32).to(q.dtype)
        if out is None:
            return res
        out.copy_(res)
        return out


def qk_norm_rope_store(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                       num_qo_heads: int, num_kv_heads: int, q_norm_weight: torch.Tensor | None,
                       k_norm_weight: torch.Tensor | None, eps: float, rope_style: str, rotary_dim: int,
                       k_scale=None, v_scale=None) -> torch.Tensor:
    """The fused attention prologue of one layer (hpc_attention.qk_norm_rope_store): QK-Norm and RoPE
    of qkv [T, (Hq + 2 Hkv) * 128] BF16, K / V written at slot_mapping into the paged caches
    [pages, page_size, Hkv, 128] (FP8 caches: stored = value / scale). Returns q [T, Hq, 128] BF16.
    Never validates on the host (no synchronisation, graph-safe): the adapters pass the framework's
    own positions and write locations."""
    if on_kernels(qkv):
        import hpc_attention

        _count("prologue.kernel")
        q, _ = hpc_attention.qk_norm_rope_store(
            qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping, num_qo_heads=num_qo_heads,
            num_kv_heads=num_kv_heads, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps,
            rope_style=rope_style, rotary_dim=rotary_dim, k_scale=k_scale, v_scale=v_scale, validate=False)
        return q
    from hpc_attention.reference import qk_norm_rope_store_reference

    _count("prologue.reference")
    # float32 like the kernel; the reference rounds once, to the output and cache dtypes
    q, _ = qk_norm_rope_store_reference(
        qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping, num_qo_heads=num_qo_heads,
        num_kv_heads=num_kv_heads, q_norm_weight=q_norm_weight, k_norm_weight=k_norm_weight, eps=eps,
        rope_style=rope_style, rotary_dim=rotary_dim, k_scale=k_scale, v_scale=v_scale, dtype=torch.float32)
    return q


def paged_prefill_reference(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            page_table: torch.Tensor, kv_lens: list[int], q_lens: list[int], *, sm_scale: float,
                            k_scale=1.0, v_scale=1.0, causal: bool = True) -> torch.Tensor:
    """Causal attention of new tokens over a paged cache that already holds them, in float32.

    q [sum(q_lens), Hq, D], request b's rows in order; its KV is the first kv_lens[b] tokens of its
    pages, the last q_lens[b] of which are its new tokens (query i of n sees keys 0 .. L - n + i).
    hpc-attention has no prefill kernel yet: this is what the adapters run for extend on the CPU.
    """
    from hpc_attention.reference import _dequant, _gather_kv

    _count("prefill.reference")
    Hq, D = q.shape[1], q.shape[2]
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    start = 0
    for b, (L, n) in enumerate(zip(kv_lens, q_lens)):
        if n == 0:
            continue
        k = _dequant(_gather_kv(k_cache, page_table[b], L), k_scale, torch.float32)  # [L, Hkv, D]
        v = _dequant(_gather_kv(v_cache, page_table[b], L), v_scale, torch.float32)
        qb = q[start:start + n].to(torch.float32).view(n, Hkv, G, D)
        s = torch.einsum("nhgd,lhd->hgnl", qb, k) * sm_scale
        if causal:
            qpos = torch.arange(L - n, L, device=q.device)[:, None]
            kpos = torch.arange(L, device=q.device)[None, :]
            s = s.masked_fill(kpos > qpos, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = torch.einsum("hgnl,lhd->nhgd", p, v).reshape(n, Hq, D)
        out[start:start + n] = o.to(q.dtype)
        start += n
    return out


# ---- MoE ----------------------------------------------------------------------------------------

def prepare_experts(w13: torch.Tensor, w2: torch.Tensor, quant: str = "bf16", *, w13_scale=None, w2_scale=None,
                    a1_scale=None, ep_rank: int = 0, ep_size: int = 1, num_experts: int | None = None):
    """hpc_moe.MoEWeights of one layer (a converted copy made at load time; the framework keeps
    its own parameters, so its loaders and weight updates keep working: see `refresh` in the
    adapters)."""
    import hpc_moe

    return hpc_moe.MoEWeights.prepare(w13, w2, quant, w13_scale=w13_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                                      ep_rank=ep_rank, ep_size=ep_size, num_experts=num_experts)


def fused_moe(hidden: torch.Tensor, weights, topk_ids: torch.Tensor, topk_weights: torch.Tensor, *,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """hidden [T, H] (cast to BF16), global top-k ids [T, k], weights [T, k] -> [T, H] in hidden's dtype."""
    import hpc_moe

    _count("moe.kernel" if on_kernels(hidden) else "moe.reference")
    x = hidden if hidden.dtype == torch.bfloat16 else hidden.to(torch.bfloat16)
    if not x.is_contiguous():
        x = x.contiguous()
    ids = topk_ids if topk_ids.dtype in (torch.int32, torch.int64) else topk_ids.to(torch.int32)
    res = hpc_moe.fused_moe(x, weights, ids.contiguous(), topk_weights.to(torch.float32).contiguous(),
                            out=out if out is not None and out.dtype == torch.bfloat16 else None)
    if out is not None and res.data_ptr() != out.data_ptr():
        out.copy_(res)
        return out
    return res if res.dtype == hidden.dtype else res.to(hidden.dtype)


# ---- router -------------------------------------------------------------------------------------

class RouterState:
    """The prepared router weight of one gate (the BF16 split made once, at load time)."""

    def __init__(self, weight: torch.Tensor):
        self.weight = weight
        self.prepared = None
        if on_kernels(weight):
            import hpc_router_gemm

            self.prepared = hpc_router_gemm.RouterWeight(weight)

    def refresh(self) -> None:
        """After an in-place weight update (graphs replay the split buffers by address)."""
        if self.prepared is not None:
            self.prepared.refresh()

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """x [M, K] BF16 -> FP32 scores [M, N]."""
        x = x if x.dtype == torch.bfloat16 else x.to(torch.bfloat16)
        if self.prepared is not None:
            import hpc_router_gemm

            _count("router.kernel")
            return hpc_router_gemm.router_gemm(x.contiguous(), self.prepared)
        from hpc_router_gemm.reference import router_gemm_reference

        _count("router.reference")
        return router_gemm_reference(x, self.weight).to(torch.float32)
