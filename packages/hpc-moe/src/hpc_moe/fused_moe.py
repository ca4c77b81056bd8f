"""The public fused-MoE call and its torch custom op (`hpc_moe::fused_moe`).

On CUDA the op launches the kernels of hpc_moe.kernels on torch's current stream; on the CPU it
runs the pure-torch reference (float32) on the same prepared weights, so code written against
the API runs, slowly, anywhere. The op mutates `out` and the workspace buffers and returns
nothing: it is registered with a fake implementation, so torch.compile traces it and a CUDA
graph captures it like any kernel.
"""

from __future__ import annotations

import torch

from . import checks
from .weights import MoEWeights
from .workspace import MoEWorkspace, cached_workspace

_OP = "fused_moe"


def _capturing(t: torch.Tensor) -> bool:
    # While torch.compile traces, nothing runs on a stream: the compiled graph decides.
    return t.is_cuda and not torch.compiler.is_compiling() and torch.cuda.is_current_stream_capturing()


@torch.library.custom_op("hpc_moe::fused_moe", mutates_args=("out", "inter", "xq", "xs", "y", "down_index"))
def _fused_moe_op(hidden: torch.Tensor, w13: torch.Tensor, w2: torch.Tensor, w13_scale: torch.Tensor | None,
                  w2_scale: torch.Tensor | None, a1_scale: torch.Tensor | None, topk_ids: torch.Tensor,
                  topk_weights: torch.Tensor, shared_output: torch.Tensor | None, out: torch.Tensor,
                  inter: torch.Tensor, xq: torch.Tensor, xs: torch.Tensor, y: torch.Tensor, down_index: torch.Tensor,
                  quant: str, num_experts: int,
                  ep_rank: int, ep_size: int, intermediate_size: int, max_tokens: int, max_top_k: int) -> None:
    weights = MoEWeights(quant=quant, w13=w13, w2=w2, w13_scale=w13_scale, w2_scale=w2_scale, a1_scale=a1_scale,
                         num_experts=num_experts, num_local_experts=w13.shape[0], ep_rank=ep_rank, ep_size=ep_size,
                         hidden_size=hidden.shape[1], intermediate_size=intermediate_size)
    if hidden.shape[0] == 0:
        return
    if not hidden.is_cuda:
        from .reference import reference_from_prepared

        ref = reference_from_prepared(weights, hidden, topk_ids, topk_weights, shared_output=shared_output,
                                      dtype=torch.float32)
        out.copy_(ref.to(torch.bfloat16))
        return
    from . import kernels

    workspace = MoEWorkspace.view(inter, xq, xs, y, down_index, max_tokens, max_top_k, hidden.shape[1])
    kernels.run_fused_moe(weights, hidden, topk_ids, topk_weights, shared_output, out, workspace)


@_fused_moe_op.register_fake
def _(hidden, w13, w2, w13_scale, w2_scale, a1_scale, topk_ids, topk_weights, shared_output, out, inter, xq, xs, y,
      down_index, quant, num_experts, ep_rank, ep_size, intermediate_size, max_tokens, max_top_k):
    return None


def fused_moe(hidden: torch.Tensor, weights: MoEWeights, topk_ids: torch.Tensor, topk_weights: torch.Tensor, *,
              shared_output: torch.Tensor | None = None, out: torch.Tensor | None = None,
              workspace: MoEWorkspace | None = None, check_ids: bool = False) -> torch.Tensor:
    """The MoE layer: out[t] = shared_output[t] + sum_j topk_weights[t, j] * expert_{topk_ids[t, j]}(hidden[t]),
    expert_e(x) = W2_e @ (silu(W13_e[:I] @ x) * (W13_e[I:] @ x)), over the experts of weights' EP rank.

    hidden: BF16 [T, H], unit stride in H, rows 16-byte aligned (row stride a multiple of 8).
    weights: a MoEWeights (MoEWeights.prepare); CUDA (SM90) or CPU, like every tensor of the call.
    topk_ids: int32 or int64 [T, k] contiguous, 1 <= k <= 16, global expert ids; -1 and ids of
      other EP ranks contribute nothing (a token with no local expert gets zeros, or
      shared_output). Repeated ids in a row each count once per occurrence.
    topk_weights: FP32 [T, k] contiguous (applied as given: normalise them beforehand if the model does).
    shared_output: optional BF16 [T, H] (unit stride in H), added in the final reduce.
    out: optional BF16 [T, H] contiguous, fully overwritten (never accumulated into).
    workspace: a MoEWorkspace with max_tokens >= T and top_k >= k (weights.workspace(...)). With
      `workspace` and `out` given the call allocates nothing, so it can be captured in a CUDA graph
      and replayed with new routing (copy new ids and weights into the captured tensors). Without
      one a cached per-device workspace is used; it grows only outside graph capture.
    check_ids: on CUDA, verify that every id lies in [-1, num_experts) and raise ValueError
      otherwise. It reads the ids on the host (a device sync), so it is off by default and
      skipped during graph capture; the kernels never fault on a bad id: ids outside the rank's
      range are skipped like -1. The CPU path always checks (except inside torch.compile).
    Returns out (BF16 [T, H]). Deterministic: the same inputs give the same bits on every run.
    """
    if not isinstance(weights, MoEWeights):
        raise TypeError(f"{_OP}: weights must be a MoEWeights (MoEWeights.prepare), got {type(weights).__name__}")
    device = weights.device
    T, k = checks.check_call(hidden, topk_ids, topk_weights, shared_output, out, weights.hidden_size, device, _OP)
    capturing = _capturing(hidden)
    # A value check reads the ids on the host: never inside a graph capture or a compiled graph.
    if not torch.compiler.is_compiling() and (not hidden.is_cuda or (check_ids and not capturing)):
        checks.check_ids_values(topk_ids, weights.num_experts, _OP)
    fp8 = weights.quant != "bf16"
    H, inter = weights.hidden_size, weights.intermediate_size
    if workspace is not None:
        if not isinstance(workspace, MoEWorkspace):
            raise TypeError(f"{_OP}: workspace must be a MoEWorkspace, got {type(workspace).__name__}")
        workspace.check(T, k, H, inter, fp8, device, _OP)
        if capturing:
            workspace.captured = True
    elif hidden.is_cuda and torch.compiler.is_compiling():
        # A compiled graph owns its buffers (and CUDA-graph trees pool them): allocate in the graph.
        workspace = MoEWorkspace.view(torch.empty(T * k, inter, dtype=torch.bfloat16, device=device),
                                      torch.empty(T if fp8 else 0, H, dtype=checks.FP8, device=device),
                                      torch.empty(T if fp8 else 0, H // 128, dtype=torch.float32, device=device),
                                      *MoEWorkspace.partials(T, k, H, device), T, k, H)
    elif hidden.is_cuda:
        workspace = cached_workspace(T, k, H, inter, fp8, device, capturing, _OP)
    if out is None:
        out = torch.empty(T, H, dtype=torch.bfloat16, device=device)
    if T == 0:
        return out
    if hidden.is_cuda:
        if not torch.compiler.is_compiling():
            from hpc_common.launch import require_hopper

            require_hopper(hidden, "hidden", _OP)
        bufs = (workspace.inter, workspace.xq, workspace.xs, workspace.y, workspace.down_index)
        max_tokens, max_top_k = workspace.max_tokens, workspace.top_k
    else:  # the reference path needs no scratch
        empty = hidden.new_empty(0)
        bufs = (hidden.new_empty(0, inter), empty.to(checks.FP8), empty.float(), hidden.new_empty(0, H),
                empty.to(torch.int32))
        max_tokens, max_top_k = T, k
    _fused_moe_op(hidden, weights.w13, weights.w2, weights.w13_scale, weights.w2_scale, weights.a1_scale, topk_ids,
                  topk_weights, shared_output, out, *bufs, weights.quant, weights.num_experts, weights.ep_rank,
                  weights.ep_size, inter, max_tokens, max_top_k)
    return out
