"""Merge the runs of tools/ab_bench.sh (OUT/{A1,B,A2}/<gpu>/<op>.json, unpacked from ab_results.tgz) into one
results file (benchmarks/results/<gpu>/<name>.{json,md}): every row keeps its fields and gains `process`
(the run's order in the call), `side` (old / new) and `commit` (the tree that run used).

    python tools/ab_results.py --name decode_attention_plan_totals_warp_ab --op decode_attention_plan_spread \
        --note "..." /tmp/ab/A1 /tmp/ab/B /tmp/ab/A2 [call=2 /tmp/ab2/A1 ...]

Run directories named A* are the old side, B* the new; several calls go in one file with call=N before
each call's directories (the rows gain `call`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from hpc_common.bench.results import dump_results, markdown_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--name", required=True, help="the merged results' name")
    ap.add_argument("--op", required=True, help="the benchmark's results name inside each run directory")
    ap.add_argument("--note", required=True, help="what the A/B compares and shows (meta['note'])")
    ap.add_argument("--gpu-dir", default="h200")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/h200"))
    ap.add_argument("runs", nargs="+", help="run directories, in process order; call=N starts a call")
    args = ap.parse_args()

    rows, metas, call, process = [], [], None, 0
    for item in args.runs:
        if item.startswith("call="):
            call, process = int(item[5:]), 0
            continue
        run = Path(item)
        doc = json.loads((run / args.gpu_dir / f"{args.op}.json").read_text())
        side = "old" if run.name.startswith("A") else "new"
        metas.append(doc["meta"])
        for row in doc["rows"]:
            head = {"call": call} if call is not None else {}
            rows.append({**head, "process": process, "side": side, "commit": doc["meta"]["commit"], **row})
        process += 1
    if not rows:
        raise SystemExit("ab_results: no rows found")
    commits = sorted({(r["side"], r["commit"]) for r in rows})
    meta = {k: metas[0][k] for k in ("gpu", "date", "torch", "cuda", "nvcc", "timing", "flush") if k in metas[0]}
    meta["commit"] = ", ".join(f"{c} ({s})" for s, c in commits)
    meta["note"] = args.note
    path = args.out_dir / f"{args.name}.json"
    path.write_text(dump_results(meta, rows))
    cols = list(rows[0])
    md = [f"# {args.name}", "", f"GPU {meta['gpu']}, {meta['date']}, torch {meta.get('torch')}. {args.note}", "",
          *markdown_table(rows, cols)]
    (args.out_dir / f"{args.name}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {path} ({len(rows)} rows)")


if __name__ == "__main__":
    main()
