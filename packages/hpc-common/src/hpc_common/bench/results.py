"""One results format for every benchmark.

benchmarks/results/<gpu>/<op>.json = {"meta": {gpu, commit, date, torch, cuda, nvcc, ...},
"rows": [{<case parameters>, "provider", "median_us", [floor_us, tbps, max_abs_err, rel_err,
cosine]}]}, plus <op>.md, a Markdown table of the same rows.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import subprocess
from pathlib import Path

import torch

from .timing import TIMING_METHOD

OPTIONAL_FIELDS = ("floor_us", "tbps", "max_abs_err", "rel_err", "cosine")


def gpu_slug(name: str | None = None) -> str:
    name = name or torch.cuda.get_device_name()
    name = name.lower().replace("nvidia", "").strip()
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "gpu"


def _git_commit(repo: Path) -> str:
    # The device machine gets a copy of the tree without .git: tools/gpu_check.sh passes
    # the commit it was started from.
    if os.environ.get("HPC_GIT_COMMIT"):
        return os.environ["HPC_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except Exception:
        return "unknown"


def run_meta(repo: Path | None = None, **extra) -> dict:
    from ..jit.toolchain import nvcc_version

    try:
        nvcc = nvcc_version()
    except Exception:
        nvcc = "unknown"
    meta = {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "commit": _git_commit(repo or Path.cwd()),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "nvcc": nvcc,
        "timing": TIMING_METHOD,
    }
    meta.update(extra)
    return meta


def markdown_table(rows: list[dict], cols: list[str] | None = None, cell=str) -> list[str]:
    """A Markdown table's lines: header, separator, one line per row (missing fields empty, values through
    `cell`). cols: every field of the rows, in first-seen order, unless given."""
    if cols is None:
        cols = list(dict.fromkeys(c for r in rows for c in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r[c]) if c in r else "" for c in cols) + " |" for r in rows]
    return lines


def dump_results(meta: dict, rows: list[dict]) -> str:
    """The JSON text of a results file: meta, then one row per line (diffs stay readable)."""
    body = ",\n".join("  " + json.dumps(r) for r in rows)
    return '{"meta": ' + json.dumps(meta, indent=1) + ',\n "rows": [\n' + body + "\n ]}\n"


def make_row(provider: str, median_us: float, **fields) -> dict:
    """One results row: the case fields, then provider and median_us, then the optional metrics present."""
    row = {k: v for k, v in fields.items() if k not in OPTIONAL_FIELDS}
    row["provider"] = provider
    row["median_us"] = round(float(median_us), 3)
    for k in OPTIONAL_FIELDS:
        if fields.get(k) is not None:
            row[k] = float(fields[k])
    return row


class Rows:
    """Collects rows with BenchResults' `add` and nothing else (no meta, no files): what one hpc-bench
    case fills and returns."""

    def __init__(self):
        self.rows: list[dict] = []

    def add(self, provider: str, median_us: float, **fields) -> dict:
        row = make_row(provider, median_us, **fields)
        self.rows.append(row)
        return row


def load_results(path: Path) -> tuple[dict, list[dict]]:
    """(meta, rows) of a results file; ValueError naming the file when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        meta, rows = data.get("meta", {}), data["rows"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a results file ({type(e).__name__}: {e})") from None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: 'rows' is not a list")
    return (meta if isinstance(meta, dict) else {}), [r for r in rows if isinstance(r, dict)]


class BenchResults(Rows):
    def __init__(self, op: str, out_dir: Path, **meta_extra):
        super().__init__()
        self.op = op
        self.out_dir = Path(out_dir)
        self.meta = run_meta(**meta_extra)

    def markdown(self) -> str:
        cols: list[str] = []
        for r in self.rows:
            for k in r:
                if k not in cols:
                    cols.append(k)
        m = self.meta
        head = (f"# {self.op}\n\nGPU {m['gpu']}, commit {m['commit']}, {m['date']}, torch {m['torch']}, "
                f"CUDA {m['cuda']}, nvcc {m['nvcc']}\n\n")
        table = markdown_table(self.rows, cols, lambda v: f"{v:.4g}" if isinstance(v, float) else str(v))
        return head + "\n".join(table) + "\n"

    def write(self) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        path = self.out_dir / f"{self.op}.json"
        path.write_text(dump_results(self.meta, self.rows))
        (self.out_dir / f"{self.op}.md").write_text(self.markdown())
        return path
