"""The contract between `hpc-bench` and each operator's benchmark.

Every operator package registers one `BenchSuite` instance under the entry-point group
`hpc_ops.bench` (its pyproject: `[project.entry-points."hpc_ops.bench"] <op> = "pkg.module:SUITE"`).
hpc-bench finds them with `discover_suites()`, so hpc-common never names its dependents. A suite
says whether it can run here (`unavailable`), lists its GPU cases (each times ours and every
baseline by both methods, returning rows in the results format of `hpc_common.bench.results`),
and, on a machine without a Hopper GPU, checks its references against each other on small
shapes (`cpu_check`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

ENTRY_POINT_GROUP = "hpc_ops.bench"


@dataclass
class BenchCase:
    label: str                        # shown by the progress bar
    run: Callable[[], list[dict]]     # times ours + baselines (both methods) on the GPU; rows in the results format
    est_s: float = 1.0                # rough wall seconds, for the ETA


class BenchSuite:
    """One instance per operator, the value of an `hpc_ops.bench` entry point. Subclasses set
    `op` (the results file stem: "decode", "prologue", "router_gemm", "fp8_quant", "moe", "e2e")
    and `title`, and override the methods below."""

    op: str = ""
    title: str = ""
    # How the report lays out the rows (hpc_common.bench.layouts.Layout; none: one built from the rows),
    # where its section goes (lower first) and other names `--ops` accepts for it.
    layouts: tuple = ()
    order: int = 100
    aliases: tuple[str, ...] = ()

    def unavailable(self) -> str | None:
        """Why this suite cannot run its GPU cases on this machine; None when it can."""
        return hopper_unavailable()

    def cases(self, quick: bool) -> list[BenchCase]:
        """The GPU cases; `quick` keeps a short subset (the whole quick run takes about a minute)."""
        raise NotImplementedError

    def cpu_check(self) -> list[dict]:
        """No GPU: the references on small shapes against each other. Rows carry "check" (what was
        compared), "ok" (bool) and "max_err" (float), plus any shape fields."""
        return []

    def meta(self) -> dict:
        """Extra meta fields for the results file (e.g. the model shapes)."""
        return {}


def hopper_unavailable() -> str | None:
    """Why the hpc-ops kernels cannot run here (they need an SM90 GPU: H100, H200, H20); None when they can."""
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"{torch.cuda.get_device_name()} is compute capability {cap[0]}.{cap[1]}; the kernels need SM90 (Hopper)"
    return None


def check_row(check: str, max_err: float, tol: float, **fields) -> dict:
    """A cpu_check row: `ok` when max_err <= tol (NaN is never ok)."""
    max_err = float(max_err)
    return {"check": check, **fields, "max_err": max_err, "tol": float(tol), "ok": bool(max_err <= tol)}


_SKIPPED: list[tuple[str, str]] = []


def skip(what: str, why: str) -> None:
    """Record that a provider or case was not run, and why (e.g. an optional baseline that cannot be
    imported). A benchmark calls it where it leaves a row out; hpc-bench's summary lists every one."""
    _SKIPPED.append((str(what), str(why)))


def take_skipped() -> list[tuple[str, str]]:
    """The (what, why) pairs recorded since the last call, deduplicated in order; clears them."""
    out = list(dict.fromkeys(_SKIPPED))
    _SKIPPED.clear()
    return out


def discover_suites() -> dict[str, BenchSuite]:
    """Every installed suite by op name, from the `hpc_ops.bench` entry points. An entry point that
    fails to load is returned as a suite whose `unavailable()` says why, so the report can name it."""
    from importlib.metadata import entry_points

    suites: dict[str, BenchSuite] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            suite = ep.load()
        except Exception as exc:  # a broken package must not hide the others' results
            suite = BrokenSuite(ep.name, f"{ep.value} failed to import: {type(exc).__name__}: {exc}")
        suites[getattr(suite, "op", "") or ep.name] = suite
    return suites


class BrokenSuite(BenchSuite):
    """Stands in for a suite whose entry point could not be loaded."""

    def __init__(self, op: str, reason: str):
        self.op, self.title, self._reason = op, op, reason

    def unavailable(self) -> str | None:
        return self._reason

    def cases(self, quick: bool) -> list[BenchCase]:
        return []
