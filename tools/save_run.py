"""Keep one benchmark run's results (e.g. an in-process A/B of build variants, whose rows already name their
provider) as benchmarks/results/<gpu>/<name>.{json,md}, with what it measured in meta['note'].

    python tools/save_run.py --name fp8_quant_cover_wide_ab_1b62255 --note "..." /work/.device/1/.../fp8_quant.json

tools/ab_results.py is the form for A/Bs of two trees (one process per side).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpc_common.bench.results import dump_results, markdown_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the kept results' name")
    ap.add_argument("--note", required=True, help="what the run compares and shows (meta['note'])")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/h200"))
    ap.add_argument("src", type=Path, help="the run's results JSON")
    args = ap.parse_args()

    doc = json.loads(args.src.read_text())
    meta, rows = doc["meta"], doc["rows"]
    if not rows:
        raise SystemExit(f"save_run: {args.src} has no rows")
    meta["note"] = args.note
    path = args.out_dir / f"{args.name}.json"
    path.write_text(dump_results(meta, rows))
    md = [f"# {args.name}", "", args.note, "",
          f"GPU {meta['gpu']}, commit {meta['commit']}, {meta['date']}, torch {meta.get('torch')}, "
          f"CUDA {meta.get('cuda')}, nvcc {meta.get('nvcc')}", "", *markdown_table(rows)]
    (args.out_dir / f"{args.name}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
