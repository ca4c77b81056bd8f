"""Argument checks of MoEWeights.prepare and fused_moe: each error names the argument, so a bad
input is a Python exception at the call, never silent garbage or a device fault later."""

from __future__ import annotations

import torch
from hpc_common.checks import check_tensor

from .reference import BLOCK, QUANTS

FP8 = torch.float8_e4m3fn
MAX_TOP_K = 16
H_MULTIPLE = 128  # the FP8 K block, and whole 16-row Down tiles
I_MULTIPLE = 64  # whole w13 tiles, and 8-row groups that never straddle a 128-row scale block


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def check_quant(quant: object, op: str) -> str:
    if quant not in QUANTS:
        raise ValueError(f"{op}: quant must be one of {', '.join(map(repr, QUANTS))}, got {quant!r}")
    return quant


def check_weight_tensors(w13: object, w2: object, quant: str, op: str) -> tuple[int, int, int]:
    """w13 [E_local, 2I, H], w2 [E_local, H, I], one device, BF16 or FP8 by `quant`.
    Returns (E_local, H, I)."""
    dtype = torch.bfloat16 if quant == "bf16" else FP8
    check_tensor(w13, "w13", op, dtype=dtype, ndim=3)
    check_tensor(w2, "w2", op, dtype=dtype, ndim=3, device=w13.device)
    E, two_i, H = w13.shape
    if E < 1:
        raise ValueError(f"{op}: w13 must hold at least one expert, got shape {list(w13.shape)}")
    if H % H_MULTIPLE or H == 0:
        raise ValueError(f"{op}: hidden size H = w13.shape[2] = {H} must be a positive multiple of {H_MULTIPLE}")
    if two_i % 2 or (two_i // 2) % I_MULTIPLE or two_i == 0:
        raise ValueError(f"{op}: w13.shape[1] = {two_i} must be 2 * I with I a positive multiple of {I_MULTIPLE}")
    inter = two_i // 2
    check_tensor(w2, "w2", op, shape=(E, H, inter))
    return E, H, inter


def _check_scale_values(s: torch.Tensor, arg: str, op: str) -> None:
    # Load time, so a host read of the scales is affordable: a NaN or negative scale would
    # otherwise surface only as wrong outputs.
    if not bool(torch.isfinite(s).all()) or bool((s < 0).any()):
        raise ValueError(f"{op}: {arg} must hold finite, non-negative scales")


def check_scales(quant: str, w13_scale: object, w2_scale: object, a1_scale: object, E: int, H: int, inter: int,
                 device: torch.device, op: str) -> torch.Tensor | None:
    """The scale tensors of `quant` (DESIGN.md, "Formats"). Returns a1_scale as FP32 [1] on
    `device`, or None."""
    if quant == "bf16":
        for arg, v in (("w13_scale", w13_scale), ("w2_scale", w2_scale), ("a1_scale", a1_scale)):
            if v is not None:
                raise ValueError(f"{op}: {arg} must be None for quant='bf16'")
        return None
    for arg, v in (("w13_scale", w13_scale), ("w2_scale", w2_scale)):
        if v is None:
            raise ValueError(f"{op}: {arg} is required for quant={quant!r}")
        check_tensor(v, arg, op, dtype=torch.float32, device=device)
    if quant == "fp8_tensor":
        if tuple(w13_scale.shape) not in ((E,), (E, 1), (E, 2)):
            raise ValueError(f"{op}: w13_scale for quant='fp8_tensor' must be [E_local] or [E_local, 2] "
                             f"(gate, up) = [{E}] or [{E}, 2], got {list(w13_scale.shape)}")
        if tuple(w2_scale.shape) not in ((E,), (E, 1)):
            raise ValueError(f"{op}: w2_scale for quant='fp8_tensor' must be [E_local] = [{E}], "
                             f"got {list(w2_scale.shape)}")
    else:
        check_tensor(w13_scale, "w13_scale", op, shape=(E, _cdiv(2 * inter, BLOCK), H // BLOCK))
        check_tensor(w2_scale, "w2_scale", op, shape=(E, H // BLOCK, _cdiv(inter, BLOCK)))
    _check_scale_values(w13_scale, "w13_scale", op)
    _check_scale_values(w2_scale, "w2_scale", op)
    if a1_scale is None:
        return None
    if quant == "fp8_block":
        raise ValueError(f"{op}: a1_scale must be None for quant='fp8_block' (activations are quantised "
                         "per token and group of 128)")
    if isinstance(a1_scale, torch.Tensor):
        check_tensor(a1_scale, "a1_scale", op, dtype=torch.float32, device=device)
        if a1_scale.numel() != 1:
            raise ValueError(f"{op}: a1_scale must hold one value, got shape {list(a1_scale.shape)}")
        a1 = a1_scale.reshape(1).clone()
    elif isinstance(a1_scale, (int, float)):
        a1 = torch.tensor([float(a1_scale)], dtype=torch.float32, device=device)
    else:
        raise TypeError(f"{op}: a1_scale must be None, a float or a one-element FP32 tensor, got {type(a1_scale).__name__}")
    if not bool(torch.isfinite(a1).all()) or not bool((a1 > 0).all()):
        raise ValueError(f"{op}: a1_scale must be finite and positive, got {float(a1[0].cpu())}")
    return a1


def check_ep(num_experts: int | None, ep_rank: int, ep_size: int, E_local: int, op: str) -> int:
    """The EP partition: E_local == num_experts / ep_size, 0 <= ep_rank < ep_size. Returns num_experts."""
    for arg, v in (("ep_rank", ep_rank), ("ep_size", ep_size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise TypeError(f"{op}: {arg} must be an int, got {type(v).__name__}")
    if ep_size < 1:
        raise ValueError(f"{op}: ep_size must be >= 1, got {ep_size}")
    if not 0 <= ep_rank < ep_size:
        raise ValueError(f"{op}: ep_rank must satisfy 0 <= ep_rank < ep_size = {ep_size}, got {ep_rank}")
    if num_experts is None:
        return E_local * ep_size
    if not isinstance(num_experts, int) or isinstance(num_experts, bool):
        raise TypeError(f"{op}: num_experts must be an int or None, got {type(num_experts).__name__}")
    if num_experts < 1 or num_experts % ep_size:
        raise ValueError(f"{op}: num_experts ({num_experts}) must be a positive multiple of ep_size ({ep_size})")
    if num_experts // ep_size != E_local:
        raise ValueError(f"{op}: w13 holds {E_local} experts but num_experts / ep_size = "
                         f"{num_experts} / {ep_size} = {num_experts // ep_size} (each rank passes only its own experts)")
    return num_experts


def check_call(hidden: object, topk_ids: object, topk_weights: object, shared_output: object, out: object,
               hidden_size: int, device: torch.device, op: str) -> tuple[int, int]:
    """The per-call tensors of fused_moe. Returns (T, k)."""
    check_tensor(hidden, "hidden", op, dtype=torch.bfloat16, ndim=2, device=device, last_dim_contiguous=True)
    T, H = hidden.shape
    if H != hidden_size:
        raise ValueError(f"{op}: hidden must be [T, {hidden_size}] (the weights' hidden size), got {list(hidden.shape)}")
    # Under torch.compile the tensors are fake (no address): the pointer checks run eagerly only.
    eager = not torch.compiler.is_compiling()
    if T > 0 and (hidden.stride(0) % 8 or (eager and hidden.data_ptr() % 16)):
        raise ValueError(f"{op}: hidden rows must start on 16-byte boundaries (16-byte aligned data, row stride "
                         f"a multiple of 8 elements), got data_ptr {hidden.data_ptr():#x}, strides {hidden.stride()}")
    check_tensor(topk_ids, "topk_ids", op, dtype=(torch.int32, torch.int64), ndim=2, device=device)
    k = topk_ids.shape[1]
    if topk_ids.shape[0] != T:
        raise ValueError(f"{op}: topk_ids must be [T, k] with T = {T} (hidden's rows), got {list(topk_ids.shape)}")
    if not 1 <= k <= MAX_TOP_K:
        raise ValueError(f"{op}: top-k = topk_ids.shape[1] must be in 1..{MAX_TOP_K}, got {k}")
    check_tensor(topk_ids, "topk_ids", op, contiguous=True)
    check_tensor(topk_weights, "topk_weights", op, dtype=torch.float32, shape=(T, k), device=device, contiguous=True)
    if shared_output is not None:
        check_tensor(shared_output, "shared_output", op, dtype=torch.bfloat16, shape=(T, H), device=device,
                     last_dim_contiguous=True)
    if out is not None:
        check_tensor(out, "out", op, dtype=torch.bfloat16, shape=(T, H), device=device, contiguous=True)
    if eager and out is not None and T > 0:
        if shared_output is not None and out.data_ptr() == shared_output.data_ptr():
            raise ValueError(f"{op}: out must not alias shared_output")
        if out.data_ptr() == hidden.data_ptr():
            raise ValueError(f"{op}: out must not alias hidden")
    return T, k


def check_ids_values(topk_ids: torch.Tensor, num_experts: int, op: str) -> None:
    """Every id in [-1, num_experts) (synchronises with the device: the CPU path, and
    fused_moe(check_ids=True) outside graph capture). Repeated ids in a row are legal: each
    (token, k) pair is its own term of the sum."""
    if topk_ids.numel() == 0:
        return
    ids = topk_ids.to(torch.int64)
    bad = (ids < -1) | (ids >= num_experts)
    if bool(bad.any()):
        t, j = (int(v) for v in bad.nonzero()[0])
        raise ValueError(f"{op}: topk_ids must lie in [-1, num_experts = {num_experts}), got topk_ids[{t}, {j}] = "
                         f"{int(ids[t, j])}")
