"""How hpc-bench lays out each operator's results rows as tables and plots.

A layout is data about the shared results format (field names of the rows). Each operator's suite declares
its own (`BenchSuite.layouts`, found through the `hpc_ops.bench` entry points), so hpc-common names none of
its dependents; a results file whose suite is not installed, or declares none, gets a layout built from its
rows (`generic_layout`), so any rows are still tabulated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .results import OPTIONAL_FIELDS

METHODS = ("cold", "rotation")
# Fields that are measurements or bookkeeping, never part of a case's name.
NOT_CASE_FIELDS = frozenset(OPTIONAL_FIELDS) | {"provider", "method", "median_us", "us", "copies", "timing", "impl",
                                                "pct_of_copy", "bitwise", "top8_agree", "greedy_match", "bytes"}


@dataclass(frozen=True)
class Layout:
    title: str                                  # the section's heading
    case: tuple[str, ...]                       # the fields naming a table row, in order
    split: tuple[str, ...] = ()                 # one table per distinct value of these fields
    where: dict = field(default_factory=dict)   # only rows whose fields have these values
    providers: tuple[str, ...] | None = None    # only these providers (None: all but `hide`)
    hide: tuple[str, ...] = ()                  # providers left out
    ours: str = "ours"                          # the provider the speed-ups are taken against
    show: tuple[str, ...] = ()                  # fields of ours' row shown as columns (errors, parity)
    error: str | None = None                    # the field plotted against precision ("cosine": 1 - cosine)
    precision: str | None = None                # the field naming the precision on that plot ("provider" allowed)

    @property
    def x(self) -> str:
        """The plots' x axis: the last case field (case / M / T / batch)."""
        return self.case[-1]


def generic_layout(op: str, rows: list[dict]) -> tuple[Layout, ...]:
    """A layout for rows no installed suite describes: every field that is not a measurement names the case."""
    case = tuple(dict.fromkeys(k for r in rows for k in r if k not in NOT_CASE_FIELDS)) or ("provider",)
    return (Layout(op, case=case),)


def layouts_for(op: str, rows: list[dict], declared: tuple = ()) -> tuple[Layout, ...]:
    """The suite's declared layouts of `op`, else one built from the rows."""
    return tuple(declared) or generic_layout(op, rows)


def row_method(row: dict) -> str:
    """A row's timing method; rows written before the `method` field are rotation when timed back to back."""
    if row.get("method") in METHODS:
        return row["method"]
    return "rotation" if row.get("timing") == "back_to_back" else "cold"


def select(layout: Layout, rows: list[dict]) -> list[dict]:
    """The rows a layout tabulates."""
    out = []
    for r in rows:
        if any(r.get(k) != v for k, v in layout.where.items()):
            continue
        p = r.get("provider")
        if layout.providers is not None and p not in layout.providers:
            continue
        if p in layout.hide:
            continue
        out.append(r)
    return out


def groups(layout: Layout, rows: list[dict]) -> list[tuple[tuple, list[dict]]]:
    """(split values, rows) per table, in first-seen order."""
    keyed: dict[tuple, list[dict]] = {}
    for r in rows:
        keyed.setdefault(tuple(r.get(k) for k in layout.split), []).append(r)
    return list(keyed.items())


def split_label(layout: Layout, values: tuple) -> str:
    """'Hq=8 Hkv=1 kv_dtype=fp8' style label of one table, '' without split fields."""
    if tuple(layout.split[:2]) == ("Hq", "Hkv"):
        rest = " ".join(str(v) for v in values[2:])
        return f"{values[0]}/{values[1]} heads" + (f", {rest}" if rest else "")
    return ", ".join(f"{k} {v}" for k, v in zip(layout.split, values))


def baselines(layout: Layout, rows: list[dict]) -> list[str]:
    """Every provider of the rows other than ours, in first-seen order."""
    return [p for p in dict.fromkeys(r.get("provider") for r in rows) if p is not None and p != layout.ours]
