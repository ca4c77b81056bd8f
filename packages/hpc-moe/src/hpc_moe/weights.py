"""MoE weights converted once, at load time, into the layout the kernels read (DESIGN.md,
"Prepared weight layout"), so serving code never converts per call.

    weights = MoEWeights.prepare(w13, w2, quant="fp8_block", w13_scale=s13, w2_scale=s2,
                                 ep_rank=r, ep_size=8, num_experts=192)

Only the prepared tensors are kept (the checkpoint-layout ones can be freed by the caller);
`hpc_moe.reference.unprepared_tensors(weights)` recovers them for tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import checks

_OP = "MoEWeights.prepare"


@dataclass(frozen=True, eq=False)
class MoEWeights:
    """The prepared weights of one MoE layer on one EP rank (immutable).

    quant: "bf16", "fp8_tensor" or "fp8_block". w13 / w2: the prepared Gate-Up and Down weights
    (hpc_moe.layout; BF16 or FP8 E4M3). w13_scale / w2_scale: their FP32 scales in the kernels'
    block layout (None for "bf16"; per-tensor scales are expanded into blocks). a1_scale: FP32 [1],
    the static per-tensor activation scale of "fp8_tensor", or None (dynamic, per token).
    The rank owns global experts [expert_start, expert_end)."""

    quant: str
    w13: torch.Tensor
    w2: torch.Tensor
    w13_scale: torch.Tensor | None
    w2_scale: torch.Tensor | None
    a1_scale: torch.Tensor | None
    num_experts: int
    num_local_experts: int
    ep_rank: int
    ep_size: int
    hidden_size: int
    intermediate_size: int

    @property
    def expert_start(self) -> int:
        return self.ep_rank * self.num_local_experts

    @property
    def expert_end(self) -> int:
        return self.expert_start + self.num_local_experts

    @property
    def expert_range(self) -> range:
        return range(self.expert_start, self.expert_end)

    @property
    def device(self) -> torch.device:
        return self.w13.device

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.w13, self.w2, self.w13_scale, self.w2_scale)
                   if t is not None)

    @classmethod
    def prepare(cls, w13: torch.Tensor, w2: torch.Tensor, quant: str = "bf16", *,
                w13_scale: torch.Tensor | None = None, w2_scale: torch.Tensor | None = None,
                a1_scale: torch.Tensor | float | None = None, ep_rank: int = 0, ep_size: int = 1,
                num_experts: int | None = None) -> MoEWeights:
        """Check and convert one layer's expert weights (CPU or CUDA tensors; outside graph capture).

        w13: [E_local, 2I, H], gate rows 0..I-1 then up rows I..2I-1; w2: [E_local, H, I]. BF16 for
        quant="bf16", float8_e4m3fn for the FP8 formats. H a multiple of 128, I a multiple of 64.
        w13_scale / w2_scale (FP32, FP8 formats only):
          "fp8_tensor": w13_scale [E_local] or [E_local, 2] (gate, up), w2_scale [E_local];
          "fp8_block":  w13_scale [E_local, ceil(2I/128), H/128], w2_scale [E_local, H/128, ceil(I/128)]
                        (128 x 128 blocks, the checkpoints' `weight_scale_inv`).
        a1_scale: "fp8_tensor" only: the static activation scale (float or one-element FP32
        tensor; x is quantised as e4m3(x / a1_scale)); None quantises each token by its own amax.
        EP: the rank `ep_rank` of `ep_size` owns global experts [ep_rank * E_local, (ep_rank + 1) *
        E_local), E_local = num_experts / ep_size; w13 / w2 hold only those (num_experts defaults
        to E_local * ep_size)."""
        from . import layout

        quant = checks.check_quant(quant, _OP)
        E, H, inter = checks.check_weight_tensors(w13, w2, quant, _OP)
        num_experts = checks.check_ep(num_experts, ep_rank, ep_size, E, _OP)
        a1 = checks.check_scales(quant, w13_scale, w2_scale, a1_scale, E, H, inter, w13.device, _OP)
        if w13.is_cuda and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"{_OP}: prepare the weights before CUDA-graph capture, not during it")
        fp8 = quant != "bf16"
        inputs = [t for t in (w13, w2, w13_scale, w2_scale) if t is not None]

        def own(t: torch.Tensor | None) -> torch.Tensor | None:
            # A prepared tensor must not share memory with the caller's (which may be freed or
            # overwritten after loading): a transform that is the identity returns a view.
            if t is not None and any(t.untyped_storage().data_ptr() == i.untyped_storage().data_ptr()
                                     for i in inputs):
                return t.clone()
            return t

        return cls(
            quant=quant,
            w13=own(layout.prepare_w13(w13, quant)),
            w2=own(layout.prepare_w2(w2, quant)),
            w13_scale=own(layout.prepare_w13_scale(w13_scale, quant, inter, H)) if fp8 else None,
            w2_scale=own(layout.prepare_w2_scale(w2_scale, quant, H, inter)) if fp8 else None,
            a1_scale=a1,
            num_experts=num_experts,
            num_local_experts=E,
            ep_rank=ep_rank,
            ep_size=ep_size,
            hidden_size=H,
            intermediate_size=inter,
        )

    def workspace(self, max_tokens: int, top_k: int):
        """A MoEWorkspace for calls of up to `max_tokens` tokens and top-`top_k` routing."""
        from .workspace import MoEWorkspace

        return MoEWorkspace(max_tokens, top_k, self.hidden_size, self.intermediate_size, self.device,
                            fp8=self.quant != "bf16")

    def __repr__(self) -> str:
        return (f"MoEWeights(quant={self.quant!r}, E_local={self.num_local_experts} of {self.num_experts} "
                f"(experts {self.expert_start}..{self.expert_end - 1}, EP rank {self.ep_rank}/{self.ep_size}), "
                f"H={self.hidden_size}, I={self.intermediate_size}, device={self.device}, "
                f"{self.nbytes / 2**20:.1f} MiB)")
