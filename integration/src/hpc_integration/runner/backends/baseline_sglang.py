"""SGLang's own decode kernels for the baseline runner, over the runner's paged cache.

Attention: SGLang's Triton decode attention (`decode_attention_fwd`, what its `triton` attention
backend runs for a decode batch; module `sglang.kernels.ops.attention.decode_attention` in 0.5.17,
`sglang.srt.layers.attention.triton_ops.decode_attention` before). It reads a token-indexed KV
buffer [slots, Hkv, D] through `kv_indptr` / `kv_indices` (each request's token slots, packed). The
runner's cache [pages, page_size, Hkv, D] is that buffer viewed without copy (slot = page *
page_size + offset, the page-size-1 view SGLang's own pool has), and `token_kv_indices` builds the
index arrays on the device from the page table and the lengths once per step, in the step's graph,
so every replay attends over the current lengths. The split count per request comes from SGLang's
`get_num_kv_splits_triton` (its heuristic from the lengths and the SM count, as its backend calls it
at every decode step), at most `MAX_KV_SPLITS` (its default `triton_attention_num_kv_splits`).
Split-KV scratch (`attn_logits`, `attn_lse`) is allocated once, for `max_batch`.

FP8 E4M3 KV: SGLang 0.5.17's triton backend reads the FP8 buffer as it is (`MHATokenToKVPool`
stores e4m3(x / k_scale) and hands the attention the FP8 view); the kernel casts Q and the softmax
weights to FP8 for its two dot products, folds k_scale into sm_scale and multiplies the output by
v_scale. The runner's FP8 cache has the same meaning (stored = e4m3(value / scale)), so the kernel
gets it as SGLang would, with k_scale = v_scale = the cache's scale.

Prologue: what SGLang's Qwen3-MoE attention runs on CUDA (`apply_qk_norm` then `rotary_emb`):
its in-place QK-Norm JIT kernel (`fused_inplace_qknorm`) and its in-place RoPE JIT kernel
(`apply_rope_inplace`, neox) where they build, else sgl_kernel's `rmsnorm` and `rotary_embedding`,
else torch. The KV write stays torch indexing (SGLang's `set_kv_buffer` for an FP8 pool is the same
torch divide, cast and index store; with a BF16 pool SGLang fuses the write into its RoPE kernel,
which this baseline does not).
"""

from __future__ import annotations

import inspect

import torch

MAX_KV_SPLITS = 8  # SGLang's ServerArgs.triton_attention_num_kv_splits default (CUDA)
_DECODE_MODULES = ("sglang.kernels.ops.attention.decode_attention",
                   "sglang.srt.layers.attention.triton_ops.decode_attention")
_SPLITS_MODULES = ("sglang.kernels.ops.attention.metadata",
                   "sglang.srt.layers.attention.triton_ops.metadata")


def token_kv_indices(page_table: torch.Tensor, kv_lens: torch.Tensor, page_size: int,
                     kv_indptr: torch.Tensor, kv_indices: torch.Tensor) -> None:
    """SGLang's packed token indexing of paged requests, in place, with no host read (so it can be
    recorded in a CUDA graph): kv_indptr [B + 1] = 0, cumsum(kv_lens); kv_indices[kv_indptr[b] + t]
    = page_table[b, t // page_size] * page_size + t % page_size for t < kv_lens[b]. kv_indices needs
    B * page_table.shape[1] * page_size + 1 entries: its last entry takes the writes of the
    positions past each length (and whatever follows the packed slots is never read)."""
    B, P = page_table.shape
    L = P * page_size
    if kv_indptr.shape[0] < B + 1 or kv_indices.shape[0] < B * L + 1:
        raise ValueError(f"token_kv_indices: kv_indptr needs >= {B + 1} entries and kv_indices >= {B * L + 1}, "
                         f"got {kv_indptr.shape[0]} and {kv_indices.shape[0]}")
    kv_indptr[:1].zero_()  # (kv_indptr[0] = 0 copies a host scalar: refused inside graph capture)
    kv_indptr[1:B + 1] = torch.cumsum(kv_lens, 0)
    t = torch.arange(L, device=page_table.device)
    slots = (page_table.to(kv_indices.dtype)[:, :, None] * page_size
             + torch.arange(page_size, device=page_table.device, dtype=kv_indices.dtype)).view(B, L)
    dest = kv_indptr[:B, None].long() + t[None, :]
    dest = torch.where(t[None, :] < kv_lens[:, None].long(), dest, B * L)  # past the length: the dump entry
    kv_indices.scatter_(0, dest.view(-1), slots.view(-1))


def sglang_decode_ops(device: torch.device):
    """(decode_attention_fwd, get_num_kv_splits_triton or None) of the importable SGLang. Raises
    ImportError off CUDA (Triton kernels), without SGLang, or where its decode_attention_fwd lacks
    the 0.5.x arguments this wrapper passes (attn_lse, k_scale, v_scale)."""
    import importlib

    if device.type != "cuda":
        raise ImportError(f"SGLang's Triton decode attention needs a CUDA device, not {device}")

    fwd, errors = None, []
    for mod in _DECODE_MODULES:
        try:
            fwd = importlib.import_module(mod).decode_attention_fwd
            break
        except (ImportError, AttributeError) as e:
            errors.append(f"{mod}: {type(e).__name__}: {e}")
    if fwd is None:
        raise ImportError("SGLang's Triton decode attention is not importable (" + "; ".join(errors) + ")")
    params = inspect.signature(fwd).parameters
    missing = [p for p in ("attn_lse", "k_scale", "v_scale") if p not in params]
    if missing:
        raise ImportError(f"SGLang's decode_attention_fwd has no {missing} (an SGLang older than 0.5)")
    splits = None
    for mod in _SPLITS_MODULES:
        try:
            splits = importlib.import_module(mod).get_num_kv_splits_triton
            break
        except (ImportError, AttributeError):
            pass
    return fwd, splits


class SGLangTritonDecode:
    """SGLang's Triton decode attention over a PagedKVCache: `plan` once per step (indices, splits),
    then `__call__` per layer. Buffers are made once for `max_batch` requests of `pages` pages."""

    def __init__(self, max_batch: int, pages: int, page_size: int, num_qo_heads: int, num_kv_heads: int,
                 head_dim: int, device: torch.device, max_kv_splits: int = MAX_KV_SPLITS):
        device = torch.device(device)
        self.fwd, self.splits_kernel = sglang_decode_ops(device)
        cuda = device.type == "cuda"  # (the CPU only with a stand-in for the kernels, in tests)
        self.kw = {}
        if "use_pdl" in inspect.signature(self.fwd).parameters:  # SGLang: PDL on SM90+ (is_arch_support_pdl)
            self.kw["use_pdl"] = cuda and torch.cuda.get_device_capability(device)[0] >= 9
        self.page_size, self.Hq, self.Hkv, self.D = page_size, num_qo_heads, num_kv_heads, head_dim
        self.max_kv_splits = max_kv_splits
        self.sm_count = torch.cuda.get_device_properties(device).multi_processor_count if cuda else 0
        f32 = dict(dtype=torch.float32, device=device)
        self.attn_logits = torch.zeros(max_batch, num_qo_heads, max_kv_splits, head_dim, **f32)
        self.attn_lse = torch.zeros(max_batch, num_qo_heads, max_kv_splits, **f32)
        self.num_kv_splits = torch.full((max_batch,), max_kv_splits, dtype=torch.int32, device=device)
        self.kv_indptr = torch.zeros(max_batch + 1, dtype=torch.int32, device=device)
        self.kv_indices = torch.zeros(max_batch * pages * page_size + 1, dtype=torch.int64, device=device)
        self.batch = 0

    def plan(self, page_table: torch.Tensor, kv_lens: torch.Tensor) -> None:
        """The step's index arrays and split counts from the device lengths (recordable in a graph)."""
        B = page_table.shape[0]
        token_kv_indices(page_table, kv_lens, self.page_size, self.kv_indptr, self.kv_indices)
        if self.splits_kernel is not None:  # as TritonAttnBackend.get_num_kv_splits (one token per request)
            self.splits_kernel[(1,)](self.num_kv_splits, kv_lens, B, 1, self.Hq, self.Hkv, self.max_kv_splits,
                                     self.sm_count, MAX_NUM_SEQ=max(256, 1 << (B - 1).bit_length()))
        self.batch = B

    def __call__(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, sm_scale: float,
                 kv_scale: float) -> torch.Tensor:
        """q [B, Hq, D] (B of the last plan) over one layer's cache [pages, page_size, Hkv, D] -> [B, Hq, D]."""
        B = q.shape[0]
        if B != self.batch:
            raise ValueError(f"SGLangTritonDecode: q has {B} requests, the step was planned for {self.batch}")
        q = q.contiguous()
        o = torch.empty_like(q)
        self.fwd(q, k_cache.view(-1, self.Hkv, self.D), v_cache.view(-1, self.Hkv, self.D), o,
                 self.kv_indptr[:B + 1], self.kv_indices, self.attn_logits[:B], self.attn_lse[:B],
                 self.num_kv_splits[:B], self.max_kv_splits, sm_scale, kv_scale, kv_scale, **self.kw)
        return o


# ---- the prologue ---------------------------------------------------------------------------------

def _sglang_jit_prologue(head_dim: int, dtype: torch.dtype):
    from sglang.kernels.ops.attention.rope import apply_rope_inplace
    from sglang.kernels.ops.layernorm.norm import can_use_fused_inplace_qknorm, fused_inplace_qknorm

    if not can_use_fused_inplace_qknorm(head_dim, dtype):  # it builds the JIT module or says no
        raise ImportError(f"SGLang's JIT QK-Norm cannot serve head_dim {head_dim}, {dtype}")

    def run(q, k, q_w, k_w, eps, positions, cos_sin):
        fused_inplace_qknorm(q, k, q_w, k_w, eps, head_dim=head_dim)
        apply_rope_inplace(q, k, cos_sin, positions, is_neox=True)
        return q, k

    return run


def _sgl_kernel_prologue(head_dim: int, dtype: torch.dtype):
    import sgl_kernel

    def run(q, k, q_w, k_w, eps, positions, cos_sin):
        T = q.shape[0]
        qn = sgl_kernel.rmsnorm(q.reshape(-1, head_dim), q_w, eps).view(T, -1, head_dim)
        kn = sgl_kernel.rmsnorm(k.reshape(-1, head_dim), k_w, eps).view(T, -1, head_dim)
        sgl_kernel.rotary_embedding(positions.long(), qn, kn, head_dim, cos_sin, True)
        return qn, kn

    return run


PROLOGUES = {"sglang_jit_qknorm_rope": _sglang_jit_prologue, "sgl_kernel_rmsnorm_rope": _sgl_kernel_prologue}


def pick_prologue(device: torch.device, head_dim: int, dtype: torch.dtype, check) -> tuple[str, object, str]:
    """(name, run or None, note) of the first of PROLOGUES that imports on `device` and whose output
    `check(run)` accepts (it compares against the torch prologue); (\"torch\", None, why) otherwise."""
    if device.type != "cuda":
        return "torch", None, ""
    notes = []
    for name, make in PROLOGUES.items():
        try:
            run = make(head_dim, dtype)
            bad = check(run)
        except Exception:  # noqa: BLE001 - not importable / not buildable here: the next one
            notes.append(f"{name}_unavailable")
            continue
        if bad:
            notes.append(f"{name}_mismatch")
            continue
        return name, run, "+".join(notes)
    return "torch", None, "+".join(notes)
