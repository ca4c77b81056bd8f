"""SGLang attention backend "hpc": decode through hpc_attention, extend through the framework's
own backend (triton on a GPU, torch_native elsewhere) until hpc-attention has a prefill kernel.

The paged pool is read in place: a layer's key buffer [slots, Hkv, D] is viewed as
[slots / page_size, page_size, Hkv, D], and the page table is req_to_token[req, ::page_size] /
page_size. Per decode step the backend fills its page-table and length buffers and plans once
(`init_forward_metadata_in_graph`, recorded inside SGLang's captured decode graph, so every
replay re-plans from the device lengths); every layer then decodes with that plan. Buffers and
the decode workspace are allocated once (`init_cuda_graph_state`, or at the first eager step).
"""

from __future__ import annotations

import torch
from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

from .. import ops, support


def _kv_write_loc(forward_batch, layer):
    """The write location the pool expects: 0.5.23 a KVWriteLoc carrying the batch's physical
    mark (KVWriteLoc.for_layer); older releases (0.5.17) take the bare out_cache_loc."""
    try:
        from sglang.srt.mem_cache.memory_pool import KVWriteLoc
    except ImportError:
        return forward_batch.out_cache_loc
    if hasattr(KVWriteLoc, "for_layer"):
        return KVWriteLoc.for_layer(forward_batch, layer)
    return forward_batch.out_cache_loc


def _framework_backend(runner):
    """The backend that serves extend (and every step when ours cannot)."""
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    name = "triton" if str(runner.device).startswith("cuda") else "torch_native"
    return name, ATTENTION_BACKENDS[name](runner)


class HpcAttnBackend(AttentionBackend):
    def __init__(self, runner, fallback, fallback_name: str, reason: str | None):
        super().__init__()
        self.fallback = fallback
        self.fallback_name = fallback_name
        self.reason = reason  # None: decode runs on hpc_attention
        self.device = torch.device(runner.device)
        self.req_to_token = runner.req_to_token_pool.req_to_token
        self.kv_pool = runner.token_to_kv_pool
        self.page_size = int(runner.page_size)
        self.kv_dtype = runner.kv_cache_dtype
        self.data_type = getattr(fallback, "data_type", None)
        self.kv_cache_dtype = self.kv_dtype
        cfg = runner.model_config
        tp = _attn_tp_size()
        self.num_qo_heads = cfg.get_num_attention_heads(tp)
        self.num_kv_heads = cfg.get_num_kv_heads(tp)
        self.max_batch = int(runner.req_to_token_pool.size)
        self.max_ctx = int(self.req_to_token.shape[1])
        self.max_pages = -(-self.max_ctx // self.page_size)
        self.state: ops.DecodeState | None = None
        self.page_table = self.kv_lens = None
        self.forward_metadata = None
        self._step = None  # (page_table, kv_lens) of the current decode step
        self._layer_reasons: dict[int, str | None] = {}
        self.prologue_layers: dict = {}  # id(attention module) -> prologue.PrologueLayer (see plan_prologue)
        self.prologue_ran = False
        self._prologue_wrote = None  # layer id whose KV the prologue wrote by the last kernel launched

    # ---- buffers ------------------------------------------------------------------------------

    def _alloc(self, max_bs: int) -> None:
        """Allocate once for the most requests a step can hold: captured graphs keep these buffers'
        addresses, so they are never reallocated."""
        if self.state is not None:
            if max_bs > self.page_table.shape[0]:
                raise RuntimeError(f"hpc-integration: batch {max_bs} exceeds the {self.page_table.shape[0]} "
                                   "requests the attention buffers were sized for")
            return
        rows = max(max_bs, self.max_batch)
        i32 = dict(dtype=torch.int32, device=self.device)
        self.page_table = torch.zeros(rows, self.max_pages, **i32)
        self.kv_lens = torch.zeros(rows, **i32)
        self.state = ops.DecodeState(rows, self.num_kv_heads, self.num_qo_heads, self.max_ctx, self.device,
                                     self.kv_dtype)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int, *args, **kwargs):
        self.fallback.init_cuda_graph_state(max_bs, max_num_tokens, *args, **kwargs)
        if self.reason is None:
            self._alloc(max_bs)

    # ---- per-step metadata --------------------------------------------------------------------

    def _ours(self, forward_batch) -> bool:
        return self.reason is None and forward_batch.forward_mode.is_decode()

    def init_forward_metadata(self, forward_batch):
        if self._ours(forward_batch):
            self.init_forward_metadata_out_graph(forward_batch)
            self.init_forward_metadata_in_graph(forward_batch)
        else:
            self._step = None
            self.fallback.init_forward_metadata(forward_batch)
            self.forward_metadata = self.fallback.forward_metadata

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        if not self._ours(forward_batch):
            self.fallback.init_forward_metadata_out_graph(forward_batch, in_capture)
            self.forward_metadata = self.fallback.forward_metadata
            return
        self._alloc(forward_batch.batch_size)
        self.forward_metadata = None  # decode keeps its state in self.state / self._step

    def init_forward_metadata_in_graph(self, forward_batch):
        if not self._ours(forward_batch):
            self.fallback.init_forward_metadata_in_graph(forward_batch)
            self.forward_metadata = self.fallback.forward_metadata
            return
        bs = forward_batch.batch_size
        pt, lens = self.page_table[:bs], self.kv_lens[:bs]
        rows = self.req_to_token.index_select(0, forward_batch.req_pool_indices[:bs].long())
        pt.copy_(torch.div(rows[:, ::self.page_size], self.page_size, rounding_mode="floor"))
        lens.copy_(forward_batch.seq_lens[:bs])
        self.state.plan(lens, page_table=pt if self.state.workspace is not None else None,
                        page_size=self.page_size)
        self._step = (pt, lens)

    def get_cuda_graph_seq_len_fill_value(self):
        return self.fallback.get_cuda_graph_seq_len_fill_value()

    # ---- forward ------------------------------------------------------------------------------

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        return self.fallback.forward_extend(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True, **kwargs):
        if self._step is None:
            return self.fallback.forward_decode(q, k, v, layer, forward_batch, save_kv_cache=save_kv_cache, **kwargs)
        if save_kv_cache and k is not None and v is not None:
            self.kv_pool.set_kv_buffer(layer, _kv_write_loc(forward_batch, layer), k, v, layer.k_scale, layer.v_scale)
        # Right after this layer's prologue (k = v = None, nothing launched in between) the decode may
        # read the older KV before its PDL wait: the prologue writes only each request's newest row.
        fresh = k is None and self._prologue_wrote == layer.layer_id
        self._prologue_wrote = None
        self._layer_reason(layer)
        hq, hkv, d = layer.tp_q_head_num, layer.tp_k_head_num, layer.head_dim
        k_cache, v_cache = self._caches(layer.layer_id, hkv, d)
        pt, lens = self._step
        bs = lens.shape[0]
        out = q.new_empty(q.shape[0], hq * layer.v_head_dim)
        k_scale = layer.k_scale_float if layer.k_scale_float is not None else 1.0
        v_scale = layer.v_scale_float if layer.v_scale_float is not None else 1.0
        self.state.decode(q.reshape(-1, hq, d)[:bs], k_cache, v_cache, pt, lens, sm_scale=layer.scaling,
                          k_scale=k_scale, v_scale=v_scale, out=out.view(-1, hq, d)[:bs],
                          new_tokens=1 if fresh else None)
        return out

    # ---- fused prologue (prologue.py's hooks call these) --------------------------------------------

    def plan_prologue(self, runner) -> str:
        """Decide once which attention layers take the fused prologue; returns the start-up message."""
        from . import prologue

        self.prologue_layers, message = prologue.plan(runner, self.kv_dtype)
        return message

    def prologue_layer(self, module, forward_batch):
        """The layer's plan when this step's decode runs here (planned by this backend), else None."""
        spec = self.prologue_layers.get(id(module))
        if spec is None or self._step is None or not forward_batch.forward_mode.is_decode():
            return None
        return spec

    def run_prologue(self, module, spec, qkv: torch.Tensor, positions: torch.Tensor, forward_batch) -> torch.Tensor:
        """QK-Norm, RoPE and the KV write of one decode step of `module` (one call); returns q
        [T, Hq * D] BF16 for `attn(q, None, None, ...)`, which then decodes without writing."""
        layer = module.attn
        hq, hkv, d = spec.num_qo_heads, spec.num_kv_heads, layer.head_dim
        loc = forward_batch.out_cache_loc
        T = qkv.shape[0]
        if qkv.dtype != torch.bfloat16 or qkv.dim() != 2 or qkv.shape[1] != (hq + 2 * hkv) * d \
                or loc is None or loc.shape[0] != T:
            raise ValueError(f"hpc-integration: fused prologue of layer {layer.layer_id}: qkv {list(qkv.shape)} "
                             f"{qkv.dtype} / out_cache_loc {None if loc is None else list(loc.shape)} do not match "
                             f"{hq}/{hkv} heads of dim {d}; set HPC_SGLANG_PROLOGUE=0 and report this")
        k_cache, v_cache = self._caches(layer.layer_id, hkv, d)
        scales = {}
        if self.kv_dtype == torch.float8_e4m3fn:  # the scales our decode reads back with (forward_decode)
            scales = dict(k_scale=layer.k_scale_float if layer.k_scale_float is not None else 1.0,
                          v_scale=layer.v_scale_float if layer.v_scale_float is not None else 1.0)
        pos = positions.reshape(-1)
        q = ops.qk_norm_rope_store(
            qkv, pos if pos.is_contiguous() else pos.contiguous(), module.rotary_emb.cos_sin_cache, k_cache, v_cache,
            loc if loc.is_contiguous() else loc.contiguous(), num_qo_heads=hq, num_kv_heads=hkv,
            q_norm_weight=module.q_norm.weight, k_norm_weight=module.k_norm.weight, eps=spec.eps,
            rope_style=spec.rope_style, rotary_dim=spec.rotary_dim, **scales)
        self._prologue_wrote = layer.layer_id
        if not self.prologue_ran:
            self.prologue_ran = True
            where = "kernels" if ops.on_kernels(qkv) else "reference, no SM90 GPU"
            support.say(f"fused prologue ran: decode QK-Norm, RoPE and KV write by hpc_attention.qk_norm_rope_store "
                        f"({where})")
        return q.view(T, hq * d)

    def _caches(self, layer_id: int, hkv: int, d: int):
        k = self.kv_pool.get_key_buffer(layer_id)
        v = self.kv_pool.get_value_buffer(layer_id)
        pages = k.shape[0] // self.page_size
        shape = (pages, self.page_size, hkv, d)
        return (k[:pages * self.page_size].view(shape), v[:pages * self.page_size].view(shape))

    def _layer_reason(self, layer) -> str | None:
        if layer.layer_id in self._layer_reasons:
            return self._layer_reasons[layer.layer_id]
        reason = support.attention_reason(
            head_dim=layer.qk_head_dim, v_head_dim=layer.v_head_dim, num_qo_heads=layer.tp_q_head_num,
            num_kv_heads=layer.tp_k_head_num, page_size=self.page_size, kv_dtype=self.kv_dtype,
            sliding_window=layer.sliding_window_size if (layer.sliding_window_size or -1) > 0 else None,
            logit_cap=layer.logit_cap or None, is_cross=layer.is_cross_attention)
        if reason is not None:  # the model-level check passed, so this layer differs from the model's config
            raise ValueError(f"hpc-integration: attention layer {layer.layer_id} cannot decode on hpc ({reason}); "
                             "choose another --attention-backend")
        self._layer_reasons[layer.layer_id] = reason
        return reason

    def __getattr__(self, name):
        # Anything SGLang asks of a backend that this adapter does not define (speculative hooks,
        # capability flags) is the extend backend's answer.
        if name in ("fallback", "__setstate__"):
            raise AttributeError(name)
        return getattr(self.fallback, name)


def _attn_tp_size() -> int:
    try:
        from sglang.srt.runtime_context import get_parallel

        return int(get_parallel().attn_tp_size)
    except Exception:  # older releases
        try:
            from sglang.srt.layers.dp_attention import get_attention_tp_size

            return int(get_attention_tp_size())
        except Exception:
            return 1


def create_backend(runner):
    """Factory registered as "hpc" (`--attention-backend hpc`)."""
    fallback_name, fallback = _framework_backend(runner)
    reason = _runner_reason(runner)
    if reason is not None:
        support.say(f"--attention-backend hpc: decode runs on SGLang's {fallback_name} backend: {reason}")
    else:
        where = "hpc_attention kernels" if ops.on_kernels(torch.empty(0, device=runner.device)) else \
            "hpc_attention's reference (no SM90 GPU)"
        support.say(f"--attention-backend hpc: decode on {where}; extend on SGLang's {fallback_name} backend "
                    "(hpc-attention has no prefill kernel yet)")
    backend = HpcAttnBackend(runner, fallback, fallback_name, reason)
    if reason is None:
        support.say(f"--attention-backend hpc: {backend.plan_prologue(runner)}")
    return backend


def _runner_reason(runner) -> str | None:
    if getattr(runner, "use_mla_backend", False):
        return "MLA models are not supported"
    dev = support.device_reason(runner.device)
    if dev is not None and not support.cpu_reference_allowed():
        return f"{dev} (set {support.ENV_CPU_REFERENCE}=1 to run the reference instead)"
    cfg = runner.model_config
    tp = _attn_tp_size()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return support.attention_reason(head_dim=head_dim, v_head_dim=getattr(cfg, "v_head_dim", None),
                                    num_qo_heads=cfg.get_num_attention_heads(tp),
                                    num_kv_heads=cfg.get_num_kv_heads(tp), page_size=int(runner.page_size),
                                    kv_dtype=runner.kv_cache_dtype,
                                    sliding_window=getattr(cfg, "sliding_window_size", None))
