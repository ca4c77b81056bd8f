"""Launch of the fused-MoE pipeline (DESIGN.md, "Pipeline"): FP8 input quantisation (FP8 formats),
Gate-Up with SiLU*up, Down with the top-k reduce (the tile form, one kernel, or the expert form, a
GEMM kernel writing per-pair partials and a reduce kernel; heuristics.down_form picks one per window),
on torch's current stream, chained with PDL.

`run_fused_moe` allocates nothing and reads no device value on the host: every grid size comes
from T, top_k, E_local, I and the SM count, so a captured CUDA graph replays with new routing
copied into its topk_ids / topk_weights buffers. The caller (hpc_moe.fused_moe) has checked the
arguments; this module trusts them.
"""

from __future__ import annotations

import torch
from hpc_common.fp8 import quantize_per_tensor, quantize_per_token, quantize_per_token_group
from hpc_common.launch import get_num_sms, get_pdl, pdl_enabled, stream_ptr

from . import _ext, heuristics
from .heuristics import DOWN_EXPERT, DOWN_TILE, window_tokens

FMT_BF16, FMT_FP8 = 0, 1  # hpc::moe::Format

# A Down CTA keeps 16 FP32 rows of output per pair of its token chunk: 1024 pairs = 64 KB.
MAX_DOWN_CHUNK_PAIRS = 1024
MAX_DOWN_CHUNK_TOKENS = 256
# The Down kernel prefetches its w2 tiles to L2 before its PDL wait (so they stream while Gate-Up
# runs) only when all the w2 bytes the call can touch fit this well in the 60 MB L2; beyond it the
# early prefetches of ~400 resident CTAs evict each other and the weights are read twice.
MAX_PREFETCH_W2_BYTES = 24 << 20


def down_chunk_tokens(top_k: int) -> int:
    """Tokens per Down CTA (gridDim.y = ceil(T / this)) for a batch of at least that many tokens."""
    return max(1, min(MAX_DOWN_CHUNK_TOKENS, MAX_DOWN_CHUNK_PAIRS // top_k))


def _quantize_input(weights, hidden: torch.Tensor, workspace) -> tuple[int, int, int]:
    """Quantise hidden into workspace.xq; returns (scale pointer, stride per token, stride per
    128-column block) of the activation scales as the Gate-Up kernel reads them."""
    T, H = hidden.shape
    xq = workspace.xq[:T]
    if weights.quant == "fp8_block":
        xs = workspace.xs[:T]
        quantize_per_token_group(hidden, 128, out=xq, scale_out=xs)
        return xs.data_ptr(), H // 128, 1
    if weights.a1_scale is None:  # fp8_tensor with a dynamic scale: one per token
        xs = workspace.xs.view(-1)[:T].view(T, 1)
        quantize_per_token(hidden, out=xq, scale_out=xs)
        return xs.data_ptr(), 1, 0
    quantize_per_tensor(hidden, weights.a1_scale, out=xq)
    return weights.a1_scale.data_ptr(), 0, 0


def window_down_form(weights, num_pairs: int, out: torch.Tensor, workspace, down: str | None = None) -> str:
    """The Down form of one window of `num_pairs` pairs: `down` when given ("tile" / "expert", tests and
    probes), else heuristics.down_form. The expert form also needs 16-byte aligned output rows (its
    reduce stores 16 bytes) and a workspace holding the window's partials and index; a forced choice
    that cannot run raises ValueError."""
    fp8 = weights.quant != "bf16"
    I, H = weights.intermediate_size, weights.hidden_size
    if down is None:
        form = heuristics.down_form(num_pairs, weights.num_experts, I, fp8)
        if form == DOWN_EXPERT and out.data_ptr() % 16:
            form = DOWN_TILE
    elif down in (DOWN_TILE, DOWN_EXPERT):
        form = down
        if form == DOWN_EXPERT and not heuristics.expert_down_supported(I, fp8):
            raise ValueError(f"run_fused_moe: down='expert' needs a w2 tile of at most "
                             f"{heuristics.EXPERT_DOWN_MAX_TILE_BYTES} bytes, I = {I} gives "
                             f"{heuristics.w2_tile_bytes(I, fp8)}")
        if form == DOWN_EXPERT and out.data_ptr() % 16:
            raise ValueError("run_fused_moe: down='expert' needs out 16-byte aligned")
    else:
        raise ValueError(f"run_fused_moe: down must be None, 'tile' or 'expert', got {down!r}")
    if form == DOWN_EXPERT:
        y, index = workspace.y, workspace.down_index
        if not _partials_fit(workspace, num_pairs, H):
            raise ValueError(f"run_fused_moe: workspace.y {tuple(y.shape)} cannot hold the partials of "
                             f"{num_pairs} pairs x H = {H} (BF16)")
        if index.dtype != torch.int32 or index.numel() < heuristics.index_words(num_pairs):
            raise ValueError(f"run_fused_moe: workspace.down_index holds {index.numel()} words, the window "
                             f"needs {heuristics.index_words(num_pairs)} (int32)")
    return form


def _partials_fit(workspace, num_pairs: int, H: int) -> bool:
    """workspace.y holds BF16 partial rows [>= num_pairs, H] (the expert form's and the split tile form's)."""
    y = workspace.y
    return y.dim() == 2 and y.shape[0] >= num_pairs and y.shape[1] == H and y.dtype == torch.bfloat16


def window_down_splits(weights, num_tokens: int, top_k: int, out: torch.Tensor, workspace, num_sms: int,
                       splits: int | None = None) -> int:
    """Expert splits of a tile-form Down window (gridDim.z): `splits` when given (tests and probes), else
    heuristics.down_tile_splits. More than one needs the workspace's partial rows for the window's pairs and
    16-byte aligned output (the top-k reduce stores 16 bytes); without them the heuristic's choice falls back
    to 1 and a forced one raises ValueError."""
    H, num_pairs = weights.hidden_size, num_tokens * top_k
    chunks = -(-num_tokens // down_chunk_tokens_for(num_tokens, top_k))
    forced = splits is not None
    if not forced:
        splits = heuristics.down_tile_splits(chunks, H, num_pairs, weights.num_local_experts, num_sms)
    elif not isinstance(splits, int) or not 1 <= splits <= heuristics.MAX_DOWN_TILE_SPLITS:
        raise ValueError(f"run_fused_moe: down_splits must be an int in [1, {heuristics.MAX_DOWN_TILE_SPLITS}], "
                         f"got {splits!r}")
    if splits == 1:
        return 1
    if _partials_fit(workspace, num_pairs, H) and out.data_ptr() % 16 == 0:
        return splits
    if forced:
        raise ValueError(f"run_fused_moe: down_splits={splits} needs workspace.y to hold {num_pairs} x {H} BF16 "
                         f"partials (has {tuple(workspace.y.shape)}) and out 16-byte aligned")
    return 1


def down_chunk_tokens_for(num_tokens: int, top_k: int) -> int:
    """Tokens per tile-form Down CTA of a window of `num_tokens` tokens."""
    return min(num_tokens, down_chunk_tokens(top_k))


def run_fused_moe(weights, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                  shared_output: torch.Tensor | None, out: torch.Tensor, workspace, *, pdl: bool | None = None,
                  unfused: bool = False, down: str | None = None, down_splits: int | None = None) -> torch.Tensor:
    """out[t] = sum_j topk_weights[t, j] * Down_e(silu(Gate_e x_t) * Up_e x_t) (+ shared_output[t]) over
    the pairs whose expert e = topk_ids[t, j] is local. hidden BF16 [T, H] (unit inner stride, rows
    16-byte aligned); topk_ids int32/int64 and topk_weights FP32, both contiguous [T, K]; out BF16
    contiguous [T, H]. `unfused`: the same stages with PDL off (the benchmark's `ours_unfused`).
    `down`: force the Down form of every window ("tile" or "expert"; None: heuristics.down_form);
    `down_splits`: force the expert splits of every tile-form window (None: heuristics.down_tile_splits)."""
    T, H = hidden.shape
    if T == 0:
        return out
    K = topk_ids.shape[1]
    use_pdl = False if unfused else (get_pdl() if pdl is None else bool(pdl))
    ext = _ext.load()
    device = hidden.device
    stream = stream_ptr(device)
    num_sms = get_num_sms(device)
    I, E = weights.intermediate_size, weights.num_local_experts
    fp8 = weights.quant != "bf16"
    fmt = FMT_FP8 if fp8 else FMT_BF16

    if fp8:
        with pdl_enabled(use_pdl):
            xs_ptr, xs_st, xs_skb = _quantize_input(weights, hidden, workspace)
        x_ptr, x_row_bytes = workspace.xq.data_ptr(), H
    else:
        xs_ptr, xs_st, xs_skb = 0, 0, 0
        x_ptr, x_row_bytes = hidden.data_ptr(), hidden.stride(0) * hidden.element_size()

    w13s = weights.w13_scale.data_ptr() if fp8 else 0
    w2s = weights.w2_scale.data_ptr() if fp8 else 0
    ids64 = topk_ids.dtype == torch.int64
    id_bytes = topk_ids.element_size()
    shared_ptr = shared_output.data_ptr() if shared_output is not None else 0
    shared_stride = shared_output.stride(0) if shared_output is not None else 0
    out_stride = out.stride(0)
    win = window_tokens(K)
    for t0 in range(0, T, win):
        nt = min(win, T - t0)
        pairs = nt * K
        form = window_down_form(weights, pairs, out, workspace, down)
        ids_ptr = topk_ids.data_ptr() + t0 * K * id_bytes
        wts_ptr = topk_weights.data_ptr() + t0 * K * 4
        shared_t0 = shared_ptr + (t0 * shared_stride * 2 if shared_ptr else 0)
        out_t0 = out.data_ptr() + t0 * out_stride * 2
        index_ptr = workspace.down_index.data_ptr() if form == DOWN_EXPERT else 0
        # topk_ids may be read before the PDL wait when the kernel ahead is ours (the quantiser or the
        # previous window's last kernel), which passed its own wait, so the ids' producer has finished.
        ext.gate_up(fmt, x_ptr + t0 * x_row_bytes, x_row_bytes, xs_ptr + 4 * t0 * xs_st, xs_st, xs_skb,
                    weights.w13.data_ptr(), w13s, ids_ptr, ids64, workspace.inter.data_ptr(), nt, K, H, I,
                    weights.expert_start, E, fp8 or t0 > 0, index_ptr, num_sms, use_pdl, stream)
        if form == DOWN_EXPERT:
            ext.down_experts(fmt, workspace.inter.data_ptr(), weights.w2.data_ptr(), w2s, index_ptr,
                             workspace.y.data_ptr(), pairs, H, I, E, heuristics.expert_down_tiles_per_warp(I, fp8),
                             heuristics.EXPERT_DOWN_SLAB_PAIRS, heuristics.expert_down_task_bound(pairs, E),
                             use_pdl, stream)
            ext.topk_reduce(workspace.y.data_ptr(), ids_ptr, ids64, wts_ptr, shared_t0, shared_stride, out_t0,
                            out_stride, nt, K, H, weights.expert_start, E, use_pdl, stream)
        else:
            prefetch = min(E, pairs) * H * I * (1 if fp8 else 2) <= MAX_PREFETCH_W2_BYTES
            splits = window_down_splits(weights, nt, K, out, workspace, num_sms, down_splits)
            y_ptr = workspace.y.data_ptr() if splits > 1 else 0
            ext.down(fmt, workspace.inter.data_ptr(), weights.w2.data_ptr(), w2s, ids_ptr, ids64, wts_ptr,
                     shared_t0, shared_stride, out_t0, out_stride, nt, K, H, I, weights.expert_start, E,
                     down_chunk_tokens_for(nt, K), prefetch, splits, y_ptr, use_pdl, stream)
            if splits > 1:  # the split CTAs wrote per-pair partial rows: sum them as after the expert form
                ext.topk_reduce(y_ptr, ids_ptr, ids64, wts_ptr, shared_t0, shared_stride, out_t0, out_stride, nt, K,
                                H, weights.expert_start, E, use_pdl, stream)
    return out
