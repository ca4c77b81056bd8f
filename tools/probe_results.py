"""Turn a standalone probe's JSON lines (tools/probes/<op>/*.cu, run on the device) into the results
format (benchmarks/results/<gpu>/<op>.{json,md}). Lines with a "case" are rows (provider = the case,
or --provider-key's value); every other line (checks, stamps) goes into meta["checks"].

    python tools/probe_results.py --jsonl OUT/bare_stream_bound.jsonl --op attention_bare_stream_bound \
        --commit 2712eece889b --timing "..." --note "..."
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

from hpc_common.bench.results import dump_results, markdown_table


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jsonl", type=Path, required=True)
    ap.add_argument("--op", required=True, help="results name, e.g. attention_plan_probe")
    ap.add_argument("--commit", required=True, help="the commit whose tree the probe was built from")
    ap.add_argument("--timing", required=True, help="how the probe times (meta['timing'])")
    ap.add_argument("--note", default="", help="what the run shows (meta['note'])")
    ap.add_argument("--title", default="", help="Markdown heading after the op name")
    ap.add_argument("--provider-key", default="case")
    ap.add_argument("--gpu", default="NVIDIA H200")
    ap.add_argument("--out-dir", type=Path, default=Path("benchmarks/results/h200"))
    args = ap.parse_args()

    rows, checks = [], []
    for line in args.jsonl.read_text().splitlines():
        if not line.strip().startswith("{"):
            continue
        rec = json.loads(line)
        if "case" in rec:
            rec["provider"] = str(rec[args.provider_key])
            rows.append(rec)
        else:
            checks.append(rec)
    meta = {"gpu": args.gpu, "commit": args.commit,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "torch": "none (standalone nvcc program)", "cuda": "13.0", "nvcc": "13.0 (device machine)",
            "timing": args.timing}
    if args.note:
        meta["note"] = args.note
    if checks:
        meta["checks"] = checks
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / f"{args.op}.json").write_text(dump_results(meta, rows))

    cols = [k for k in rows[0] if k != "provider"] if rows else []
    md = [f"# {args.op}" + (f": {args.title}" if args.title else ""), "",
          f"GPU {args.gpu}, commit {args.commit}, {meta['date']}. {args.timing}" + (f" {args.note}" if args.note else ""),
          "", *markdown_table(rows, cols)]
    if checks:
        md += ["", "Checks:", ""] + [f"- `{json.dumps(c)}`" for c in checks]
    (args.out_dir / f"{args.op}.md").write_text("\n".join(md) + "\n")
    print(f"wrote {args.out_dir / args.op}.{{json,md}}: {len(rows)} rows, {len(checks)} checks")


if __name__ == "__main__":
    main()
