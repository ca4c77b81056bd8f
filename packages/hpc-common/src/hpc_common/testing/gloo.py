"""Multi-process CPU tests over torch.distributed's gloo backend: spawn the ranks, wait with a deadline,
collect what they report. Workers are module-level functions worker(rank, port, results, *args) that call
init_gloo(rank, port, world) first and fill `results` (a Manager dict)."""

from __future__ import annotations

import datetime
import socket
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank: int, port: int, world: int, timeout_s: int = 60) -> None:
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout_s))


def run_gloo_ranks(worker, *args, world: int = 2, timeout_s: float = 60.0, what: str = "gloo ranks") -> dict:
    """Spawn `world` processes running worker(rank, port, results, *args); returns `results` as a dict. A
    worker's exception fails the caller; running past `timeout_s` fails the test (pytest.fail)."""
    import pytest
    import torch.multiprocessing as mp

    with mp.Manager() as manager:
        results = manager.dict()
        ctx = mp.start_processes(worker, args=(free_port(), results, *args), nprocs=world, join=False,
                                 start_method="spawn")
        deadline = time.monotonic() + timeout_s
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    pytest.fail(f"the {world} {what} did not finish within {timeout_s:.0f} s")
        finally:
            for p in ctx.processes:  # only the processes this call started
                if p.is_alive():
                    p.terminate()
        return dict(results)
