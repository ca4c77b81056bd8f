"""Pure-torch references of the decode attention (any device; float64 or float32).

- `decode_reference`: one-pass softmax attention per request over the paged cache, on the
  dequantised inputs (FP8 values times their scales), in `dtype`.
- `decode_lowp_baseline`: the same computation done by PyTorch in BF16 (scores and output
  rounded to BF16): the yardstick of the FA3-style tolerance rule in the tests.
- `partial_attention` / `combine_partials`: the split-softmax algebra the kernels use
  (log-sum-exp in the log2 domain), `merge_split_item`: the kernels' fixed merge order (one
  level, or 8 residue groups folded), and `execute_plan`, which runs a plan's tasks with it.
- `rope_cos_sin_cache`, `rms_norm_reference`, `rope_reference`, `prologue_reference` and
  `qk_norm_rope_store_reference`: the fused prologue (prologue.py) in float64: QK-Norm, RoPE, FP8 Q
  with per-(token, head) scales, K and V stored at their slots of the paged caches.
"""

from __future__ import annotations

import math

import torch

from .heuristics import HEAD_DIM, TILE_TOKENS
from .planner import PlanTables

LOG2E = 1.0 / math.log(2.0)


def _gather_kv(cache: torch.Tensor, page_table_row: torch.Tensor, length: int) -> torch.Tensor:
    """[length, Hkv, D] rows of one request from a [pages, page_size, Hkv, D] cache."""
    page_size = cache.shape[1]
    n_pages = (length + page_size - 1) // page_size
    pages = page_table_row[:n_pages].long().to(cache.device)
    return cache[pages].reshape(n_pages * page_size, *cache.shape[2:])[:length]


def _dequant(x: torch.Tensor, scale, dtype: torch.dtype) -> torch.Tensor:
    y = x.to(dtype)
    if isinstance(scale, torch.Tensor):
        return y * scale.to(dtype=dtype, device=y.device)
    return y * scale if scale != 1.0 else y


def decode_reference(q, k_cache, v_cache, page_table, kv_lens, *, sm_scale: float, k_scale=1.0, v_scale=1.0,
                     q_scale=None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """softmax(q k^T * sm_scale) v per request, in `dtype`; [B, Hq, D]. Empty requests -> 0.

    q [B, Hq, D] (FP8 q with q_scale [B, Hq]); caches [pages, page_size, Hkv, D]; page_table
    [B, max_pages]; kv_lens [B] (a tensor or a list).
    """
    B, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    lens = [int(x) for x in (kv_lens.tolist() if isinstance(kv_lens, torch.Tensor) else kv_lens)]
    qf = q.to(dtype)
    if q_scale is not None:
        qf = qf * q_scale.to(dtype=dtype, device=q.device)[..., None]
    out = torch.zeros(B, Hq, D, dtype=dtype, device=q.device)
    for b, L in enumerate(lens):
        if L == 0:
            continue
        k = _dequant(_gather_kv(k_cache, page_table[b], L), k_scale, dtype)  # [L, Hkv, D]
        v = _dequant(_gather_kv(v_cache, page_table[b], L), v_scale, dtype)
        qb = qf[b].view(Hkv, G, D)
        s = torch.einsum("hgd,lhd->hgl", qb, k) * sm_scale
        p = torch.softmax(s, dim=-1)
        out[b] = torch.einsum("hgl,lhd->hgd", p, v).reshape(Hq, D)
    return out


def decode_lowp_baseline(q, k_cache, v_cache, page_table, kv_lens, *, sm_scale: float, k_scale=1.0,
                         v_scale=1.0, q_scale=None) -> torch.Tensor:
    """PyTorch doing the same attention in BF16 (inputs dequantised to BF16, BF16 matmuls,
    softmax in BF16 out). Its error against float64 sets the scale of the kernel's tolerance."""
    B, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    lens = [int(x) for x in (kv_lens.tolist() if isinstance(kv_lens, torch.Tensor) else kv_lens)]
    bf = torch.bfloat16
    qf = q.to(torch.float32)
    if q_scale is not None:
        qf = qf * q_scale.float()[..., None]
    qf = qf.to(bf)
    out = torch.zeros(B, Hq, D, dtype=bf, device=q.device)
    for b, L in enumerate(lens):
        if L == 0:
            continue
        k = _dequant(_gather_kv(k_cache, page_table[b], L), k_scale, torch.float32).to(bf)
        v = _dequant(_gather_kv(v_cache, page_table[b], L), v_scale, torch.float32).to(bf)
        qb = qf[b].view(Hkv, G, D)
        s = torch.matmul(qb, k.permute(1, 2, 0)) * sm_scale  # [Hkv, G, L] in BF16
        p = torch.softmax(s, dim=-1)
        out[b] = torch.matmul(p, v.permute(1, 0, 2)).reshape(Hq, D)
    return out


def partial_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, sm_scale: float):
    """Attention of q [G, D] over keys k, v [L, D] (L >= 1): (o [G, D] normalised over these
    keys, lse [G] = log2 sum exp2(s * log2 e)), the pair the decode kernel writes per part."""
    s2 = (q @ k.transpose(0, 1)) * (sm_scale * LOG2E)  # log2 domain
    m = s2.max(dim=-1, keepdim=True).values
    p = torch.exp2(s2 - m)
    lsum = p.sum(dim=-1, keepdim=True)
    return (p @ v) / lsum, (m + torch.log2(lsum)).squeeze(-1)


def combine_partials(o_parts: torch.Tensor, lse_parts: torch.Tensor) -> torch.Tensor:
    """Exact merge of P partial results: o_parts [P, ..., D], lse_parts [P, ...] (log2)."""
    m = lse_parts.max(dim=0, keepdim=True).values
    w = torch.exp2(lse_parts - m)
    return (w[..., None] * o_parts).sum(0) / w.sum(0)[..., None]


def _running_merge(o_parts: torch.Tensor, lse_parts: torch.Tensor, qs: list[int], batch: int = 8):
    """(m, l, acc) over parts qs, in batches of `batch` (the kernels' running merge)."""
    m = torch.full_like(lse_parts[0], float("-inf"))
    l = torch.zeros_like(lse_parts[0])
    acc = torch.zeros_like(o_parts[0])
    for i in range(0, len(qs), batch):
        idx = qs[i:i + batch]
        mb = torch.maximum(m, lse_parts[idx].max(dim=0).values)
        base = torch.where(torch.isinf(mb) & (mb < 0), torch.zeros_like(mb), mb)
        a = torch.exp2(m - base)
        w = torch.exp2(lse_parts[idx] - base)
        l = l * a + w.sum(0)
        acc = acc * a[..., None] + (w[..., None] * o_parts[idx]).sum(0)
        m = mb
    return m, l, acc


def merge_split_item(o_parts: torch.Tensor, lse_parts: torch.Tensor, warp_parts: int = 24,
                     groups: int = 8, batch: int = 9, group_batch: int = 9, wide_batch: int = 12,
                     narrow_parts: int = 16) -> torch.Tensor:
    """The fixed-order merge of the combine kernel and of the decode kernel's in-kernel merge
    (split_merge.cuh), as algebra: P <= warp_parts parts in one running merge (batches of `batch`, of
    `wide_batch` above `narrow_parts` parts: kNarrowParts, wide_one_level); more in `groups` residue groups (parts g, g + groups, ..., batches of
    `group_batch`), each turned into a partial of its own (o = acc / l, lse = m + log2 l; a group without
    parts is padding) and the group partials merged in group order as one batch. Equals combine_partials."""
    P = o_parts.shape[0]
    if P <= warp_parts:
        _, l, acc = _running_merge(o_parts, lse_parts, list(range(P)), batch=wide_batch if P > narrow_parts else batch)
        return acc / l[..., None]
    group_o, group_lse = [], []
    for g in range(groups):
        m, l, acc = _running_merge(o_parts, lse_parts, list(range(g, P, groups)), batch=group_batch)
        some = l > 0
        l_some = torch.where(some, l, 1)  # l where the group saw a part, 1 (unused) for padding
        group_o.append(torch.where(some[..., None], acc / l_some[..., None], 0))
        group_lse.append(torch.where(some, m + torch.log2(l_some), float("-inf")))
    _, l, acc = _running_merge(torch.stack(group_o), torch.stack(group_lse), list(range(groups)), batch=groups)
    return acc / l[..., None]


def execute_plan(tables: PlanTables, q, k_cache, v_cache, page_table, kv_lens, *, sm_scale: float,
                 dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Run a plan's tasks and combine entries the way the kernels do, in `dtype` on the CPU:
    tasks with slot -1 write final rows, the others write (o, lse) slots merged afterwards."""
    B, Hq, D = q.shape
    Hkv = k_cache.shape[2]
    G = Hq // Hkv
    lens = [int(x) for x in (kv_lens.tolist() if isinstance(kv_lens, torch.Tensor) else kv_lens)]
    out = torch.full((B, Hq, D), float("nan"), dtype=dtype)
    n_slots = max(1, tables.counters[4])
    po = torch.full((n_slots, G, D), float("nan"), dtype=dtype)
    pl = torch.full((n_slots, G), float("nan"), dtype=dtype)
    for item, tile_begin, token_end, slot in tables.tasks:
        b, h = divmod(item, Hkv)
        k = _gather_kv(k_cache, page_table[b], lens[b])[:, h].to(dtype)
        v = _gather_kv(v_cache, page_table[b], lens[b])[:, h].to(dtype)
        lo = tile_begin * TILE_TOKENS
        o, lse = partial_attention(q[b, h * G:(h + 1) * G].to(dtype), k[lo:token_end], v[lo:token_end], sm_scale)
        if slot < 0:
            out[b, h * G:(h + 1) * G] = o
        else:
            po[slot], pl[slot] = o, lse
    for item, slot0, parts, _ in tables.combine:
        b, h = divmod(item, Hkv)
        if parts == 0:
            out[b, h * G:(h + 1) * G] = 0
        else:
            out[b, h * G:(h + 1) * G] = combine_partials(po[slot0:slot0 + parts], pl[slot0:slot0 + parts])
    return out


def cpu_demo() -> str:
    """Small-shape run for the main job's report on machines without an SM90 GPU: the planner's
    Python twin on a skewed batch, and the plan executed on the CPU against the float64
    reference."""
    from .heuristics import MIN_TILES_PER_CTA
    from .planner import plan_tables

    g = torch.Generator().manual_seed(0)
    lens = [1000, 70, 3, 0, 200]
    B, Hkv, G, D, page = len(lens), 2, 4, 128, 64
    pages_per = max(1, max((x + page - 1) // page for x in lens))
    k = torch.randn(B * pages_per, page, Hkv, D, generator=g).to(torch.bfloat16)
    v = torch.randn(B * pages_per, page, Hkv, D, generator=g).to(torch.bfloat16)
    pt = torch.randperm(B * pages_per, generator=g).int().view(B, pages_per)
    q = torch.randn(B, Hkv * G, D, generator=g).to(torch.bfloat16)
    tables = plan_tables(lens, Hkv, num_ctas=6, min_tiles=MIN_TILES_PER_CTA)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    ref = decode_reference(q, k, v, pt, kv_lens, sm_scale=D**-0.5)
    got = execute_plan(tables, q, k, v, pt, kv_lens, sm_scale=D**-0.5)
    err = (got - ref.to(got.dtype)).abs().max().item()
    split = sum(1 for t in tables.tasks if t[3] >= 0)
    return (f"planner twin: lengths {lens}, {Hkv} KV heads, 6 CTAs -> {len(tables.tasks)} tasks "
            f"({split} writing partials); plan executed with split softmax + exact combine vs one-pass "
            f"float64 reference: max |diff| {err:.1e}")


# ---------------------------------------------------------------------------------------------------
# Fused prologue (prologue.py): QK-Norm, RoPE, FP8 Q, paged KV write.
# ---------------------------------------------------------------------------------------------------

def rope_cos_sin_cache(max_pos: int, rotary_dim: int, base: float = 10000.0,
                       dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """[max_pos, rotary_dim]: cos(p * f_j) for j < rotary_dim / 2, then sin(p * f_j), f_j = base^(-2j / rotary_dim)
    (the vLLM / SGLang layout), computed in float64 and stored as `dtype`."""
    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)
    ang = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cat([ang.cos(), ang.sin()], dim=-1).to(dtype)


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, eps: float,
                       dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """x / sqrt(mean(x^2 over the last dim) + eps) * weight, in `dtype` (weight None: x unchanged)."""
    x = x.to(dtype)
    if weight is None:
        return x
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight.to(dtype=dtype, device=x.device)


def rope_reference(x: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, rotary_dim: int,
                   style: str = "neox", dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Rotate the first rotary_dim values of x [T, H, D] at positions [T]: neox pairs (i, i + rotary_dim / 2),
    gptj pairs (2j, 2j + 1), angle entry j of cos_sin_cache[position] (cos half, then sin half)."""
    x = x.to(dtype)
    half = rotary_dim // 2
    cs = cos_sin_cache.to(device=x.device)[positions.long().to(x.device)].to(dtype)  # [T, rotary_dim]
    cos, sin = cs[:, None, :half], cs[:, None, half:rotary_dim]
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if style == "neox":
        a, b = rot[..., :half], rot[..., half:]
        out = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
    elif style == "gptj":
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2)
    else:
        raise ValueError(f"rope_reference: style must be 'neox' or 'gptj', got {style!r}")
    return torch.cat([out, rest], dim=-1)


def prologue_reference(qkv: torch.Tensor, positions: torch.Tensor, cos_sin_cache: torch.Tensor, *,
                       num_qo_heads: int, num_kv_heads: int, q_norm_weight=None, k_norm_weight=None,
                       eps: float = 1e-6, rope_style: str = "neox", rotary_dim: int | None = None,
                       dtype: torch.dtype = torch.float64):
    """(q [T, Hq, D], k [T, Hkv, D], v [T, Hkv, D]) in `dtype` before any rounding to the output dtypes:
    RMSNorm (optional) then RoPE on q and k, v as given."""
    T = qkv.shape[0]
    D = HEAD_DIM
    Hq, Hkv = num_qo_heads, num_kv_heads
    x = qkv.reshape(T, Hq + 2 * Hkv, D)
    rd = cos_sin_cache.shape[1] if rotary_dim is None else rotary_dim
    q = rope_reference(rms_norm_reference(x[:, :Hq], q_norm_weight, eps, dtype), positions, cos_sin_cache, rd,
                       rope_style, dtype)
    k = rope_reference(rms_norm_reference(x[:, Hq:Hq + Hkv], k_norm_weight, eps, dtype), positions, cos_sin_cache,
                       rd, rope_style, dtype)
    return q, k, x[:, Hq + Hkv:].to(dtype)


def _to_cache_dtype(x: torch.Tensor, cache_dtype: torch.dtype, scale) -> torch.Tensor:
    from hpc_common.fp8.reference import quantize_with_scale

    if cache_dtype == torch.float8_e4m3fn:
        s = scale if isinstance(scale, torch.Tensor) else torch.tensor(float(scale))
        return quantize_with_scale(x.to(torch.float32), s.to(device=x.device, dtype=torch.float32).reshape(()))
    return x.to(cache_dtype)


def qk_norm_rope_store_reference(qkv, positions, cos_sin_cache, k_cache, v_cache, slot_mapping, *,
                                 num_qo_heads: int, num_kv_heads: int, q_norm_weight=None, k_norm_weight=None,
                                 eps: float = 1e-6, rope_style: str = "neox", rotary_dim: int | None = None,
                                 q_out_dtype: torch.dtype = torch.bfloat16, k_scale=None, v_scale=None,
                                 dtype: torch.dtype = torch.float64):
    """What `qk_norm_rope_store` computes, from `prologue_reference` in `dtype`: returns (q_out, q_scale) and
    writes K and V into k_cache / v_cache (in place) at slot_mapping (negative: skipped).

    Q out BF16 (q_scale None), or FP8 E4M3 with q_scale [T, Hq] float32 = max(finite amax of the head, 1e-10)
    / 448 and codes e4m3(float32(q) * (1 / q_scale)); FP8 caches take e4m3(float32(k) * (1 / k_scale))
    (hpc_common.fp8.reference's rules applied to the float64 values rounded to float32)."""
    from hpc_common.fp8.reference import quantize_per_token_head_ref

    q, k, v = prologue_reference(qkv, positions, cos_sin_cache, num_qo_heads=num_qo_heads,
                                 num_kv_heads=num_kv_heads, q_norm_weight=q_norm_weight,
                                 k_norm_weight=k_norm_weight, eps=eps, rope_style=rope_style, rotary_dim=rotary_dim,
                                 dtype=dtype)
    if q_out_dtype == torch.float8_e4m3fn:
        q_out, q_scale = quantize_per_token_head_ref(q.to(torch.float32))
        q_scale = q_scale.squeeze(-1)
    else:
        q_out, q_scale = q.to(q_out_dtype), None
    page_size = k_cache.shape[1]
    slots = slot_mapping.long().to(k_cache.device)
    keep = (slots >= 0).nonzero().flatten()
    pages, offs = slots[keep] // page_size, slots[keep] % page_size
    for cache, x, scale in ((k_cache, k, k_scale), (v_cache, v, v_scale)):
        rows = _to_cache_dtype(x[keep.to(x.device)], cache.dtype, scale).to(cache.device)
        if cache.dtype == torch.float8_e4m3fn:  # index_put has no FP8 kernel on every device: move the bytes
            cache, rows = cache.view(torch.uint8), rows.view(torch.uint8)
        cache[pages, offs] = rows
    return q_out, q_scale
