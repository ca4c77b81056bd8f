"""The decode-step runner split over two processes (torch.distributed, gloo, CPU): its reference
backend with TP = 2 attention and TP = 2 or EP = 2 MoE, the all-reduces after the O projection and
after the MoE, gives the one-process run's greedy tokens for every step and its logits within
float32 rounding, on the tiny config from the same prompts."""

from __future__ import annotations

import datetime
import socket
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 2
STEPS = 32
PROMPTS = (2, 8)  # requests, prompt tokens
pytestmark = pytest.mark.slow  # two spawned processes: about 10 s each on two cores
# (attention TP, MoE EP) of each two-rank split; the MoE is TP-split when EP is 1
SPLITS = {"tp2": (2, 1), "tp2_ep2": (2, 2)}


def _runner(par=None):
    from hpc_integration.runner import DecodeRunner, RunOptions, preset, random_weights

    cfg = preset("tiny", num_layers=2, vocab_size=512, max_position=1024)
    weights = random_weights(cfg, seed=0)  # same seed: every rank starts from the same full checkpoint
    opts = RunOptions(kv_dtype="fp32", max_batch=PROMPTS[0], max_kv_len=64, page_size=16)
    return DecodeRunner(cfg, weights, "reference", opts, par=par)


def _prompts() -> torch.Tensor:
    return torch.randint(0, 512, PROMPTS, generator=torch.Generator().manual_seed(1))


def _generate(runner) -> tuple[torch.Tensor, torch.Tensor]:
    st, logits0 = runner.prefill(_prompts())
    return runner.generate(st, STEPS, logits0=logits0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, results, split: str) -> None:
    from hpc_integration.runner import ParallelConfig

    torch.set_num_threads(1)  # two ranks on a two-core CI machine
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=60))
    try:
        tp, ep = SPLITS[split]
        par = ParallelConfig(tp_rank=rank % tp, tp_size=tp, ep_rank=rank % ep, ep_size=ep, group=dist.group.WORLD)
        results[rank] = _generate(_runner(par))
    finally:
        dist.destroy_process_group()


def _run_ranks(split: str, timeout_s: float = 60.0) -> dict:
    with mp.Manager() as manager:
        results = manager.dict()
        ctx = mp.start_processes(_worker, args=(_free_port(), results, split), nprocs=WORLD, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    pytest.fail(f"the {WORLD} gloo ranks of {split} did not finish within {timeout_s:.0f} s")
        finally:
            for p in ctx.processes:  # only the processes this test started
                if p.is_alive():
                    p.terminate()
        return dict(results)


@pytest.fixture(scope="module")
def one_process():
    return _generate(_runner())


@pytest.mark.parametrize("split", sorted(SPLITS))
def test_two_ranks_give_the_one_process_tokens_and_logits(split, one_process):
    tokens1, logits1 = one_process
    assert tokens1.shape == (STEPS + 1, PROMPTS[0]) and logits1.shape == (STEPS + 1, PROMPTS[0], 512)
    results = _run_ranks(split)
    assert sorted(results) == list(range(WORLD))
    for rank, (tokens, logits) in sorted(results.items()):
        steps = (tokens != tokens1).any(dim=1).nonzero().flatten().tolist()
        assert not steps, f"{split} rank {rank}: greedy tokens differ from the one-process run at steps {steps}"
        err = (logits - logits1).abs().max().item()
        scale = logits1.abs().max().item()
        # float32 partial sums added in another order; the greedy margins are ~0.7 sqrt(H) = 11 logits
        assert err <= 1e-4 * scale, f"{split} rank {rank}: max |logit diff| {err:.3e} (max |logit| {scale:.3e})"
    torch.testing.assert_close(results[0][1], results[1][1], rtol=0, atol=0)  # both ranks hold the all-reduced sum
