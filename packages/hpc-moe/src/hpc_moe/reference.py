"""Pure-torch references of the fused MoE (CPU or GPU, float64 by default).

    out[t] = shared[t] + sum_j w[t, j] * W2[e] @ (silu(W13[e, :I] @ x[t]) * (W13[e, I:] @ x[t])),
    e = topk_ids[t, j] - expert_offset, over the pairs with 0 <= e < E_local

(-1 and other EP ranks' ids contribute nothing). The quantised formats compute the same
formula on dequantised operands, with the activations quantised exactly as the kernels do
(hpc_common.fp8.reference: q = e4m3_rne_satfinite(x * (1 / scale)), scale = amax / 448):

* "bf16": BF16 weights, BF16 activations.
* "fp8_tensor": W = float(q) * s_e (w13_scale [E] or [E, 2] = gate and up scales, w2_scale [E]);
  x quantised with the static per-tensor `a1_scale`, or per token (scale = amax(row) / 448)
  when it is None.
* "fp8_block": W = float(q) * s[e, row // 128, col // 128] (128 x 128 block scales);
  x quantised per token and group of 128 columns.

The intermediate silu(gate) * up is not re-quantised (DESIGN.md): only the input is.
"""

from __future__ import annotations

import torch
from hpc_common.fp8 import reference as fp8_ref

QUANTS = ("bf16", "fp8_tensor", "fp8_block")
BLOCK = 128


def fused_moe_reference(x: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                        topk_weights: torch.Tensor, *, expert_offset: int = 0,
                        shared_output: torch.Tensor | None = None,
                        dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The MoE on unquantised operands (any float dtype; computed in `dtype`). x [T, H],
    w13 [E_local, 2I, H], w2 [E_local, H, I], topk_ids [T, k] global ids, topk_weights [T, k]."""
    T, H = x.shape
    E_local, two_i, H2 = w13.shape
    if H2 != H or two_i % 2 or w2.shape != (E_local, H, two_i // 2):
        raise ValueError(f"fused_moe_reference: inconsistent shapes x{tuple(x.shape)} w13{tuple(w13.shape)} "
                         f"w2{tuple(w2.shape)}")
    inter = two_i // 2
    xf = x.to(dtype)
    out = torch.zeros(T, H, dtype=dtype, device=x.device)
    local = topk_ids.long() - expert_offset
    valid = topk_ids.long() >= 0
    for e in range(E_local):
        tok, slot = ((local == e) & valid).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        h = xf[tok] @ w13[e].to(dtype).T
        act = torch.nn.functional.silu(h[:, :inter]) * h[:, inter:]
        y = act @ w2[e].to(dtype).T
        out.index_add_(0, tok, y * topk_weights[tok, slot].to(dtype)[:, None])
    if shared_output is not None:
        out += shared_output.to(dtype)
    return out


def expand_block_scale(scale: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """[E, ceil(rows / 128), ceil(cols / 128)] block scales -> [E, rows, cols], one per element."""
    s = scale.repeat_interleave(BLOCK, dim=1)[:, :rows]
    return s.repeat_interleave(BLOCK, dim=2)[:, :, :cols]


def quantize_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoints' 128 x 128 block format (Qwen3-FP8 / DeepSeek `weight_scale_inv`) of `w` [E, R, C]:
    (FP8 E4M3 [E, R, C], FP32 scales [E, ceil(R/128), ceil(C/128)]), one scale per block = amax / 448, partial
    blocks zero-padded. Benchmarks and the end-to-end runner make their FP8 block weights with it."""
    E, R, C = w.shape
    rb, cb = -(-R // BLOCK), -(-C // BLOCK)
    wp = torch.zeros(E, rb * BLOCK, cb * BLOCK, device=w.device, dtype=torch.float32)
    wp[:, :R, :C] = w.float()
    blocks = wp.view(E, rb, BLOCK, cb, BLOCK)
    s = (blocks.abs().amax(dim=(2, 4)) / 448).clamp(min=1e-12)
    q = (blocks / s[:, :, None, :, None]).clamp(-448, 448).view(E, rb * BLOCK, cb * BLOCK)[:, :R, :C]
    return q.to(torch.float8_e4m3fn).contiguous(), s.contiguous()


def dequantize_w13(w13: torch.Tensor, w13_scale: torch.Tensor | None, quant: str,
                   dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """w13 [E, 2I, H] as `dtype` values: BF16 as is, FP8 times its per-expert or block scales."""
    w = w13.to(dtype)
    if quant == "bf16":
        return w
    E, two_i, H = w13.shape
    s = w13_scale.to(dtype)
    if quant == "fp8_tensor":
        s = s.reshape(E, -1)  # [E, 1] (one scale) or [E, 2] (gate, up)
        s = s.repeat_interleave(two_i // s.shape[1], dim=1)[:, :, None]
        return w * s
    return w * expand_block_scale(s, two_i, H)


def dequantize_w2(w2: torch.Tensor, w2_scale: torch.Tensor | None, quant: str,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """w2 [E, H, I] as `dtype` values."""
    w = w2.to(dtype)
    if quant == "bf16":
        return w
    E, H, inter = w2.shape
    s = w2_scale.to(dtype)
    if quant == "fp8_tensor":
        return w * s.reshape(E, 1, 1)
    return w * expand_block_scale(s, H, inter)


def quantize_activations(x: torch.Tensor, quant: str, a1_scale: torch.Tensor | float | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The FP8 input of the quantised formats, as hpc_common.fp8's reference computes it:
    (q FP8 [T, H], scale FP32 [T, H/128] broadcast to the kernels' layout: static per tensor,
    dynamic per token, or per token and group of 128)."""
    T, H = x.shape
    if quant == "fp8_block":
        return fp8_ref.quantize_per_token_group_ref(x, BLOCK)
    if quant != "fp8_tensor":
        raise ValueError(f"quantize_activations: quant must be 'fp8_tensor' or 'fp8_block', got {quant!r}")
    if a1_scale is None:
        q, s = fp8_ref.quantize_per_token_ref(x)  # s [T, 1]
    else:
        q, s = fp8_ref.quantize_per_tensor_ref(x, a1_scale)  # s [1]
    groups = -(-H // BLOCK)
    return q, s.reshape(-1, 1).expand(T, groups).contiguous()


def dequantize_activations(x: torch.Tensor, quant: str, a1_scale: torch.Tensor | float | None = None,
                           dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """x as the kernels see it: itself for "bf16", float(q) * scale for the FP8 formats."""
    if quant == "bf16":
        return x.to(dtype)
    q, s = quantize_activations(x, quant, a1_scale)
    return q.to(dtype) * s.to(dtype).repeat_interleave(BLOCK, dim=1)[:, : x.shape[1]]


def fused_moe_reference_quant(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, topk_ids: torch.Tensor,
                              topk_weights: torch.Tensor, *, quant: str = "bf16",
                              w13_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
                              a1_scale: torch.Tensor | float | None = None, expert_offset: int = 0,
                              shared_output: torch.Tensor | None = None,
                              dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The MoE of one format on its checkpoint-layout tensors (see the module docstring):
    hidden BF16 [T, H]; w13 [E_local, 2I, H] and w2 [E_local, H, I] in BF16 ("bf16") or FP8
    E4M3 with their scales; topk_ids [T, k] global ids (-1 = none); topk_weights [T, k].
    Returns [T, H] in `dtype`."""
    if quant not in QUANTS:
        raise ValueError(f"fused_moe_reference_quant: quant must be one of {QUANTS}, got {quant!r}")
    x = dequantize_activations(hidden, quant, a1_scale, dtype)
    return fused_moe_reference(x, dequantize_w13(w13, w13_scale, quant, dtype), dequantize_w2(w2, w2_scale, quant, dtype),
                               topk_ids, topk_weights, expert_offset=expert_offset, shared_output=shared_output,
                               dtype=dtype)


def dequantized_from_prepared(weights, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """(w13 [E_local, 2I, H], w2 [E_local, H, I]) in `dtype`: the values the kernels multiply,
    recovered from a MoEWeights' prepared tensors (hpc_moe.layout's inverses), each FP8 value
    times its prepared scale (exact in float64)."""
    from . import layout

    H, inter, quant = weights.hidden_size, weights.intermediate_size, weights.quant
    w13 = layout.unprepare_w13(weights.w13, quant, inter, H).to(dtype)
    w2 = layout.unprepare_w2(weights.w2, quant, H, inter).to(dtype)
    if quant == "bf16":
        return w13, w2
    # w13_scale [E, I/8, H/128, 2]: per 8-row group and K block, the gate rows' and the up rows' scale.
    s = weights.w13_scale.to(dtype)
    rows = [s[..., i].repeat_interleave(8, dim=1).repeat_interleave(BLOCK, dim=2)[:, :, :H] for i in (0, 1)]
    w13 = w13 * torch.cat(rows, dim=1)
    w2 = w2 * expand_block_scale(weights.w2_scale.to(dtype), H, inter)
    return w13, w2


def reference_from_prepared(weights, hidden: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, *,
                            shared_output: torch.Tensor | None = None,
                            dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The reference of a call `fused_moe(hidden, weights, topk_ids, topk_weights,
    shared_output=...)` computed from the MoEWeights itself (its prepared tensors inverted),
    on the tensors' device, in `dtype`: the GPU tests' reference."""
    w13, w2 = dequantized_from_prepared(weights, dtype)
    x = dequantize_activations(hidden, weights.quant, weights.a1_scale, dtype)
    return fused_moe_reference(x, w13, w2, topk_ids, topk_weights, expert_offset=weights.expert_start,
                               shared_output=shared_output, dtype=dtype)


def cpu_demo() -> str:
    """Small-shape run of every format, for the main job's report on machines without a Hopper GPU."""
    g = torch.Generator().manual_seed(0)
    T, H, inter, E, k = 4, 256, 64, 8, 2
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    w13 = torch.randn(E, 2 * inter, H, generator=g) * 0.05
    w2 = torch.randn(E, H, inter, generator=g) * 0.05
    ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)]).int()
    wts = torch.softmax(torch.randn(T, k, generator=g), -1)
    exact = fused_moe_reference(x, w13, w2, ids, wts)
    lines = [f"fused MoE reference T={T} H={H} I={inter} E={E} top-{k}: |out| = {exact.norm().item():.4f}"]
    s13 = w13.abs().amax(dim=(1, 2)) / 448
    s2 = w2.abs().amax(dim=(1, 2)) / 448
    q13 = fp8_ref.quantize_with_scale(w13, s13[:, None, None])
    q2 = fp8_ref.quantize_with_scale(w2, s2[:, None, None])
    got = fused_moe_reference_quant(x, q13, q2, ids, wts, quant="fp8_tensor", w13_scale=s13, w2_scale=s2)
    cos = torch.nn.functional.cosine_similarity(got.flatten(), exact.flatten(), dim=0).item()
    lines.append(f"fp8_tensor (dynamic per-token activations): cosine {cos:.6f} against the unquantised MoE")
    return "\n".join(lines)
