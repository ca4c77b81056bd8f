"""Split a benchmark's cold calls into a fixed cost and a streaming rate: rows of one shape and provider at two sizes
give T = F + floor / r (F in us; r as a fraction of the floor's copy rate). Used on bench_fp8_quant.py's 64 and
256 MB rows (FP8_DESIGN.md, "Fixed cost and streaming rate"); any results file whose rows carry `median_us`,
`floor_us` and a size field works.

    python tools/fixed_cost.py benchmarks/results/h200/fp8_quant_fixed_cost_9b020de.json [--size-field input_mb]
        [--varies M] [--min-size 64]

Rows that differ only in the size field, the fields that follow it (--varies: the FP8 rows' M) and the measured
fields form a shape; a shape's repeated rows (rounds) are averaged per size; the smallest and the largest size fit
the line.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean

from hpc_common.bench.results import markdown_table

MEASURED = ("median_us", "floor_us", "tbps", "pct_of_copy", "bitwise", "round", "max_abs_err", "rel_err", "cosine")


def fit(rows: list[dict], size_field: str = "input_mb", varies: tuple[str, ...] = ("M",),
        min_size: float = 64.0) -> list[dict]:
    """One dict per shape with two or more sizes of at least min_size: its fields, `rate_pct` (100 r) and `fixed_us`
    (F). Small calls are left out: their time is mostly launch, off the line the large ones lie on."""
    skip = set(MEASURED) | {size_field, *varies}
    by_shape: dict[tuple, dict[float, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if "median_us" not in r or "floor_us" not in r or float(r.get(size_field, -1)) < min_size:
            continue
        key = tuple(sorted((k, json.dumps(v)) for k, v in r.items() if k not in skip))
        by_shape[key][float(r[size_field])].append(r)
    out = []
    for key, sizes in by_shape.items():
        if len(sizes) < 2:
            continue
        lo, hi = min(sizes), max(sizes)
        t1, t2 = (mean(r["median_us"] for r in sizes[s]) for s in (lo, hi))
        f1, f2 = (mean(r["floor_us"] for r in sizes[s]) for s in (lo, hi))
        if t2 == t1:
            continue
        rate = (f2 - f1) / (t2 - t1)
        out.append({**{k: json.loads(v) for k, v in key}, "sizes": f"{lo:g}/{hi:g}", "rate_pct": round(100 * rate, 1),
                    "fixed_us": round(t1 - f1 / rate, 2)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--size-field", default="input_mb")
    ap.add_argument("--varies", nargs="*", default=["M"], help="fields that follow the size (not part of a shape)")
    ap.add_argument("--min-size", type=float, default=64.0, help="leave out smaller calls")
    args = ap.parse_args()
    rows = fit(json.loads(args.results.read_text())["rows"], args.size_field, tuple(args.varies), args.min_size)
    if not rows:
        raise SystemExit("fixed_cost: no shape has rows at two sizes")
    print("\n".join(markdown_table(rows)))


if __name__ == "__main__":
    main()
