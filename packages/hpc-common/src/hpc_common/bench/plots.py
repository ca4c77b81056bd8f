"""PNG plots of an hpc-bench report: per layout group, latency against the case / M / T axis by each
timing method with the floor drawn, and the achieved bandwidth; per layout with an error field, the
error against precision. matplotlib is imported here only (hpc-common[bench]); the operators never need it."""

from __future__ import annotations

import contextlib
import re
import sys
from pathlib import Path

from .layouts import METHODS, Layout, baselines, groups, layouts_for, row_method, select, split_label
from .timing import COPY_BANDWIDTH_TBPS

MISSING = "plots skipped: matplotlib is not importable here (pip install 'hpc-common[bench]')"


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", "_".join(str(p) for p in parts)).strip("_").lower()[:80]


def _axis(layout: Layout, rows: list[dict]):
    """(x positions by case key, tick labels, log2 axis?) over the rows' distinct case keys."""
    keys = list(dict.fromkeys(tuple(r.get(k) for k in layout.case) for r in rows))
    xs = [k[-1] for k in keys]
    numeric = len(layout.case) == 1 and all(isinstance(x, (int, float)) and x > 0 for x in xs)
    if numeric:
        return {k: float(k[-1]) for k in keys}, None, True
    return {k: float(i) for i, k in enumerate(keys)}, ["/".join(str(v) for v in k) for k in keys], False


def _bandwidth(row: dict):
    """Achieved TB/s: the row's own, else floor / time at the copy rate (a floor-equivalent bandwidth)."""
    if isinstance(row.get("tbps"), (int, float)):
        return row["tbps"]
    f, t = row.get("floor_us"), row.get("median_us")
    if isinstance(f, (int, float)) and isinstance(t, (int, float)) and t > 0:
        return f / t * COPY_BANDWIDTH_TBPS
    return None


def _group_figure(plt, layout: Layout, rows: list[dict], title: str, path: Path) -> bool:
    pos, labels, log2 = _axis(layout, rows)
    providers = [layout.ours] + baselines(layout, rows)
    color = {p: f"C{i % 10}" for i, p in enumerate(providers)}  # one colour per provider in every panel
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    drawn = False
    for ax, method in zip(axes[:2], METHODS):
        mine = [r for r in rows if row_method(r) == method]
        for p in providers:
            pts = sorted((pos[tuple(r.get(k) for k in layout.case)], r["median_us"]) for r in mine
                         if r.get("provider") == p and isinstance(r.get("median_us"), (int, float)))
            if pts:
                ax.plot(*zip(*pts), marker="o", color=color[p], lw=2.2 if p == layout.ours else 1.2, label=p)
                drawn = True
        floor = sorted({(pos[tuple(r.get(k) for k in layout.case)], r["floor_us"]) for r in mine
                        if isinstance(r.get("floor_us"), (int, float))})
        if floor:
            ax.plot(*zip(*floor), "k--", lw=1, label="floor")
        ax.set_title(f"latency, {method}")
        ax.set_ylabel("us per call")
        ax.set_yscale("log")
    ax = axes[2]
    for method, style in zip(METHODS, ("-", ":")):
        for p in providers:
            pts = sorted((pos[tuple(r.get(k) for k in layout.case)], _bandwidth(r)) for r in rows
                         if r.get("provider") == p and row_method(r) == method and _bandwidth(r) is not None)
            if pts:
                ax.plot(*zip(*pts), style, marker=".", color=color[p], label=f"{p} {method}")
    ax.axhline(COPY_BANDWIDTH_TBPS, color="k", ls="--", lw=1, label=f"copy rate {COPY_BANDWIDTH_TBPS} TB/s")
    ax.set_title("achieved bandwidth")
    ax.set_ylabel("TB/s")
    for ax in axes:
        if log2:
            ax.set_xscale("log", base=2)
        elif labels:
            ax.set_xticks(range(len(labels)), labels, rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("/".join(layout.case))
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if drawn:
        fig.savefig(path, dpi=70)
    plt.close(fig)
    return drawn


def _error_figure(plt, layout: Layout, rows: list[dict], title: str, path: Path) -> bool:
    """Max error per (precision, provider) over the layout's rows (1 - cosine for a cosine field)."""
    def err(r):
        v = r.get(layout.error)
        if not isinstance(v, (int, float)):
            return None
        return max(1.0 - v, 1e-12) if layout.error == "cosine" else max(abs(v), 1e-12)

    worst: dict[tuple, float] = {}
    for r in rows:
        e = err(r)
        if e is not None:
            key = (str(r.get(layout.precision or "provider")), str(r.get("provider")))
            worst[key] = max(worst.get(key, 0.0), e)
    if not worst:
        return False
    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(worst) + 2), 3.6))
    keys = sorted(worst, key=lambda k: (k[0], k[1] != layout.ours, k[1]))
    ax.bar(range(len(keys)), [worst[k] for k in keys],
           color=["tab:blue" if k[1] == layout.ours else "tab:gray" for k in keys])
    ax.set_xticks(range(len(keys)), [k[0] if k[0] == k[1] else f"{k[0]}\n{k[1]}" for k in keys], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel(("1 - cosine" if layout.error == "cosine" else f"max {layout.error}") + " (worst case)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(path, dpi=70)
    plt.close(fig)
    return True


@contextlib.contextmanager
def _without_broken_ipython():
    """matplotlib's canvas reads sys.modules["IPython"].version_info whenever IPython was imported; an
    IPython without it (SGLang's trimmed H200 bundle ships one, imported with SGLang) made every figure
    raise AttributeError. Hide such a module while plotting."""
    mod = sys.modules.get("IPython")
    broken = mod is not None and not hasattr(mod, "version_info")
    if broken:
        del sys.modules["IPython"]
    try:
        yield
    finally:
        if broken:
            sys.modules["IPython"] = mod


def write_plots(ops: dict, folder: Path, report_root: Path) -> tuple[dict[tuple, str], str | None]:
    """Every plot of `ops` (op -> OpResults) into `folder`; ({(op, layout title, split | "error"): path
    relative to report_root}, None), ({}, why) when matplotlib is missing, or (the plots made, why) when a
    figure failed: a plot never fails the report."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}, MISSING
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[tuple, str] = {}
    failed: list[str] = []

    def figure(key, make, path, *args):
        try:
            if make(plt, *args, path):
                out[key] = path.relative_to(report_root).as_posix()
        except Exception as e:  # noqa: BLE001 -- named in the summary, the tables still stand
            plt.close("all")
            failed.append(f"{path.name}: {type(e).__name__}: {e}")

    with _without_broken_ipython():
        for op, res in ops.items():
            for n, layout in enumerate(layouts_for(op, res.rows, res.layouts)):
                chosen = [r for r in select(layout, res.rows) if isinstance(r.get("median_us"), (int, float))]
                for values, rows in groups(layout, chosen):
                    label = split_label(layout, values)
                    title = f"{res.title}: {layout.title}" + (f", {label}" if label else "")
                    figure((op, layout.title, values), _group_figure, folder / f"{_slug(op, n, label or 'all')}.png",
                           layout, rows, title)
                if layout.error:
                    figure((op, layout.title, "error"), _error_figure, folder / f"{_slug(op, n, 'error')}.png",
                           layout, chosen, f"{res.title}: error against precision")
    if failed:
        return out, f"{len(failed)} plot(s) failed, first: {failed[0]}"
    return out, None
