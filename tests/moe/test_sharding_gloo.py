"""Two processes through torch.distributed (gloo, CPU): each rank runs the MoE reference on its own
shard (shard_moe_weights), the partial outputs are all-reduced, and every rank's sum equals the
one-process MoE of the full layer, for TP = 2 and EP = 2 (and Hy3 TP8's off-grid slice geometry,
padded, at TP = 2)."""


import pytest
import torch.distributed as dist

from _sharding_cases import full_layer, layer_reference, routing
from hpc_common.testing.gloo import init_gloo, run_gloo_ranks
from hpc_moe import shard_moe_weights

pytestmark = pytest.mark.slow  # two spawned processes: about 10 s each on two cores
WORLD = 2
# (quant, E, H, I, parallel mode, unaligned): TP slices I, EP the experts
CASES = [
    ("bf16", 4, 256, 256, "tp", "error"),
    ("bf16", 4, 256, 256, "ep", "error"),
    ("fp8_tensor", 4, 256, 256, "tp", "error"),
    ("fp8_block", 4, 256, 512, "tp", "error"),
    ("fp8_block", 4, 256, 512, "ep", "error"),
    ("fp8_block", 2, 128, 384, "tp", "pad"),  # 192 rows a rank, rank 1 from mid-block
]


def _worker(rank: int, port: int, results: dict) -> None:
    init_gloo(rank, port, WORLD)
    try:
        for i, (quant, E, H, inter, mode, unaligned) in enumerate(CASES):
            layer = full_layer(quant, E, H, inter, seed=100 + i)  # same seed: every rank loads the same checkpoint
            x, ids, wts = routing(T=9, E=E, k=2, H=H, seed=100 + i)
            tp = (rank, WORLD) if mode == "tp" else (0, 1)
            ep = (rank, WORLD) if mode == "ep" else (0, 1)
            shard = shard_moe_weights(**layer, tp_rank=tp[0], tp_size=tp[1], ep_rank=ep[0], ep_size=ep[1],
                                      unaligned=unaligned)
            part = layer_reference(shard.prepare_kwargs(), x, ids, wts, expert_offset=ep[0] * (E // ep[1]))
            dist.all_reduce(part)  # float64 sum of the partial outputs, as the runner does after the MoE
            want = layer_reference(layer, x, ids, wts)
            results[(rank, i)] = ((part - want).abs().max().item(), want.abs().max().item())
    finally:
        dist.destroy_process_group()


def test_two_gloo_ranks_all_reduce_to_the_one_process_moe():
    results = run_gloo_ranks(_worker, world=WORLD)
    assert len(results) == WORLD * len(CASES)
    for (rank, i), (err, scale) in sorted(results.items()):
        assert err <= 1e-12 * scale, f"rank {rank}, case {CASES[i]}: max abs error {err:.3e} (max |out| {scale:.3e})"
