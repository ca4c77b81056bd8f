"""GPU: the fused-MoE kernels on shard_moe_weights' shards, one rank after another on one GPU; the
ranks' outputs summed (what the all-reduce does) match the float64 reference of the full layer (for
unaligned="requantize", of its shards) (cosine >= 0.9997 and max error <= 0.02 of max |ref| for FP8, cosine >= 0.99999 for BF16, as
test_fused_moe_gpu). Includes Hy3-FP8 TP8's geometry (I = 1536, 192 rows a rank, zero-padded onto
the 128 grid: every rank's shard has I = 256)."""

import pytest
import torch

from _sharding_cases import full_layer, layer_reference, routing
from hpc_moe import MoEWeights, fused_moe, shard_moe_weights

pytestmark = pytest.mark.gpu


def _to(kw: dict, dev) -> dict:
    return {k: v.to(dev) if isinstance(v, torch.Tensor) else v for k, v in kw.items()}


@pytest.mark.parametrize("quant,E,H,inter,tp,ep,unaligned", [
    ("fp8_block", 16, 512, 1536, 8, 1, "pad"),      # Hy3-FP8 TP8's slices, padded
    ("fp8_block", 16, 512, 1536, 8, 1, "requantize"),
    ("bf16", 16, 512, 1536, 8, 1, "error"),          # BF16: 192 rows a rank as they are
    ("fp8_block", 16, 512, 768, 2, 1, "error"),      # on the grid
    ("fp8_tensor", 16, 512, 768, 2, 2, "error"),     # TP x EP
    ("bf16", 16, 512, 768, 1, 4, "error"),           # EP: views of the experts
])
def test_kernels_on_the_shards_sum_to_the_full_moe(quant, E, H, inter, tp, ep, unaligned, dev=torch.device("cuda")):
    layer = full_layer(quant, E, H, inter, seed=inter + tp + ep)
    x, ids, wts = routing(T=37, E=E, k=4, H=H, seed=5)
    # "requantize" changes weights on purpose: its reference is the sum of its shards' references
    ref = layer_reference(layer, x, ids, wts) if unaligned != "requantize" else 0
    total = torch.zeros(x.shape, dtype=torch.float64, device=dev)
    on_dev = _to(layer, dev)
    for t in range(tp):
        for e in range(ep):
            # sharded where the checkpoint lies (on the GPU here)
            shard = shard_moe_weights(**on_dev, tp_rank=t, tp_size=tp, ep_rank=e, ep_size=ep, unaligned=unaligned)
            if unaligned == "requantize":
                ref = ref + layer_reference(_to(shard.prepare_kwargs(), "cpu"), x, ids, wts,
                                            expert_offset=e * (E // ep))
            weights = MoEWeights.prepare(**shard.prepare_kwargs())
            out = fused_moe(x.to(dev), weights, ids.to(dev), wts.to(dev))
            total += out.double()
    got, r = total.cpu().flatten(), ref.flatten()
    cos = torch.nn.functional.cosine_similarity(got, r, dim=0).item()
    rel = (got - r).abs().max().item() / r.abs().max().item()
    if quant == "bf16":
        assert cos >= 0.99999 and rel <= 0.01, f"cos {cos:.7f} max rel {rel:.4g}"
    else:
        assert cos >= 0.9997 and rel <= 0.02, f"cos {cos:.7f} max rel {rel:.4g}"
