"""The decode step of a Qwen3-MoE-style decoder over a paged KV cache, for one backend.

Per step: embedding -> per layer [RMSNorm, QKV projection, prologue (QK-Norm, RoPE, KV write at the
slots), decode attention, O projection, all-reduce, residual, RMSNorm, router (FP32 logits), top-k
softmax, MoE, all-reduce, residual] -> final RMSNorm -> lm_head -> greedy token. The backend
supplies the prologue, the attention, the router and the MoE; the rest is torch, shared.

Prefill of a prompt is eager and simple: the same layers over all prompt tokens, with the backend's
prologue writing the paged cache and causal attention over that cache in float32 torch
(hpc_integration.ops.paged_prefill_reference, no prefill kernel). The all-reduces are
torch.distributed.all_reduce over ParallelConfig.group, skipped at world size 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .backends import Backend, make_backend
from .config import ModelConfig, ParallelConfig, RunOptions, local_shapes
from .kv_cache import PagedKVCache
from .sharding import rank_moe_checkpoint, shard_layer
from .state import StepState
from .weights import ModelWeights


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm: normalise in float32, cast back to x's dtype, times the weight."""
    xf = x.float()
    return w * (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)).to(x.dtype)


def topk_softmax(logits: torch.Tensor, k: int, renormalise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [T, k] int32, weights [T, k] float32): top-k of softmax(FP32 logits), renormalised."""
    probs = torch.softmax(logits.float(), dim=-1)
    w, ids = torch.topk(probs, k, dim=-1)
    if renormalise:
        w = w / w.sum(-1, keepdim=True)
    return ids.to(torch.int32), w.contiguous()


@dataclass
class Layer:
    input_norm: torch.Tensor
    post_norm: torch.Tensor
    wqkv: torch.Tensor  # [(Hq + 2 Hkv) D, H] this rank's heads
    wo: torch.Tensor    # [H, Hq D]
    backend: object     # the backend's state of this layer (router, MoE weights, QK-Norm weights)


class DecodeRunner:
    """A model (one rank's shard of it) on one device with its paged cache, run by one backend."""

    def __init__(self, cfg: ModelConfig, weights: ModelWeights, backend: str | Backend = "ours",
                 opts: RunOptions | None = None, par: ParallelConfig | None = None,
                 device: torch.device | str | None = None):
        from hpc_attention.reference import rope_cos_sin_cache

        self.cfg, self.opts = cfg, opts or RunOptions()
        self.par = par or ParallelConfig()
        self.loc = local_shapes(cfg, self.par)
        self.backend = make_backend(backend) if isinstance(backend, str) else backend
        self.device = torch.device(device) if device is not None else weights.embed.device
        if self.opts.kv_dtype == "fp32" and self.backend.name != "reference":
            raise ValueError(f"DecodeRunner: kv_dtype 'fp32' is for the reference backend only, not "
                             f"{self.backend.name!r} (use 'bf16' or 'fp8')")
        if self.opts.max_kv_len > cfg.max_position:
            raise ValueError(f"DecodeRunner: max_kv_len {self.opts.max_kv_len} exceeds the model's max_position "
                             f"{cfg.max_position}")
        act = self.act = self.backend.act_dtype
        o = self.opts
        self.cache = PagedKVCache(cfg.num_layers, o.max_batch, o.max_kv_len, o.page_size, self.loc.num_kv_heads,
                                  cfg.head_dim, o.kv_torch_dtype, self.device, scale=o.kv_scale)
        self.cos_sin = rope_cos_sin_cache(cfg.max_position, cfg.head_dim, cfg.rope_theta).to(self.device)
        self.backend.setup(self)
        dev = self.device
        self.embed = weights.embed.to(dev, act)
        self.lm_head = weights.lm_head.to(dev, act)
        self.final_norm = weights.final_norm.to(dev, act)
        self.layers = []
        for lw in weights.layers:
            sh = shard_layer(lw, cfg, self.par)
            ckpt = rank_moe_checkpoint(lw, o.moe_quant, self.par)
            self.layers.append(Layer(input_norm=sh.input_norm.to(dev, act), post_norm=sh.post_norm.to(dev, act),
                                     wqkv=torch.cat([sh.wq, sh.wk, sh.wv]).to(dev, act).contiguous(),
                                     wo=sh.wo.to(dev, act).contiguous(),
                                     backend=self.backend.prepare_layer(self, sh, ckpt)))

    @property
    def impl(self) -> dict:
        return dict(self.backend.impl)

    # ---- the layers --------------------------------------------------------------------------------

    def _all_reduce(self, x: torch.Tensor, ranks: int) -> torch.Tensor:
        """Sum x over the group when `ranks` ranks hold a part of it (the O projection: tp_size; the MoE:
        world). EP-only splits keep every head on every rank, so their O projection is whole already."""
        if ranks > 1:
            torch.distributed.all_reduce(x, group=self.par.group)
        return x

    def _forward(self, ids, positions, slots, attend) -> torch.Tensor:
        """Hidden states after the final norm [T, H]; attend(i, q [T, Hq, D]) -> [T, Hq, D]."""
        cfg, be = self.cfg, self.backend
        eps = cfg.rms_norm_eps
        h = self.embed[ids]
        for i, layer in enumerate(self.layers):
            qkv = rms_norm(h, layer.input_norm, eps) @ layer.wqkv.T
            q = be.prologue(self, i, layer.backend, qkv, positions, slots)
            a = attend(i, q).reshape(h.shape[0], -1).to(self.act)
            h = h + self._all_reduce(a @ layer.wo.T, self.par.tp_size)
            x = rms_norm(h, layer.post_norm, eps)
            ids_k, w_k = topk_softmax(be.router(self, layer.backend, x), cfg.top_k, cfg.norm_topk_prob)
            h = h + self._all_reduce(be.moe(self, layer.backend, x, ids_k, w_k).to(self.act), self.par.world)
        return rms_norm(h, self.final_norm, eps)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return (h @ self.lm_head.T).float()

    # ---- decode ------------------------------------------------------------------------------------

    def new_state(self, batch: int) -> StepState:
        return StepState.new(self.cache, batch, self.cfg.vocab_size)

    def step_body(self, st: StepState) -> None:
        """One decode step on st's buffers (eager, or recorded into a CUDA graph): logits into
        st.logits, then st advanced to the next step."""
        self.backend.begin_decode(self, st)
        h = self._forward(st.ids, st.positions, st.slots, lambda i, q: self.backend.decode(self, i, q, st))
        st.logits.copy_(self._logits(h))
        st.advance(self.cache)

    # ---- prefill and synthetic contexts -------------------------------------------------------------

    def prefill(self, prompts: torch.Tensor) -> tuple[StepState, torch.Tensor]:
        """prompts [B, P] token ids (requests 0..B-1 of the cache) -> (the state of the first decode
        step, logits [B, V] of the last prompt position); the state's ids are their greedy tokens."""
        from ..ops import paged_prefill_reference

        if prompts.dim() != 2 or prompts.shape[1] < 1:
            raise ValueError(f"prefill: prompts must be [B, P] with P >= 1, got {list(prompts.shape)}")
        B, P = prompts.shape
        if P >= self.opts.max_kv_len:
            raise ValueError(f"prefill: prompt length {P} leaves no room under max_kv_len {self.opts.max_kv_len}")
        st = self.new_state(B)
        dev = self.device
        rows = torch.arange(B, device=dev).repeat_interleave(P)
        pos = torch.arange(P, device=dev).repeat(B)
        slots = self.cache.slots(rows, pos)
        s = self.cache.scale

        def attend(i, q):
            kc, vc = self.cache.layer(i)
            return paged_prefill_reference(q, kc, vc, st.page_table, [P] * B, [P] * B,
                                           sm_scale=self.cfg.head_dim ** -0.5, k_scale=s, v_scale=s)

        h = self._forward(prompts.reshape(-1).to(dev), pos.to(torch.int32), slots, attend)
        logits = self._logits(h.view(B, P, -1)[:, -1])
        st.start(self.cache, logits.argmax(-1), P)
        return st, logits

    def synthetic_context(self, batch: int, context: int, seed: int = 0) -> StepState:
        """Requests 0..batch-1 with `context` tokens of random K / V in every layer (N(0, 1) values,
        the same bytes for every backend given the seed), each about to decode a random token."""
        if not 1 <= context < self.opts.max_kv_len:
            raise ValueError(f"synthetic_context: context must be in [1, max_kv_len={self.opts.max_kv_len}), "
                             f"got {context}")
        self.cache.fill_random(batch, context, seed)
        st = self.new_state(batch)
        g = torch.Generator().manual_seed(seed)
        st.start(self.cache, torch.randint(0, self.cfg.vocab_size, (batch,), generator=g), context)
        return st

    def generate(self, st: StepState, steps: int, logits0: torch.Tensor | None = None, graph=None):
        """Run `steps` decode steps from st (eager, or by replaying `graph`, a StepGraph of st).
        Returns (tokens [steps + 1, B]: st's current ids then each step's greedy token, logits
        [steps (+1 with logits0), B, V])."""
        toks, logs = [st.ids.clone()], [] if logits0 is None else [logits0.float()]
        for _ in range(steps):
            if graph is not None:
                graph.replay()
            else:
                self.step_body(st)
            toks.append(st.ids.clone())
            logs.append(st.logits.clone())
        return torch.stack(toks), torch.stack(logs)
