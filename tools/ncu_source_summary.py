"""Summarise ncu's per-instruction warp-stall sampling (the source page as CSV) by kernel and by
SASS address range, with the instructions that hold the most samples.

    ncu --import rep.ncu-rep --page source --csv --print-source sass > src.csv
    python3 tools/ncu_source_summary.py src.csv [--ranges prologue:0:f50,producer:fe00:11300] [--top 15]

Addresses are offsets from the kernel's first instruction (hex); instructions outside every named
range count as "other". Each kernel appears once per profiled launch.
"""

from __future__ import annotations

import argparse
import csv

REASONS = ("barrier", "branch_resolving", "dispatch", "drain", "imc", "lg", "long_sb", "math", "membar", "mio",
           "misc", "no_inst", "not_selected", "selected", "short_sb", "sleep", "tex", "wait")


def kernels(rows):
    """(name, header, data rows) per kernel section of the CSV."""
    starts = [i for i, r in enumerate(rows) if r and r[0] == "Kernel Name"] + [len(rows)]
    for s, e in zip(starts, starts[1:], strict=False):
        yield rows[s][1], rows[s + 1], rows[s + 2:e]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--ranges", default="", help="name:start:end,... (hex offsets, end exclusive)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    ranges = [(n, int(a, 16), int(b, 16)) for n, a, b in (x.split(":") for x in args.ranges.split(",") if x)]
    rows = list(csv.reader(open(args.csv)))
    for name, head, data in kernels(rows):
        col = {k: head.index(f"stall_{k}") for k in REASONS}
        executed = head.index("Instructions Executed")
        base = int(data[0][0], 16)
        recs = []
        for r in data:
            stalls = {k: float(r[col[k]] or 0) for k in REASONS}
            recs.append((int(r[0], 16) - base, r[1].strip(), stalls, r[executed]))
        total = sum(sum(s.values()) for _, _, s, _ in recs) or 1.0
        by_reason = {k: sum(s[k] for _, _, s, _ in recs) for k in REASONS}
        print(f"== {name}\n  samples {total:.0f}: " + ", ".join(
            f"{k} {v / total * 100:.1f} %" for k, v in sorted(by_reason.items(), key=lambda x: -x[1]) if v / total >= 0.01))
        regions = {}
        for addr, _, stalls, _ in recs:
            region = next((n for n, a, b in ranges if a <= addr < b), "other")
            acc = regions.setdefault(region, dict.fromkeys(REASONS, 0.0))
            for k in REASONS:
                acc[k] += stalls[k]
        for region, acc in regions.items():
            n = sum(acc.values())
            top = ", ".join(f"{k} {v:.0f}" for k, v in sorted(acc.items(), key=lambda x: -x[1])[:5] if v)
            print(f"  {region:12s} {n:7.0f} ({n / total * 100:4.1f} %)  {top}")
        print("  instructions with the most samples (offset, SASS, samples, executed, main reasons):")
        for addr, ins, stalls, ex in sorted(recs, key=lambda x: -sum(x[2].values()))[:args.top]:
            main_reasons = ", ".join(f"{k} {v:.0f}" for k, v in sorted(stalls.items(), key=lambda x: -x[1])[:2] if v)
            print(f"    {addr:05x} {ins[:58]:58s} {sum(stalls.values()):5.0f} {ex:>6}  {main_reasons}")


if __name__ == "__main__":
    main()
