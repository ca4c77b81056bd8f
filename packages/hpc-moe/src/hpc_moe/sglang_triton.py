"""SGLang's Triton `fused_experts` as a same-process baseline (hpc_moe.bench and hpc_integration's
end-to-end runner): made callable outside an Engine, and FP8 block weights put in the shape its
128-block path takes. Benchmark-only; SGLang is never a dependency (ImportError without it)."""

from __future__ import annotations

import os

import torch

from .reference import BLOCK, quantize_blocks

_API: dict = {}


def fused_experts_api():
    """(fused_experts, MoeRunnerConfig) of SGLang, set up once per process: a default ServerArgs and a
    one-rank model-parallel group (skipped where another caller of this process made them already)."""
    if not _API:
        from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
        from sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe import fused_experts
        from sglang.srt.runtime_context import get_context

        try:
            get_context().override_server_args().install()
        except Exception:  # noqa: BLE001 - installed already by another user of this process
            pass
        os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        from sglang.srt.distributed import parallel_state as ps

        if not torch.distributed.is_initialized():
            ps.init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                            distributed_init_method="tcp://127.0.0.1:29533", backend="nccl")
        if not getattr(ps, "model_parallel_is_initialized", lambda: False)():
            try:
                ps.initialize_model_parallel(1, 1)
            except AssertionError:  # made by another caller in this process
                pass
        _API.update(fused_experts=fused_experts, config=MoeRunnerConfig)
    return _API["fused_experts"], _API["config"]


def block_fp8_weights(w13: torch.Tensor, w2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                     torch.Tensor, int]:
    """SGLang's 128-block FP8 path needs I % 128 == 0: the float experts w13 [E, 2I, H] (gate then up) and
    w2 [E, H, I] with I zero-padded to the next multiple of 128 (zero gate / up rows and Down columns:
    the same MoE) and quantised in 128 x 128 blocks. Returns (w13, w13_scale, w2, w2_scale, padded I)."""
    E, two_i, H = w13.shape
    inter = two_i // 2
    ip = -(-inter // BLOCK) * BLOCK
    p13 = torch.zeros(E, 2 * ip, H, device=w13.device)
    p13[:, :inter], p13[:, ip:ip + inter] = w13[:, :inter], w13[:, inter:]
    p2 = torch.zeros(E, H, ip, device=w2.device)
    p2[:, :, :inter] = w2
    (q13, s13), (q2, s2) = quantize_blocks(p13), quantize_blocks(p2)
    return q13, s13, q2, s2, ip
