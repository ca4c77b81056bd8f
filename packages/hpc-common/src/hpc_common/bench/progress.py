"""A progress bar with an ETA for hpc-bench: rich's when it is importable (hpc-common[bench]), else one
plain line per step. Weights are rough seconds, so the ETA tracks the cases' estimated cost."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, title: str, total: float, stream=None):
        self.title, self.total = title, max(float(total), 1e-9)
        self.stream = stream or sys.stdout
        self.done, self.t0 = 0.0, time.time()
        self._rich = self._task = None

    def __enter__(self) -> "Progress":
        try:
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress
        except ImportError:
            print(f"{self.title}: about {self.total:.0f} s", file=self.stream, flush=True)
            return self
        self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                  console=Console(file=self.stream), redirect_stdout=False, redirect_stderr=False,
                                  transient=False)
        self._rich.__enter__()
        self._task = self._rich.add_task(self.title, total=self.total)
        return self

    def step(self, label: str) -> None:
        """Say what runs now."""
        if self._rich is not None:
            self._rich.update(self._task, description=f"{self.title}: {label}")
        else:
            eta = self._eta()
            print(f"  {label}" + (f" (ETA {eta:.0f} s)" if eta is not None else ""), file=self.stream, flush=True)

    def advance(self, weight: float) -> None:
        self.done += weight
        if self._rich is not None:
            self._rich.advance(self._task, weight)

    def _eta(self) -> float | None:
        if self.done <= 0:
            return None
        return (time.time() - self.t0) / self.done * max(self.total - self.done, 0.0)

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.update(self._task, description=self.title)
            self._rich.__exit__(*exc)
