"""report.md of an hpc-bench run: a summary (what ran, what was skipped and why), the CPU checks, and per
operator one table per layout group and timing method, each row with its floor and ours' speed-up over
every baseline (baseline time / ours; above 1 ours is faster)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .layouts import METHODS, Layout, baselines, groups, layouts_for, row_method, select, split_label


@dataclass
class OpResults:
    op: str
    title: str
    rows: list[dict]
    meta: dict
    source: str                                  # the results file, relative to the report folder
    layouts: tuple = ()                          # the suite's (BenchSuite.layouts); none: built from the rows


@dataclass
class ReportData:
    origin: str                                  # one sentence: how these numbers were produced
    machine: list[str]                           # lines describing the machine and software
    ops: dict[str, OpResults] = field(default_factory=dict)
    status: list[tuple[str, str, str]] = field(default_factory=list)    # (op, status, detail)
    skipped: list[tuple[str, str]] = field(default_factory=list)        # (what, why)
    checks: list[dict] = field(default_factory=list)                    # CPU check rows, each with "op"
    plots: dict[tuple, str] = field(default_factory=dict)               # (op, layout title, split) -> path
    notes: list[str] = field(default_factory=list)                      # e.g. the kernel build's summary


def cell(text) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def fmt_us(v) -> str:
    if not isinstance(v, (int, float)):
        return "-"
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def fmt_field(name: str, v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if not isinstance(v, float):
        return "-" if v is None else str(v)
    if name == "cosine" or name.endswith("agree"):
        return f"{v:.6f}"
    if name.startswith("pct"):
        return f"{v:.0f} %"
    return f"{v:.1e}" if (v != 0 and (abs(v) < 1e-2 or abs(v) >= 1e5)) else f"{v:.4g}"


def _key(layout: Layout, row: dict) -> tuple:
    return tuple(row.get(k) for k in layout.case)


def table_lines(layout: Layout, rows: list[dict], method: str) -> list[str]:
    """One Markdown table of a layout group's rows timed by `method`; [] when there are none."""
    mine = [r for r in rows if row_method(r) == method]
    if not mine:
        return []
    base = baselines(layout, mine)
    by = {(_key(layout, r), r.get("provider")): r for r in reversed(mine)}  # first row wins
    keys = list(dict.fromkeys(_key(layout, r) for r in mine))
    has_floor = any(isinstance(r.get("floor_us"), (int, float)) for r in mine)
    shown = [f for f in layout.show if any(f in r for r in mine)]
    head = list(layout.case) + (["floor us"] if has_floor else []) + [f"{layout.ours} us" + (" (% of floor)" if has_floor else "")]
    for b in base:
        head += [f"{b} us", f"{b} / {layout.ours}"]
    head += [f"{layout.ours} {f}" for f in shown]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in keys:
        ours = by.get((key, layout.ours))
        any_row = ours or next(r for r in mine if _key(layout, r) == key)
        cells = [fmt_field(k, v) for k, v in zip(layout.case, key)]
        floor = any_row.get("floor_us")
        if has_floor:
            cells.append(fmt_us(floor))
        t = ours.get("median_us") if ours else None
        pct = f" ({100 * floor / t:.0f} %)" if isinstance(floor, (int, float)) and isinstance(t, (int, float)) and t else ""
        cells.append(fmt_us(t) + pct)
        for b in base:
            other = by.get((key, b))
            tb = other.get("median_us") if other else None
            cells.append(fmt_us(tb))
            ok = isinstance(tb, (int, float)) and isinstance(t, (int, float)) and t > 0
            cells.append(f"{tb / t:.2f}x" if ok else "-")
        cells += [fmt_field(f, ours.get(f)) if ours else "-" for f in shown]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def op_section(res: OpResults, plots: dict[tuple, str]) -> list[str]:
    m = res.meta
    src = f"`{res.source}`" + (f", commit {str(m.get('commit'))[:12]}" if m.get("commit") else "") + \
        (f", {m.get('gpu')}" if m.get("gpu") else "") + (f", {m.get('date')}" if m.get("date") else "")
    out = [f"## {res.title}", "", f"Rows: {src}.", ""]
    for layout in layouts_for(res.op, res.rows, res.layouts):
        chosen = select(layout, res.rows)
        if not chosen:
            continue
        for values, rows in groups(layout, chosen):
            label = split_label(layout, values)
            for method in METHODS:
                table = table_lines(layout, rows, method)
                if table:
                    out += [f"### {layout.title}" + (f": {label}" if label else "") + f" ({method})", ""] + table + [""]
            plot = plots.get((res.op, layout.title, values))
            if plot:
                out += [f"![{layout.title} {label}]({plot})", ""]
        plot = plots.get((res.op, layout.title, "error"))
        if plot:
            out += [f"![{layout.title}: error against precision]({plot})", ""]
    return out


def render(data: ReportData) -> str:
    out = ["# hpc-ops benchmark report", "", data.origin, ""] + [f"- {line}" for line in data.machine] + [""]
    out += ["Timing methods (field `method`): **cold**, one call in a CUDA graph after a 128 MB written L2 flush, "
            "median of >= 50 replays; **rotation**, distinct input copies (>= 256 MB together) called back to back in "
            "one graph, time per call. `% of floor` = floor / time (floor: the call's bytes over 4.27 TB/s or its "
            "FLOPs over the matrix rate). `X / ours` = X's time over ours: above 1, ours is faster.", ""]
    out += ["## Summary", "", "| operator | status | detail |", "|---|---|---|"]
    out += [f"| {op} | {cell(status)} | {cell(detail)} |" for op, status, detail in data.status]
    out.append("")
    out += [f"- {note}" for note in data.notes]
    if data.skipped:
        out += ["", "Skipped (what was not run, and why):", ""] + [f"- {what}: {why}" for what, why in data.skipped]
    out.append("")
    if data.checks:
        bad = sum(not c.get("ok") for c in data.checks)
        out += ["## CPU checks (references on small shapes, against each other)", "",
                f"{len(data.checks) - bad} of {len(data.checks)} checks pass.", "",
                "| operator | check | case | max error | tolerance | ok |", "|---|---|---|---|---|---|"]
        for c in data.checks:
            case = ", ".join(f"{k} {v}" for k, v in c.items() if k not in ("op", "check", "max_err", "tol", "ok"))
            out.append(f"| {c.get('op')} | {cell(c.get('check'))} | {cell(case)} | {fmt_field('err', c.get('max_err'))} | "
                       f"{fmt_field('tol', c.get('tol'))} | {'yes' if c.get('ok') else '**NO**'} |")
        out.append("")
    for res in data.ops.values():
        out += op_section(res, data.plots)
    return "\n".join(out).rstrip() + "\n"
