"""The baseline's MoE: SGLang's Triton `fused_experts` (what SGLang runs by default) when SGLang can
be imported on a CUDA device in a one-process run, else a torch MoE: the routing sort in torch and
torch._grouped_mm per stage (BF16), or every local expert in turn where _grouped_mm does not run
(the CPU). FP8 block weights: SGLang takes them as they are (its block path needs I % 128 == 0, so
I is zero-padded to the next multiple of 128 and the padded weights are quantised again in 128 x 128
blocks); the torch MoE has no block-scaled grouped GEMM, so it runs on the weights dequantised to
BF16 at load time (`impl` says which)."""

from __future__ import annotations

import torch
from hpc_moe.sglang_triton import block_fp8_weights, fused_experts_api
from hpc_moe.torch_grouped import grouped_mm_moe

from ..weights import effective_experts

def pick_impl(device: torch.device, world: int) -> str:
    """"sglang_triton" where SGLang imports (CUDA, one process: its init makes its own TP group), else
    "torch_grouped_mm" where torch._grouped_mm runs on `device`, else "torch_per_expert"."""
    if device.type == "cuda" and world == 1:
        try:
            fused_experts_api()
            return "sglang_triton"
        except Exception:  # noqa: BLE001 - no SGLang here: the torch MoE
            pass
    try:
        x = torch.ones(2, 128, device=device, dtype=torch.bfloat16)
        w = torch.ones(1, 64, 128, device=device, dtype=torch.bfloat16)
        torch._grouped_mm(x, w.transpose(-2, -1), offs=torch.tensor([2], dtype=torch.int32, device=device))
        return "torch_grouped_mm"
    except Exception:  # noqa: BLE001
        return "torch_per_expert"


class BaselineMoE:
    def __init__(self, impl: str, ckpt: dict, quant: str, expert_start: int, device):
        self.impl, self.start = impl, expert_start
        if impl == "sglang_triton":
            self.fe, cfg_cls = fused_experts_api()
            self.kw = {"moe_runner_config": cfg_cls(inplace=False)}
            w13, w2 = ckpt["w13"].to(device), ckpt["w2"].to(device)
            self.E = w13.shape[0]
            if quant == "fp8_block":
                inter = w2.shape[2]
                s13, s2 = ckpt["w13_scale"].to(device), ckpt["w2_scale"].to(device)
                if inter % 128:
                    e13, e2 = effective_experts({"w13": w13, "w2": w2, "w13_scale": s13, "w2_scale": s2}, quant)
                    w13, s13, w2, s2, ip = block_fp8_weights(e13, e2)
                    self.impl = f"sglang_triton_I{ip}"
                self.kw.update(use_fp8_w8a8=True, w1_scale=s13, w2_scale=s2, block_shape=[128, 128])
            self.w13, self.w2 = w13, w2
            return
        w13, w2 = effective_experts({k: v.to(device) for k, v in ckpt.items()}, quant)
        self.w13, self.w2 = w13.to(torch.bfloat16), w2.to(torch.bfloat16)
        self.E, self.inter = self.w13.shape[0], self.w2.shape[2]
        if quant != "bf16":
            self.impl += "_dequant_bf16"

    def __call__(self, x, ids, weights):
        if self.impl.startswith("sglang"):
            local = ids.long() - self.start
            keep = (local >= 0) & (local < self.E)  # other EP ranks' pairs: expert 0 with weight 0
            w = torch.where(keep, weights, torch.zeros_like(weights))
            lid = torch.where(keep, local, torch.zeros_like(local)).to(torch.int32)
            return self.fe(x, self.w13, self.w2, (w, lid, None), **self.kw)
        if self.impl.startswith("torch_grouped_mm"):
            return self._grouped(x, ids, weights)
        return self._per_expert(x, ids, weights)

    def _grouped(self, x, ids, weights):
        return grouped_mm_moe(x, self.w13, self.w2, ids, weights, self.start)

    def _per_expert(self, x, ids, weights):
        acc = torch.zeros(x.shape, device=x.device)
        for e in range(self.E):
            we = (weights * (ids.long() == e + self.start)).sum(-1)  # this expert's weight per token
            h = x @ self.w13[e].T
            act = (torch.nn.functional.silu(h[:, :self.inter].float()) * h[:, self.inter:].float()).to(torch.bfloat16)
            acc += (act @ self.w2[e].T).float() * we[:, None]
        return acc.to(torch.bfloat16)
