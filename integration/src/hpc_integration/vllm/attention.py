"""vLLM attention backend: decode through hpc_attention (plan once per step in the metadata
builder, shared by every layer of the KV-cache group; decode per layer), prefill through the
framework's kernels (hpc-attention has no prefill kernel yet).

vLLM hands each layer its cache as the logical tensor [blocks, Hkv, block_size, 2 * D];
`transpose(1, 2).split(D, -1)` views it without copy as the operators' [pages, page_size, Hkv, D]
K and V caches (unit inner stride, any outer strides, which the decode kernel takes as given).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
    MultipleOf,
)
from vllm.v1.attention.backends.utils import split_decodes_and_prefills

from .. import ops, support

_FP8_KV = ("fp8", "fp8_e4m3")


def _kv_torch_dtype(cache_dtype: str, model_dtype: torch.dtype) -> torch.dtype:
    if cache_dtype in ("auto", None):
        return model_dtype
    if cache_dtype in _FP8_KV:
        return torch.float8_e4m3fn
    if cache_dtype == "bfloat16":
        return torch.bfloat16
    return getattr(torch, str(cache_dtype), torch.uint8)


@dataclass
class HpcAttentionMetadata(AttentionMetadata):
    num_actual_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_prefills: int
    max_query_len: int
    max_seq_len: int
    query_start_loc: torch.Tensor
    query_start_loc_cpu: torch.Tensor
    seq_lens: torch.Tensor
    block_table: torch.Tensor
    slot_mapping: torch.Tensor
    decode: ops.DecodeState | None  # planned for this step's decodes (None: no decodes)
    decode_lens: torch.Tensor | None  # the kv_lens tensor the plan was built from


class HpcAttentionMetadataBuilder(AttentionMetadataBuilder[HpcAttentionMetadata]):
    # Decode-only batches replay in full CUDA graphs: the plan is built before each replay from the
    # persistent seq_lens buffer into the persistent workspace, and the graph reads both by address.
    _cudagraph_support = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE
    reorder_batch_threshold: int = 1  # decodes first, then prefills

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        model = vllm_config.model_config
        par = vllm_config.parallel_config
        self.block_size = kv_cache_spec.block_size
        num_kv_heads = kv_cache_spec.num_kv_heads
        num_qo_heads = model.get_num_attention_heads(par)
        kv_dtype = _kv_torch_dtype(vllm_config.cache_config.cache_dtype, model.dtype)
        max_len = model.max_model_len
        self.decode_state = ops.DecodeState(vllm_config.scheduler_config.max_num_seqs, num_kv_heads, num_qo_heads,
                                            max_len, torch.device(device), kv_dtype)

    def build(self, common_prefix_len: int, common_attn_metadata: CommonAttentionMetadata,
              fast_build: bool = False) -> HpcAttentionMetadata:
        m = common_attn_metadata
        num_decodes, num_prefills, num_decode_tokens, _ = split_decodes_and_prefills(
            m, decode_threshold=self.reorder_batch_threshold)
        decode_lens = None
        if num_decodes:
            decode_lens = m.seq_lens[:num_decodes]
            if decode_lens.dtype != torch.int32:
                decode_lens = decode_lens.to(torch.int32)
            self.decode_state.plan(decode_lens)
        return HpcAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens, num_decodes=num_decodes, num_decode_tokens=num_decode_tokens,
            num_prefills=num_prefills, max_query_len=m.max_query_len, max_seq_len=m.max_seq_len,
            query_start_loc=m.query_start_loc, query_start_loc_cpu=m.query_start_loc_cpu, seq_lens=m.seq_lens,
            block_table=m.block_table_tensor, slot_mapping=m.slot_mapping,
            decode=self.decode_state if num_decodes else None, decode_lens=decode_lens)


class HpcAttentionBackend(AttentionBackend):
    """Registered as AttentionBackendEnum.CUSTOM (and over CPU_ATTN on the CPU platform when
    HPC_INTEGRATION_CPU_REFERENCE=1): select it with `attention_backend="CUSTOM"`."""

    accept_output_buffer: bool = True
    forward_includes_kv_cache_update: bool = True
    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.bfloat16]
    supported_kv_cache_dtypes: ClassVar[list] = ["auto", "bfloat16", "fp8", "fp8_e4m3"]

    @staticmethod
    def get_supported_kernel_block_sizes(kv_cache_spec=None) -> list:
        return [MultipleOf(16)]  # powers of two are checked per layer (Impl.__init__)

    @staticmethod
    def get_name() -> str:
        return "CUSTOM"

    @staticmethod
    def get_impl_cls() -> type[HpcAttentionImpl]:
        return HpcAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[HpcAttentionMetadataBuilder]:
        return HpcAttentionMetadataBuilder

    @classmethod
    def get_supported_head_sizes(cls) -> list[int]:
        return [support.HEAD_DIM]

    @classmethod
    def supports_compute_capability(cls, capability) -> bool:
        return (capability.major, capability.minor) == (9, 0)


class HpcAttentionImpl(AttentionImpl[HpcAttentionMetadata]):
    def __init__(self, num_heads: int, head_size: int, scale: float, num_kv_heads: int,
                 alibi_slopes: list[float] | None = None, sliding_window: int | None = None,
                 kv_cache_dtype: str = "auto", logits_soft_cap: float | None = None,
                 attn_type: str = AttentionType.DECODER, kv_sharing_target_layer_name: str | None = None,
                 sinks: torch.Tensor | None = None) -> None:
        kv_dtype = torch.float8_e4m3fn if kv_cache_dtype in _FP8_KV else torch.bfloat16
        if kv_cache_dtype not in ("auto", "bfloat16", *_FP8_KV):
            kv_dtype = torch.uint8  # reported below
        reason = support.attention_reason(
            head_dim=head_size, num_qo_heads=num_heads, num_kv_heads=num_kv_heads, page_size=64, kv_dtype=kv_dtype,
            sliding_window=sliding_window, logit_cap=logits_soft_cap, is_cross=attn_type != AttentionType.DECODER)
        if reason is None and alibi_slopes is not None:
            reason = "ALiBi slopes: not supported by the decode kernel"
        if reason is None and sinks is not None:
            reason = "attention sinks: not supported by the decode kernel"
        if reason is not None:
            raise ValueError(f"hpc-integration: attention_backend=CUSTOM cannot serve this layer ({reason}); "
                             "choose another attention_backend")
        self.num_heads, self.head_size, self.num_kv_heads = num_heads, head_size, num_kv_heads
        self.scale = float(scale)
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name
        self.fp8_kv = kv_cache_dtype in _FP8_KV
        self.attn_type = attn_type
        self.sliding_window = None
        self.logits_soft_cap = None
        self.alibi_slopes = None
        self.sinks = None

    def _caches(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = ops.vllm_kv_views(kv_cache, self.head_size, self.fp8_kv)
        page_size = k.shape[1]
        if page_size & (page_size - 1):
            raise ValueError(f"hpc-integration: block size {page_size} is not a power of two; set block_size "
                             "to 16, 32, 64 (the reference) or 128")
        return k, v

    def _write_kv(self, layer, key, value, k_cache, v_cache, slot_mapping, n: int) -> None:
        if self.kv_sharing_target_layer_name is not None or key is None:
            return
        if k_cache.is_cuda:
            # the framework's cache writer: skips padded slots (-1) without a host sync
            torch.ops._C_cache_ops.reshape_and_cache_flash(key[:n], value[:n], k_cache, v_cache, slot_mapping[:n],
                                                           self.kv_cache_dtype, layer._k_scale, layer._v_scale)
            return
        slots = slot_mapping[:n].long()
        keep = slots >= 0
        slots = slots[keep]
        page_size = k_cache.shape[1]
        blk, off = slots // page_size, slots % page_size
        kq, vq = key[:n][keep], value[:n][keep]
        if self.fp8_kv:
            kq = (kq.float() / layer._k_scale_float).to(torch.float8_e4m3fn)
            vq = (vq.float() / layer._v_scale_float).to(torch.float8_e4m3fn)
        k_cache[blk, off] = kq.to(k_cache.dtype)
        v_cache[blk, off] = vq.to(v_cache.dtype)

    def forward(self, layer, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor,
                attn_metadata: HpcAttentionMetadata | None, output: torch.Tensor | None = None,
                output_scale: torch.Tensor | None = None,
                output_block_scale: torch.Tensor | None = None) -> torch.Tensor:
        assert output is not None, "hpc-integration: vLLM must pass the output buffer"
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("hpc-integration: fused output quantisation is not supported")
        if attn_metadata is None:  # profiling run
            return output.fill_(0)
        m = attn_metadata
        n = m.num_actual_tokens
        k_cache, v_cache = self._caches(kv_cache)
        self._write_kv(layer, key, value, k_cache, v_cache, m.slot_mapping, n)
        k_scale = layer._k_scale if self.fp8_kv else 1.0
        v_scale = layer._v_scale if self.fp8_kv else 1.0
        if not k_cache.is_cuda and self.fp8_kv:
            k_scale, v_scale = layer._k_scale_float, layer._v_scale_float
        out = output.view(output.shape[0], self.num_heads, self.head_size)
        q = query.view(query.shape[0], self.num_heads, self.head_size)
        nd = m.num_decode_tokens
        if m.num_decodes:
            B = m.num_decodes
            m.decode.decode(q[:B], k_cache, v_cache, m.block_table[:B], m.decode_lens, sm_scale=self.scale,
                            k_scale=k_scale, v_scale=v_scale, out=out[:B])
        if m.num_prefills:
            self._prefill(q, k_cache, v_cache, m, out, k_scale, v_scale, nd)
        return output

    def _prefill(self, q, k_cache, v_cache, m: HpcAttentionMetadata, out, k_scale, v_scale, nd: int) -> None:
        first = m.num_decodes
        qsl = m.query_start_loc_cpu[first:first + m.num_prefills + 1].tolist()
        end = qsl[-1]
        if not q.is_cuda:
            kv_lens = m.seq_lens[first:first + m.num_prefills].tolist()
            q_lens = [b - a for a, b in zip(qsl[:-1], qsl[1:])]
            out[nd:end] = ops.paged_prefill_reference(q[nd:end], k_cache, v_cache, m.block_table[first:],
                                                      kv_lens, q_lens, sm_scale=self.scale, k_scale=k_scale,
                                                      v_scale=v_scale)
            return
        # On the GPU: vLLM's Triton unified attention over the same paged cache (varlen, causal).
        from vllm.v1.attention.ops.triton_unified_attention import unified_attention

        ops._count("prefill.framework")
        cu_q = m.query_start_loc[first:first + m.num_prefills + 1] - m.query_start_loc[first]
        descale = None
        if self.fp8_kv:  # per-tensor scales as [1, Hkv]-broadcastable tensors, the kernel's convention
            descale = (layer_scale(k_scale, self.num_kv_heads), layer_scale(v_scale, self.num_kv_heads))
        unified_attention(q=q[nd:end], k=k_cache, v=v_cache, out=out[nd:end], cu_seqlens_q=cu_q,
                          max_seqlen_q=m.max_query_len, seqused_k=m.seq_lens[first:first + m.num_prefills],
                          max_seqlen_k=m.max_seq_len, softmax_scale=self.scale, causal=True,
                          window_size=(-1, -1), block_table=m.block_table[first:first + m.num_prefills],
                          softcap=0, q_descale=None, k_descale=None if descale is None else descale[0],
                          v_descale=None if descale is None else descale[1])


def layer_scale(scale, num_kv_heads: int) -> torch.Tensor:
    """A per-tensor KV scale (tensor or float) as the [1, Hkv] float32 tensor Triton's kernel reads."""
    t = scale if isinstance(scale, torch.Tensor) else torch.tensor([float(scale)])
    return t.reshape(1, 1).to(torch.float32).expand(1, num_kv_heads)
