"""router_gemm: FP32 router scores from BF16 activations and an FP32 router weight."""

from __future__ import annotations

import functools

import torch
from hpc_common.checks import check_aligned, check_tensor
from hpc_common.launch import get_num_sms, get_pdl, require_hopper, stream_ptr

from . import _ext
from .heuristics import (FP32_PATHS, GEMV_PATHS, TILE_GEMV, TILE_SHAPES, Plan, bf16x2_tiles,
                         choose_plan, gemv_clusters, ws_launch_mode)
from .split_workspace import get_workspace, workspace_floats
from .weight import RouterWeight, check_weight, prepare

_OP = "router_gemm"
MAX_M = 1 << 22  # grid.z = ceil(M / 64) must stay within CUDA's 65535

# The gemv kernels of the binding (bindings.cpp GemvKind): bulk copies through shared memory, the
# one-token register kernel, and the register kernel with a 2-row window per thread.
_GEMV_KIND = {"gemv": 0, "gemvr": 1, "gemvrw2": 2}


def _check_inputs(x: object, weight: torch.Tensor, out: object | None) -> None:
    check_tensor(x, "x", _OP, dtype=torch.bfloat16, ndim=2)
    n, k = weight.shape
    if x.shape[1] != k:
        raise ValueError(f"{_OP}: x must have shape [M, {k}] to match weight [{n}, {k}], got {list(x.shape)}")
    if x.shape[0] > MAX_M:
        raise ValueError(f"{_OP}: x has M={x.shape[0]} rows; at most {MAX_M} are supported")
    if x.stride(1) != 1 or x.stride(0) % 8:
        raise ValueError(
            f"{_OP}: x must have unit stride in its last dimension and a row stride that is a multiple of 8 "
            f"elements (16 bytes), got strides {x.stride()}"
        )
    if x.device != weight.device:
        raise ValueError(f"{_OP}: x must be on {weight.device} (the weight's device), got {x.device}")
    if out is not None:
        check_tensor(out, "out", _OP, dtype=torch.float32, shape=(x.shape[0], n), device=weight.device)
        if out.stride(1) != 1 or out.stride(0) % 4:
            raise ValueError(
                f"{_OP}: out must have unit stride in its last dimension and a row stride that is a multiple of 4, "
                f"got strides {out.stride()}"
            )


def _check_device_side(x: torch.Tensor, out: torch.Tensor | None) -> None:
    require_hopper(x, "x", _OP)
    if x.shape[0]:
        check_aligned(x, "x", _OP, 16)
    if out is not None and out.numel():
        check_aligned(out, "out", _OP, 16)


@functools.lru_cache(maxsize=None)
def _device_max_clusters(device_index: int, tile: int, splits: int) -> int:
    with torch.cuda.device(device_index):
        if tile == TILE_GEMV:
            return int(_ext.load().gemv_max_clusters(splits))
        return int(_ext.load().bf16x2_max_clusters(tile, splits))


def _scaled_max_clusters(device: torch.device):
    """`max_clusters(tile, splits)` of this device, scaled to hpc_common.get_num_sms()."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    device_sms = torch.cuda.get_device_properties(index).multi_processor_count
    scale = min(1.0, get_num_sms(device) / device_sms)

    def max_clusters(tile: int, splits: int) -> int:
        n = _device_max_clusters(index, tile, splits)
        return max(1, int(n * scale)) if n > 0 else 0

    return max_clusters


def plan_for(M: int, N: int, K: int, device: torch.device, path: str | None = None) -> Plan:
    """The kernel and split count `router_gemm` uses for this shape on `device`."""
    return choose_plan(M, N, K, _scaled_max_clusters(device), path=path, num_sms=get_num_sms(device))


def _fill(p, x: torch.Tensor, out: torch.Tensor, plan: Plan):
    """The fields every launcher's params struct shares."""
    M, K = x.shape
    p.x, p.x_stride, p.out, p.out_stride = x.data_ptr(), x.stride(0), out.data_ptr(), out.stride(0)
    p.M, p.N, p.K = M, out.shape[1], K
    p.splits, p.w_evict_first = plan.splits, int(plan.evict_first)
    return p


def launch(x: torch.Tensor, rw: RouterWeight, out: torch.Tensor, plan: Plan, pdl: bool | None = None) -> None:
    """Run one plan (no checks beyond the kernel's own; tests and benchmarks use this to
    pin a path)."""
    M = x.shape[0]
    N = rw.weight.shape[0]
    if M == 0:
        return
    ext = _ext.load()
    pdl = get_pdl() if pdl is None else bool(pdl)
    stream = stream_ptr(x.device)
    if plan.path in GEMV_PATHS:
        max_clusters = _scaled_max_clusters(x.device)
        p = _fill(ext.GemvFp32Params(), x, out, plan)
        p.w = rw.weight.data_ptr()
        p.clusters = min(N, gemv_clusters(plan.splits, get_num_sms(x.device), lambda s: max_clusters(TILE_GEMV, s)))
        ext.gemv_fp32(_GEMV_KIND[plan.path], p, pdl, stream)
    elif plan.path in FP32_PATHS:
        p = _fill(ext.Fp32SplitKParams(), x, out, plan)
        p.w, p.l2_prefetch = rw.weight.data_ptr(), int(plan.path == "fp32pf")
        ext.fp32_splitk(p, pdl, stream)
    else:
        p = _fill(ext.Bf16x2Params(), x, out, plan)
        p.w_hi, p.w_lo, p.prefetch = rw.w_hi.data_ptr(), rw.w_lo.data_ptr(), plan.prefetch
        mc = plan.multicast
        if plan.ws_mode:
            tiles = bf16x2_tiles(plan.tile, M, N, mc)
            ws = get_workspace(x.device, stream, workspace_floats(tiles, plan.splits, *TILE_SHAPES[plan.tile]), tiles)
            if ws is None:  # capture without a workspace: the cluster split gives the same bits
                mc = False
            else:
                max_clusters = _scaled_max_clusters(x.device)
                resident = 2 * max_clusters(plan.tile, 2) if mc else max_clusters(plan.tile, 1)
                p.ws_mode = ws_launch_mode(plan, M, N, resident)
                p.ws, p.counters = ws.partials.data_ptr(), ws.counters.data_ptr()
        p.multicast = int(mc)
        ext.bf16x2(plan.tile, p, pdl, stream)


class _Prepared:
    """A RouterWeight view over the tensors the custom op receives."""

    __slots__ = ("weight", "w_hi", "w_lo")

    def __init__(self, weight, w_hi, w_lo):
        self.weight, self.w_hi, self.w_lo = weight, w_hi, w_lo


def _check_split(weight: torch.Tensor, w_hi: torch.Tensor, w_lo: torch.Tensor) -> None:
    for t, name in ((w_hi, "w_hi"), (w_lo, "w_lo")):
        check_tensor(t, name, _OP, dtype=torch.bfloat16, shape=tuple(weight.shape), device=weight.device,
                     contiguous=True)
        check_aligned(t, name, _OP, 16)


@torch.library.custom_op("hpc_router_gemm::router_gemm", mutates_args=())
def _router_gemm_op(x: torch.Tensor, weight: torch.Tensor, w_hi: torch.Tensor, w_lo: torch.Tensor) -> torch.Tensor:
    check_weight(weight)
    _check_split(weight, w_hi, w_lo)
    _check_inputs(x, weight, None)
    _check_device_side(x, None)
    out = torch.empty((x.shape[0], weight.shape[0]), dtype=torch.float32, device=x.device)
    launch(x, _Prepared(weight, w_hi, w_lo), out, plan_for(x.shape[0], *weight.shape, x.device))
    return out


@_router_gemm_op.register_fake
def _(x, weight, w_hi, w_lo):
    torch._check(x.dim() == 2 and weight.dim() == 2 and x.shape[1] == weight.shape[1])
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=torch.float32)


@torch.library.custom_op("hpc_router_gemm::router_gemm_out", mutates_args=("out",))
def _router_gemm_out_op(x: torch.Tensor, weight: torch.Tensor, w_hi: torch.Tensor, w_lo: torch.Tensor,
                        out: torch.Tensor) -> None:
    check_weight(weight)
    _check_split(weight, w_hi, w_lo)
    _check_inputs(x, weight, out)
    _check_device_side(x, out)
    launch(x, _Prepared(weight, w_hi, w_lo), out, plan_for(x.shape[0], *weight.shape, x.device))


@_router_gemm_out_op.register_fake
def _(x, weight, w_hi, w_lo, out):
    return None


def router_gemm(x: torch.Tensor, weight: torch.Tensor | RouterWeight, out: torch.Tensor | None = None) -> torch.Tensor:
    """Router scores `x @ weight^T` in FP32, for BF16 activations and an FP32 router weight.

    x: BF16 [M, K] on an SM90 GPU, unit stride in K, row stride a multiple of 8 elements,
    16-byte aligned. M may be 0.
    weight: FP32 [N, K] (contiguous; N and K multiples of 64) or a `RouterWeight` made from
    one. A plain tensor gets its BF16 split from a per-tensor cache on first use (refreshed
    automatically in eager mode after in-place updates); pass a RouterWeight to control that
    (see hpc_router_gemm.weight for the CUDA-graph rules).
    out: optional FP32 [M, N] output (unit stride in N, row stride a multiple of 4, 16-byte
    aligned); written, not accumulated into.
    Returns FP32 [M, N].

    Small M runs exact FP32 CUDA-core kernels on the FP32 weight (one token: a streaming
    GEMV over whole weight rows per SM); larger M runs one
    tensor-core kernel that computes x @ W_hi^T and x @ W_lo^T from one load of each x tile
    and returns acc_hi + acc_lo / 256 (max error ~3e-5 at K=4096 with W ~ 0.02 N(0,1)). The
    choice is per shape (heuristics.py). Results are bitwise reproducible for a given shape,
    GPU and `hpc_common.set_num_sms` setting; identical eager, under graph replay and with
    PDL on or off.
    """
    if isinstance(weight, RouterWeight):
        rw = weight
        rw.ensure_fresh()
    else:
        check_weight(weight)
        _check_inputs(x, weight, out)
        rw = prepare(weight)
    if out is None:
        return torch.ops.hpc_router_gemm.router_gemm(x, rw.weight, rw.w_hi, rw.w_lo)
    torch.ops.hpc_router_gemm.router_gemm_out(x, rw.weight, rw.w_hi, rw.w_lo, out)
    return out
