"""The fused attention prologue: one kernel between the QKV projection and the attention.

    q, q_scale = qk_norm_rope_store(qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping,
                                    num_qo_heads=Hq, num_kv_heads=Hkv, q_norm_weight=wq, k_norm_weight=wk,
                                    eps=1e-5, q_out_dtype=torch.float8_e4m3fn, k_scale=ks, v_scale=vs)
    out = decode(q, k_cache, v_cache, page_table, kv_lens, plan, q_scale=q_scale, k_scale=ks, v_scale=vs,
                 new_tokens=1)

RMSNorm on q and k (QK-Norm, optional), RoPE (neox or GPT-J, partial rotary dims), Q out as BF16 or
FP8 E4M3 with per-(token, head) scales in the layout `decode(q_scale=...)` reads, and K / V written at
their slots of the paged caches (BF16 or FP8 E4M3 with per-tensor scales). The kernel is launched with
PDL (hpc_common.set_pdl): it waits for the projection before its first read and lets the next kernel
start at once, so a `decode(..., new_tokens=1)` right after it overlaps its start-up with it.
"""

from __future__ import annotations

import math

import torch
from hpc_common import get_pdl
from hpc_common.checks import check_tensor
from hpc_common.launch import require_hopper, stream_ptr

from . import _ext, heuristics
from .decode import _check_heads

_FP8 = torch.float8_e4m3fn
_INDEX = (torch.int32, torch.int64)
ROPE_STYLES = ("neox", "gptj")


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _ptr(t: torch.Tensor | None) -> int:
    return t.data_ptr() if t is not None else 0


@torch.library.custom_op("hpc_attention::qk_norm_rope_store",
                         mutates_args=("out_q", "out_q_scale", "k_cache", "v_cache"))
def prologue_op(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                q_norm_weight: torch.Tensor | None, k_norm_weight: torch.Tensor | None, slot_mapping: torch.Tensor,
                out_q: torch.Tensor, out_q_scale: torch.Tensor | None, k_cache: torch.Tensor, v_cache: torch.Tensor,
                k_scale_t: torch.Tensor | None, v_scale_t: torch.Tensor | None, k_scale: float, v_scale: float,
                num_qo_heads: int, num_kv_heads: int, rotary_dim: int, neox: bool, eps: float) -> None:
    ext = _ext.load()
    p = ext.PrologueParams()
    p.qkv, p.qkv_stride_t = qkv.data_ptr(), qkv.stride(0)
    p.positions, p.positions_i64 = positions.data_ptr(), int(positions.dtype == torch.int64)
    p.cos_sin, p.cos_sin_stride = cos_sin_cache.data_ptr(), cos_sin_cache.stride(0)
    p.cos_sin_f32 = int(cos_sin_cache.dtype == torch.float32)
    p.max_pos = cos_sin_cache.shape[0]
    row_bytes = cos_sin_cache.stride(0) * cos_sin_cache.element_size()
    p.cos_sin_vec = int(rotary_dim % 16 == 0 and cos_sin_cache.data_ptr() % 16 == 0 and row_bytes % 16 == 0)
    p.q_norm_weight, p.k_norm_weight = _ptr(q_norm_weight), _ptr(k_norm_weight)  # 0: no RMSNorm
    w = q_norm_weight if q_norm_weight is not None else k_norm_weight
    p.norm_f32 = int(w is not None and w.dtype == torch.float32)
    p.slot_mapping, p.slots_i64 = slot_mapping.data_ptr(), int(slot_mapping.dtype == torch.int64)
    p.q_out, (p.q_stride_t, p.q_stride_h) = out_q.data_ptr(), out_q.stride()[:2]
    p.q_scale = _ptr(out_q_scale)
    if out_q_scale is not None:
        p.q_scale_stride_t, p.q_scale_stride_h = out_q_scale.stride()
    p.k_cache, p.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    p.k_stride_page, p.k_stride_tok, p.k_stride_head = k_cache.stride()[:3]
    p.v_stride_page, p.v_stride_tok, p.v_stride_head = v_cache.stride()[:3]
    p.page_size = k_cache.shape[1]
    p.num_slots = k_cache.shape[0] * k_cache.shape[1]
    p.k_scale_ptr, p.v_scale_ptr = _ptr(k_scale_t), _ptr(v_scale_t)  # 0: the floats
    p.k_scale, p.v_scale = k_scale, v_scale
    p.num_tokens = qkv.shape[0]
    p.num_qo_heads, p.num_kv_heads = num_qo_heads, num_kv_heads
    p.rotary_dim, p.neox, p.eps = rotary_dim, int(neox), eps
    ext.qk_norm_rope_store(p, fp8_kv=k_cache.dtype == _FP8, fp8_q=out_q.dtype == _FP8, pdl=get_pdl(),
                           stream=stream_ptr(qkv.device))


@prologue_op.register_fake
def _(qkv, positions, cos_sin_cache, q_norm_weight, k_norm_weight, slot_mapping, out_q, out_q_scale, k_cache,
      v_cache, k_scale_t, v_scale_t, k_scale, v_scale, num_qo_heads, num_kv_heads, rotary_dim, neox, eps):
    return None


def _kv_scale(x, name: str, op: str, fp8: bool):
    """(tensor or None, float) of a per-tensor KV scale; FP8 caches need one, BF16 caches take none."""
    if not fp8:
        if x is not None:
            raise ValueError(f"{op}: {name} is only for FP8 caches (the caches are bfloat16)")
        return None, 1.0
    if x is None:
        raise ValueError(f"{op}: FP8 caches need {name} (the per-tensor scale: stored = value / {name})")
    if isinstance(x, torch.Tensor):
        check_tensor(x, name, op, dtype=torch.float32)
        if x.numel() != 1:
            raise ValueError(f"{op}: {name} must hold one value (per-tensor scale), got shape {list(x.shape)}")
        return x, 1.0
    v = float(x)
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"{op}: {name} must be a finite positive scale, got {x!r}")
    return None, v


def qk_norm_rope_store(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor,
                       k_cache: torch.Tensor, v_cache: torch.Tensor, slot_mapping: torch.Tensor, *,
                       num_qo_heads: int, num_kv_heads: int, q_norm_weight: torch.Tensor | None = None,
                       k_norm_weight: torch.Tensor | None = None, eps: float = 1e-6, rope_style: str = "neox",
                       rotary_dim: int | None = None, q_out_dtype: torch.dtype = torch.bfloat16, k_scale=None,
                       v_scale=None, out_q: torch.Tensor | None = None, out_q_scale: torch.Tensor | None = None,
                       validate: bool | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """QK-Norm, RoPE, Q out and the paged KV write after the QKV projection, in one kernel.

    qkv: [T, (Hq + 2 Hkv) * 128] BF16, each row Hq query heads, then Hkv key heads, then Hkv value
    heads (unit stride in the last dim; T may be 0). positions: [T] int32 or int64, each in
    [0, max_pos). cos_sin_cache: [max_pos, rotary_dim] float32 or BF16, cos of the rotary_dim / 2
    angles then their sin (the vLLM / SGLang layout). k_cache, v_cache: [num_pages, page_size, Hkv, 128]
    (NHD, the layout `decode` reads), both BF16 or both FP8 E4M3. slot_mapping: [T] int32 or int64, the
    slot page * page_size + offset that token t's K and V go to; a negative slot writes nothing
    (padding tokens; their Q is still written). num_qo_heads / num_kv_heads: Hq, Hkv (GQA group 1..16).

    q_norm_weight / k_norm_weight: [128] float32 or BF16 (the same dtype) or None: RMSNorm of each head,
    x / sqrt(mean(x^2) + eps) * w, before RoPE; eps > 0. rope_style: "neox" (pairs i, i + rotary_dim / 2)
    or "gptj" (pairs 2j, 2j + 1) over the first rotary_dim values (even, 2..128; default
    cos_sin_cache.shape[1]). q_out_dtype: torch.bfloat16, or torch.float8_e4m3fn with one float32 scale per
    (token, head), amax / 448 (q = codes * q_scale). k_scale / v_scale: for FP8 caches (required there),
    the per-tensor scales, floats or one-element float32 CUDA tensors; stored = e4m3(value * (1 / scale)),
    RNE, saturating. out_q [T, Hq, 128] (q_out_dtype) and out_q_scale [T, Hq] float32: outputs to write
    into (allocated when None). Arithmetic is float32, bitwise deterministic.

    With PDL on (hpc_common.set_pdl) the kernel waits for the previous kernel before it reads anything
    (qkv, ids, scale tensors) and lets the next kernel launch at once: a following
    `decode(..., new_tokens=1)` reads its older KV while this kernel runs (the prologue writes only the
    newest token's K / V, and q).

    Returns (q [T, Hq, 128], q_scale [T, Hq] float32 or None for BF16 Q): pass them to
    `decode(q, ..., q_scale=q_scale)` unchanged. validate (default: when not capturing a CUDA graph)
    checks on the host, synchronising, that every position is in [0, max_pos) and every non-negative
    slot is below num_pages * page_size and appears once; the kernel itself clamps positions and skips
    out-of-range slots, so it never faults. Pass validate=False in an eager serving loop to avoid
    the host synchronisation. Registered as the custom op hpc_attention::qk_norm_rope_store (outputs and
    caches mutated in place), so torch.compile and CUDA graphs capture it.
    """
    op = "qk_norm_rope_store"
    check_tensor(qkv, "qkv", op, dtype=torch.bfloat16, ndim=2, last_dim_contiguous=True)
    check_tensor(positions, "positions", op, dtype=_INDEX, ndim=1, contiguous=True)
    check_tensor(cos_sin_cache, "cos_sin_cache", op, dtype=(torch.float32, torch.bfloat16), ndim=2,
                 last_dim_contiguous=True)
    check_tensor(k_cache, "k_cache", op, dtype=(torch.bfloat16, _FP8), ndim=4, last_dim_contiguous=True)
    check_tensor(v_cache, "v_cache", op, dtype=k_cache.dtype, ndim=4, last_dim_contiguous=True)
    check_tensor(slot_mapping, "slot_mapping", op, dtype=_INDEX, ndim=1, contiguous=True)
    for name, x in (("num_qo_heads", num_qo_heads), ("num_kv_heads", num_kv_heads)):
        if isinstance(x, bool) or not isinstance(x, int) or x < 1:
            raise ValueError(f"{op}: {name} must be an int >= 1, got {x!r}")
    Hq, Hkv, D = num_qo_heads, num_kv_heads, heuristics.HEAD_DIM
    _check_heads(Hq, Hkv, op)
    T = qkv.shape[0]
    if qkv.shape[1] != (Hq + 2 * Hkv) * D:
        raise ValueError(f"{op}: qkv must have (num_qo_heads + 2 num_kv_heads) * {D} = {(Hq + 2 * Hkv) * D} "
                         f"columns for {Hq}/{Hkv} heads of dim {D}, got {qkv.shape[1]}")
    check_tensor(positions, "positions", op, shape=(T,))
    check_tensor(slot_mapping, "slot_mapping", op, shape=(T,))
    num_pages, page_size, Hkv_c, Dk = k_cache.shape
    if Dk != D:
        raise ValueError(f"{op}: k_cache head dim must be {D}, got {Dk}")
    if Hkv_c != Hkv:
        raise ValueError(f"{op}: k_cache has {Hkv_c} KV heads (shape[2]), num_kv_heads is {Hkv}")
    if v_cache.shape != k_cache.shape:
        raise ValueError(f"{op}: v_cache shape {list(v_cache.shape)} != k_cache shape {list(k_cache.shape)}")
    if num_pages < 1 or page_size < 1:
        raise ValueError(f"{op}: k_cache must hold at least one page of at least one token, got {list(k_cache.shape)}")
    if rope_style not in ROPE_STYLES:
        raise ValueError(f"{op}: rope_style must be one of {ROPE_STYLES}, got {rope_style!r}")
    max_pos, width = cos_sin_cache.shape
    if rotary_dim is None:
        rotary_dim = width
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, int) or rotary_dim < 2 or rotary_dim > D \
            or rotary_dim % 2:
        raise ValueError(f"{op}: rotary_dim must be an even int in [2, {D}], got {rotary_dim!r}")
    if width != rotary_dim:
        raise ValueError(f"{op}: cos_sin_cache must have rotary_dim = {rotary_dim} columns (cos half, sin half), "
                         f"got shape {list(cos_sin_cache.shape)}")
    if max_pos < 1:
        raise ValueError(f"{op}: cos_sin_cache must hold at least one position, got shape {list(cos_sin_cache.shape)}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"{op}: eps must be a finite float > 0, got {eps!r}")
    norm_dtype = None
    for name, w in (("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        if w is None:
            continue
        check_tensor(w, name, op, dtype=(torch.float32, torch.bfloat16), shape=(D,), contiguous=True)
        if norm_dtype is not None and w.dtype != norm_dtype:
            raise TypeError(f"{op}: q_norm_weight and k_norm_weight must have the same dtype, got {norm_dtype} "
                            f"and {w.dtype}")
        norm_dtype = w.dtype
    if q_out_dtype not in (torch.bfloat16, _FP8):
        raise ValueError(f"{op}: q_out_dtype must be torch.bfloat16 or torch.float8_e4m3fn, got {q_out_dtype}")
    fp8_q = q_out_dtype == _FP8
    fp8_kv = k_cache.dtype == _FP8
    k_t, k_f = _kv_scale(k_scale, "k_scale", op, fp8_kv)
    v_t, v_f = _kv_scale(v_scale, "v_scale", op, fp8_kv)
    if out_q is not None:
        check_tensor(out_q, "out_q", op, dtype=q_out_dtype, shape=(T, Hq, D), last_dim_contiguous=True)
        if out_q.stride(0) % 8 or out_q.stride(1) % 8:
            raise ValueError(f"{op}: out_q strides must be multiples of 8 elements, got {out_q.stride()}")
    if fp8_q:
        if out_q_scale is not None:
            check_tensor(out_q_scale, "out_q_scale", op, dtype=torch.float32, shape=(T, Hq))
    elif out_q_scale is not None:
        raise ValueError(f"{op}: out_q_scale is only for FP8 Q (q_out_dtype is bfloat16)")
    if qkv.stride(0) % 8:
        raise ValueError(f"{op}: qkv's row stride must be a multiple of 8 elements, got {qkv.stride(0)}")
    ke = k_cache.element_size()
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if any((s * ke) % 16 for s in t.stride()[:3]):
            raise ValueError(f"{op}: {name} strides must be multiples of 16 bytes, got {t.stride()}")
    # Under torch.compile the tensors are fake (no data, no address): the host validation, the capability
    # query and the pointer checks run in eager calls only.
    eager = not torch.compiler.is_compiling()
    if validate is None:
        validate = eager and not _capturing()
    if validate and eager:
        _validate_ids(positions, slot_mapping, max_pos, num_pages * page_size, op)
    if eager:
        require_hopper(qkv, "qkv", op)
    dev = qkv.device
    if out_q is None:
        out_q = torch.empty(T, Hq, D, dtype=q_out_dtype, device=dev)
    if fp8_q and out_q_scale is None:
        out_q_scale = torch.empty(T, Hq, dtype=torch.float32, device=dev)
    for name, t in (("positions", positions), ("cos_sin_cache", cos_sin_cache), ("k_cache", k_cache),
                    ("v_cache", v_cache), ("slot_mapping", slot_mapping), ("q_norm_weight", q_norm_weight),
                    ("k_norm_weight", k_norm_weight), ("out_q", out_q), ("out_q_scale", out_q_scale),
                    ("k_scale", k_t), ("v_scale", v_t)):
        if t is not None and t.device != dev:
            raise ValueError(f"{op}: {name} must be on {dev} like qkv, got {t.device}")
    for name, t in (("qkv", qkv), ("k_cache", k_cache), ("v_cache", v_cache), ("out_q", out_q),
                    ("q_norm_weight", q_norm_weight), ("k_norm_weight", k_norm_weight)):
        if eager and t is not None and t.data_ptr() % 16:
            raise ValueError(f"{op}: {name} must be 16-byte aligned (data_ptr {t.data_ptr():#x})")
    if T > 0:
        prologue_op(qkv, positions, cos_sin_cache, q_norm_weight, k_norm_weight, slot_mapping, out_q, out_q_scale,
                    k_cache, v_cache, k_t, v_t, k_f, v_f, Hq, Hkv, rotary_dim, rope_style == "neox", float(eps))
    return out_q, (out_q_scale if fp8_q else None)


def _validate_ids(positions: torch.Tensor, slot_mapping: torch.Tensor, max_pos: int, num_slots: int, op: str) -> None:
    pos = positions.cpu()
    bad = ((pos < 0) | (pos >= max_pos)).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"{op}: positions[{i}] = {int(pos[i])} is outside [0, max_pos={max_pos}) "
                         "(cos_sin_cache.shape[0])")
    slots = slot_mapping.cpu().long()
    bad = (slots >= num_slots).nonzero().flatten()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"{op}: slot_mapping[{i}] = {int(slots[i])} is not a slot of the cache "
                         f"(num_pages * page_size = {num_slots}; negative slots are skipped)")
    used = slots[slots >= 0]
    if used.numel() > 1:
        uniq, counts = torch.unique(used, return_counts=True)
        if (counts > 1).any():
            s = int(uniq[counts > 1][0])
            raise ValueError(f"{op}: slot {s} appears more than once in slot_mapping (the written value would "
                             "depend on the order of the writes)")
