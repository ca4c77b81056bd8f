"""The decode step on two GPUs through torch.distributed (NCCL), against the same model on one GPU.

    torchrun --nproc-per-node 2 -m hpc_integration.runner.two_gpu --out benchmarks/results   # H200 x2
    python -m hpc_integration.runner.two_gpu --out benchmarks/results                         # one GPU

Every rank builds the same seeded full model (bench.py's setting: LAYERS layers, FP8 paged KV,
CONTEXT-token synthetic contexts, "ours" backend), then:

1. the one-GPU runner (world size 1) on its own GPU: for each batch, GREEDY_STEPS greedy steps
   replayed from its StepGraph (the reference tokens and logits), then the step timed;
2. with two ranks, for each split of SPLITS (TP = 2 attention heads with TP = 2 or EP = 2 MoE,
   ParallelConfig), the runner's shard: the same context (the one-GPU cache's K / V heads of this
   rank copied into its cache, so both runs attend over the same values), the same GREEDY_STEPS
   steps from its StepGraph, whose capture holds the two all-reduces of every layer (after the O
   projection and after the MoE); `greedy_match` = every rank chose the one-GPU token for every
   request at every step, `logit_err` = max |two-GPU - one-GPU| / max |one-GPU| logits;
3. the step timed by hpc_common.bench's two methods (`method` cold / rotation, the slowest rank's
   median), and `allreduce_us`: the step's all-reduces alone (2 x LAYERS all-reduces of [batch,
   hidden] BF16) captured in a graph and timed by the same method.

Rows (fields world_size, tp, ep, split, batch, greedy_match, logit_err, method, provider, median_us,
allreduce_us) go to OUT/<gpu>/e2e_two_gpu.json and .md through hpc_common.bench.BenchResults. A run
with one process writes the world-size-1 rows only (greedy_match null: they are the reference), and
still captures one NCCL all-reduce (a one-rank group) in a CUDA graph to check that path.

NCCL's NVLink multicast (NVLS) is switched off before the process group exists: NCCL_NVLS_ENABLE=0
(on the shared H200 hosts it can take GPUs out of service).
"""

from __future__ import annotations

import argparse
import functools
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from .bench import CONTEXT, KV_DTYPE, MODELS, ROTATION_STEPS, model_config
from .config import ParallelConfig, RunOptions

SPLITS = {"tp2": (2, 1), "tp2_ep2": (2, 2)}  # split name: (attention and MoE TP, MoE EP); EP > 1 replaces MoE TP
BATCHES = (1, 16, 64)
GREEDY_STEPS = 32
LOGIT_TOL = 2e-2  # relative: BF16 partial sums added in another order, far below the greedy margins
OP = "e2e_two_gpu"


def kv_heads_of_rank(num_kv_heads: int, tp_rank: int, tp_size: int) -> list[int]:
    """The KV heads a TP rank holds (hpc_integration.runner.sharding, as vLLM's QKVParallelLinear):
    a contiguous 1 / tp_size of them, or, with fewer KV heads than ranks, head tp_rank // (tp_size /
    num_kv_heads), replicated."""
    if num_kv_heads >= tp_size:
        n = num_kv_heads // tp_size
        return list(range(tp_rank * n, (tp_rank + 1) * n))
    return [tp_rank // (tp_size // num_kv_heads)]


def _init(world: int, rank: int, dev: torch.device) -> None:
    os.environ["NCCL_NVLS_ENABLE"] = "0"  # read by NCCL when the communicator is created, below
    if "MASTER_ADDR" in os.environ:  # torchrun
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    else:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=dev)
    warm = torch.ones(1, device=dev)
    dist.all_reduce(warm)  # the communicator exists before any capture
    torch.cuda.synchronize(dev)
    if int(warm.item()) != world:
        raise RuntimeError(f"two_gpu: an all-reduce of ones over {world} ranks gave {warm.item()}")


def _slowest(us: float, dev: torch.device) -> float:
    t = torch.tensor([us], dtype=torch.float64, device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _all_ranks(flag: bool, dev: torch.device) -> bool:
    t = torch.tensor([int(flag)], device=dev)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return bool(t.item())


def time_step(rt, st, start_ids: torch.Tensor, context: int, dev: torch.device) -> dict[str, float]:
    """{method: us} of one decode step from `context` (both methods restart from the same state)."""
    from hpc_common.bench import cold_us, rotation_us

    step = functools.partial(rt.step_body, st)
    st.start(rt.cache, start_ids, context)
    cold = cold_us(step, device=dev)
    st.start(rt.cache, start_ids, context)
    rot = rotation_us([step] * ROTATION_STEPS, device=dev)
    return {"cold": cold, "rotation": rot}


def time_allreduces(batch: int, hidden: int, count: int, dev: torch.device) -> dict[str, float]:
    """{method: us} of `count` all-reduces of a [batch, hidden] BF16 tensor in one captured graph:
    the collectives of one decode step without the step."""
    from hpc_common.bench import cold_us, rotation_us

    buf = torch.zeros(batch, hidden, dtype=torch.bfloat16, device=dev)

    def step_allreduces():
        for _ in range(count):
            dist.all_reduce(buf)

    return {"cold": cold_us(step_allreduces, device=dev),
            "rotation": rotation_us([step_allreduces] * ROTATION_STEPS, device=dev)}


def copy_context(src_rt, dst_rt, par: ParallelConfig) -> None:
    """dst's cache := the K / V heads its rank holds of src's (one-GPU) cache, every layer and page."""
    if not torch.equal(src_rt.cache.page_table, dst_rt.cache.page_table):
        raise RuntimeError("two_gpu: the one-GPU and the sharded caches hand out pages differently")
    heads = torch.tensor(kv_heads_of_rank(src_rt.cfg.num_kv_heads, par.tp_rank, par.tp_size), device=src_rt.device)
    for src, dst in ((src_rt.cache.k, dst_rt.cache.k), (src_rt.cache.v, dst_rt.cache.v)):
        for layer in range(src.shape[0]):
            dst[layer].view(torch.uint8).copy_(src[layer].view(torch.uint8).index_select(2, heads))


def _generate(rt, st, steps: int):
    """`steps` greedy steps from st: replayed from a StepGraph where the backend can be captured
    (the collectives inside the graph), else eager (the reference backend, on the CPU tests)."""
    from .graphs import StepGraph

    graph = StepGraph(rt, st) if rt.backend.graphs and rt.device.type == "cuda" else None
    return rt.generate(st, steps, graph=graph)


def run(cfg, opts: RunOptions, batches, steps: int, *, backend: str = "ours", context: int = CONTEXT,
        timed: bool = True, log=print) -> tuple[list[dict], bool]:
    """This rank's rows (complete on rank 0: every rank computes every row) and whether every
    two-rank check passed. Needs an initialised process group of one or two ranks; `timed` adds
    the step and all-reduce times (CUDA only)."""
    from .model import DecodeRunner
    from .weights import random_weights

    world, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", torch.cuda.current_device()) if backend != "reference" else torch.device("cpu")
    t0 = time.time()
    weights = random_weights(cfg, seed=0, device=dev)  # the same values on every rank (same seed, same GPU model)
    single = DecodeRunner(cfg, weights, backend, opts, device=dev)
    splits = {}
    if world == 2:
        for name, (tp, ep) in SPLITS.items():
            par = ParallelConfig(tp_rank=rank, tp_size=tp, ep_rank=rank if ep > 1 else 0, ep_size=ep,
                                 group=dist.group.WORLD)
            splits[name] = (par, DecodeRunner(cfg, weights, backend, opts, par=par, device=dev))
    del weights
    log(f"{cfg.name} ({cfg.num_layers} layers, {opts.moe_quant} MoE, {opts.kv_dtype} KV, context {context}, "
        f"backend {backend}): runners built in {time.time() - t0:.1f}s, world size {world}")
    base = {"model": cfg.name, "Hq": cfg.num_qo_heads, "Hkv": cfg.num_kv_heads, "kv_dtype": opts.kv_dtype,
            "moe_quant": opts.moe_quant, "layers": cfg.num_layers, "context": context, "greedy_steps": steps,
            "provider": backend}
    methods = ("cold", "rotation") if timed else (None,)
    rows, ok = [], True

    def add(B, world_size, tp, ep, split, match, err, times, ar):
        for m in methods:
            rows.append({**base, "world_size": world_size, "tp": tp, "ep": ep, "split": split, "batch": B,
                         "greedy_match": match, "logit_err": err, "method": m,
                         "median_us": round(times[m], 3) if timed else None,
                         "allreduce_us": round(ar[m], 3) if timed else None})

    for B in batches:
        st1 = single.synthetic_context(B, context, seed=1000 + B)
        start = st1.ids.clone()
        for par, rt in splits.values():
            copy_context(single, rt, par)
        tok1, logit1 = _generate(single, st1, steps)
        t1 = time_step(single, st1, start, context, dev) if timed else {}
        add(B, 1, 1, 1, "one_gpu", None, 0.0, t1, dict.fromkeys(t1, 0.0))
        if timed:
            log(f"  B={B} one GPU: cold {t1['cold']:.1f} us, rotation {t1['rotation']:.1f} us")
        if world == 1:
            continue
        ar = {}
        if timed:
            ar = {m: _slowest(us, dev) for m, us in time_allreduces(B, cfg.hidden_size, 2 * cfg.num_layers, dev).items()}
        for name, (par, rt) in splits.items():
            st = rt.new_state(B)
            st.start(rt.cache, start, context)
            tok, logit = _generate(rt, st, steps)
            match = _all_ranks(torch.equal(tok, tok1), dev)
            err = _slowest(((logit - logit1).abs().max() / logit1.abs().max()).item(), dev)
            ok &= match and err <= LOGIT_TOL
            t2 = {m: _slowest(us, dev) for m, us in time_step(rt, st, start, context, dev).items()} if timed else {}
            add(B, 2, *SPLITS[name], name, match, err, t2, ar)
            log(f"  B={B} {name}: greedy_match {match}, logit_err {err:.2e}" + (
                f"; cold {t2['cold']:.1f} us (all-reduces {ar['cold']:.1f}), rotation {t2['rotation']:.1f} us "
                f"(all-reduces {ar['rotation']:.1f})" if timed else ""))
    return rows, ok


def check_captured_allreduce(dev: torch.device) -> float:
    """One all-reduce captured in a CUDA graph: its replay must sum every rank's values (rank r
    contributes r + 1). Returns its time (cold method) in microseconds."""
    from hpc_common.bench import cold_us

    world, rank = dist.get_world_size(), dist.get_rank()
    x = torch.empty(64, 4096, dtype=torch.bfloat16, device=dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):  # eager warm-up on a side stream, as graph capture wants
        x.fill_(rank + 1)
        dist.all_reduce(x)
    torch.cuda.current_stream(dev).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        dist.all_reduce(x)
    x.fill_(rank + 1)
    graph.replay()
    torch.cuda.synchronize(dev)
    want = world * (world + 1) // 2
    if not bool((x == want).all()):
        raise RuntimeError(f"two_gpu: the captured all-reduce gave {x.flatten()[:4].tolist()}, want {want}")
    x.zero_()
    return cold_us(lambda: dist.all_reduce(x), device=dev)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results", help="results root: writes OUT/<gpu>/e2e_two_gpu.{json,md}")
    # hy3_tp8 is already one rank of eight (I = 192): a further TP = 2 slice (96) has no kernel tile
    p.add_argument("--model", default="qwen3_30b_a3b", choices=sorted(m for m in MODELS if m != "hy3_tp8"))
    p.add_argument("--batches", default=",".join(map(str, BATCHES)))
    p.add_argument("--steps", type=int, default=GREEDY_STEPS, help="greedy steps compared with the one-GPU run")
    args = p.parse_args(argv)
    batches = tuple(int(b) for b in args.batches.split(","))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if world not in (1, 2):
        raise SystemExit(f"two_gpu: run with one or two processes (torchrun --nproc-per-node 2), got WORLD_SIZE={world}")
    if not torch.cuda.is_available() or torch.cuda.device_count() <= local:
        raise SystemExit(f"two_gpu: needs a CUDA GPU per process (LOCAL_RANK={local}, "
                         f"{torch.cuda.device_count()} visible)")
    dev = torch.device("cuda", local)
    torch.cuda.set_device(dev)
    _init(world, rank, dev)
    log = print if rank == 0 else (lambda *_: None)
    try:
        log(f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, NCCL_NVLS_ENABLE="
            f"{os.environ['NCCL_NVLS_ENABLE']}, {world} rank(s) on {torch.cuda.get_device_name(dev)}")
        log(f"captured all-reduce of [64, 4096] BF16 over {world} rank(s): {check_captured_allreduce(dev):.1f} us cold")
        cfg = model_config(args.model)
        opts = RunOptions(kv_dtype=KV_DTYPE, moe_quant=MODELS[args.model][1], max_batch=max(batches),
                          max_kv_len=CONTEXT + 512)  # room for the timing's warm-up and replays past CONTEXT
        rows, ok = run(cfg, opts, batches, args.steps, log=log)
        if rank == 0:
            from hpc_common.bench import BenchResults
            from hpc_common.bench.results import gpu_slug

            res = BenchResults(OP, Path(args.out) / gpu_slug(), world_size=world, nccl_nvls_enable="0",
                               nccl=".".join(map(str, torch.cuda.nccl.version())), e2e_two_gpu_doc=__doc__.strip())
            res.rows.extend(rows)
            path = res.write()
            log(f"wrote {path} ({len(rows)} rows)")
            if world == 2:
                log(f"two-GPU verdict: {'PASS' if ok else 'FAIL'} (greedy tokens equal to the one-GPU run for "
                    f"{args.steps} steps and logit_err <= {LOGIT_TOL} on every split and batch)")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
