"""The decode-step runner split over two processes (torch.distributed, gloo, CPU): its reference
backend with TP = 2 attention and TP = 2 or EP = 2 MoE, the all-reduces after the O projection and
after the MoE, gives the one-process run's greedy tokens for every step and its logits within
float32 rounding, on the tiny config from the same prompts."""

from __future__ import annotations


import pytest
import torch
import torch.distributed as dist
from hpc_common.testing.gloo import init_gloo, run_gloo_ranks

WORLD = 2
STEPS = 32
PROMPTS = (2, 8)  # requests, prompt tokens
pytestmark = pytest.mark.slow  # two spawned processes: about 10 s each on two cores
# (attention TP, MoE EP) of each two-rank split; the MoE is TP-split when EP is 1
SPLITS = {"tp2": (2, 1), "tp2_ep2": (2, 2), "ep2": (1, 2)}  # ep2: every head on both ranks, experts split


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


def _worker(rank: int, port: int, results, split: str) -> None:
    from hpc_integration.runner import ParallelConfig

    torch.set_num_threads(1)  # two ranks on a two-core CI machine
    init_gloo(rank, port, WORLD)
    try:
        tp, ep = SPLITS[split]
        par = ParallelConfig(tp_rank=rank % tp, tp_size=tp, ep_rank=rank % ep, ep_size=ep, group=dist.group.WORLD)
        results[rank] = _generate(_runner(par))
    finally:
        dist.destroy_process_group()


def _run_ranks(split: str, timeout_s: float = 60.0) -> dict:
    return run_gloo_ranks(_worker, split, world=WORLD, timeout_s=timeout_s, what=f"gloo ranks of {split}")


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


# --- hpc_integration.runner.two_gpu (the torchrun entry of the H200 x2 machine) on the CPU ---

def _two_gpu_worker(rank: int, port: int, results) -> None:
    from hpc_integration.runner import RunOptions, preset, two_gpu

    torch.set_num_threads(1)
    init_gloo(rank, port, WORLD)
    try:
        cfg = preset("tiny", num_layers=2, vocab_size=512, max_position=1024)
        opts = RunOptions(kv_dtype="fp32", max_batch=3, max_kv_len=64, page_size=16)
        results[rank] = two_gpu.run(cfg, opts, (1, 3), 8, backend="reference", context=20, timed=False,
                                    log=lambda *_: None)
    finally:
        dist.destroy_process_group()


def test_two_gpu_entry_flow_on_two_gloo_ranks():
    """two_gpu.run's checks (the one-GPU cache's K / V heads copied into each rank's cache, greedy
    tokens and logits of both splits against the one-process run) with the reference backend."""
    results = run_gloo_ranks(_two_gpu_worker, world=WORLD, what="two_gpu gloo ranks")
    rows, ok = results[0]
    assert ok and results[1][1]
    assert {(r["world_size"], r["split"], r["batch"]) for r in rows} == {
        (1, "one_gpu", 1), (1, "one_gpu", 3), (2, "tp2", 1), (2, "tp2", 3), (2, "tp2_ep2", 1), (2, "tp2_ep2", 3)}
    for r in rows:
        if r["world_size"] == 2:
            assert r["greedy_match"] is True and r["logit_err"] <= 1e-5, r
            assert (r["tp"], r["ep"]) == {"tp2": (2, 1), "tp2_ep2": (2, 2)}[r["split"]]


@pytest.mark.parametrize("num_kv_heads,tp_size", [(4, 2), (4, 4), (2, 4), (1, 8), (8, 2)])
def test_kv_heads_of_rank_are_the_runners_kv_slices(num_kv_heads, tp_size):
    from hpc_integration.runner import ModelConfig, ParallelConfig, random_weights
    from hpc_integration.runner.sharding import shard_layer
    from hpc_integration.runner.two_gpu import kv_heads_of_rank

    cfg = ModelConfig(vocab_size=64, hidden_size=128, num_layers=1, num_qo_heads=8, num_kv_heads=num_kv_heads,
                      head_dim=16, num_experts=4, top_k=2, moe_intermediate_size=64)
    lw = random_weights(cfg, seed=3).layers[0]
    D = cfg.head_dim
    for r in range(tp_size):
        heads = kv_heads_of_rank(num_kv_heads, r, tp_size)
        want = torch.cat([lw.wk[h * D:(h + 1) * D] for h in heads])
        assert torch.equal(shard_layer(lw, cfg, ParallelConfig(tp_rank=r, tp_size=tp_size)).wk, want)
