"""The interface every backend implements (one instance per runner)."""

from __future__ import annotations

import torch


class Backend:
    name = ""
    act_dtype = torch.bfloat16
    graphs = True  # whether a decode step can be captured in a CUDA graph
    impl: dict

    def setup(self, rt) -> None:
        """Once, before any layer: check the configuration, allocate workspaces. `rt` is the runner
        (cfg, loc, opts, par, cache, cos_sin, device)."""

    def prepare_layer(self, rt, shard, moe_ckpt: dict):
        """This rank's layer weights (LayerWeights) and MoE checkpoint -> the backend's layer state."""
        raise NotImplementedError

    def begin_decode(self, rt, st) -> None:
        """Once per decode step, before the first layer (ours: the attention plan)."""

    def prologue(self, rt, i: int, layer, qkv: torch.Tensor, positions: torch.Tensor,
                 slots: torch.Tensor) -> torch.Tensor:
        """QK-Norm, RoPE and the KV write of layer i: qkv [T, (Hq + 2 Hkv) D] -> q [T, Hq, D]."""
        raise NotImplementedError

    def decode(self, rt, i: int, q: torch.Tensor, st) -> torch.Tensor:
        """Decode attention of layer i over the paged cache: q [B, Hq, D] -> [B, Hq, D]."""
        raise NotImplementedError

    def router(self, rt, layer, x: torch.Tensor) -> torch.Tensor:
        """x [T, H] -> FP32 router logits [T, E]."""
        raise NotImplementedError

    def moe(self, rt, layer, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """x [T, H], global top-k ids [T, k] int32, weights [T, k] FP32 -> this rank's [T, H]."""
        raise NotImplementedError
