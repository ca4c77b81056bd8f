"""Two processes through torch.distributed (gloo, CPU): each rank runs the MoE reference on its own
shard (shard_moe_weights), the partial outputs are all-reduced, and every rank's sum equals the
one-process MoE of the full layer, for TP = 2 and EP = 2 (and Hy3 TP8's off-grid slice geometry,
padded, at TP = 2)."""

import datetime
import socket
import time

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from _sharding_cases import full_layer, layer_reference, routing
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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, results: dict) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
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


def run_ranks(worker, *args, timeout_s: float = 60.0) -> dict:
    """Spawn WORLD processes running worker(rank, port, results, *args); returns `results` (a dict
    the workers fill). A worker's exception fails the test; so does running past `timeout_s`."""
    with mp.Manager() as manager:
        results = manager.dict()
        ctx = mp.start_processes(worker, args=(_free_port(), results, *args), nprocs=WORLD, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    pytest.fail(f"the {WORLD} gloo ranks did not finish within {timeout_s:.0f} s")
        finally:
            for p in ctx.processes:  # only the processes this test started
                if p.is_alive():
                    p.terminate()
        return dict(results)


def test_two_gloo_ranks_all_reduce_to_the_one_process_moe():
    results = run_ranks(_worker)
    assert len(results) == WORLD * len(CASES)
    for (rank, i), (err, scale) in sorted(results.items()):
        assert err <= 1e-12 * scale, f"rank {rank}, case {CASES[i]}: max abs error {err:.3e} (max |out| {scale:.3e})"
