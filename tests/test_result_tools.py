"""The tools that turn probe runs into results (tools/probe_results.py, tools/fixed_cost.py): they write
the shared results format, and the rows keep what tells the runs apart."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENV_PATH = str(ROOT / "packages" / "hpc-common" / "src")


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "tools" / tool), *args], capture_output=True, text=True,
                          env={"PYTHONPATH": ENV_PATH, "PATH": "/usr/bin:/bin"}, timeout=120)


def _bench_run(path: Path, commit: str, times: list[float]) -> None:
    (path / "h200").mkdir(parents=True)
    doc = {"meta": {"gpu": "NVIDIA H200", "commit": commit, "date": "2026-11-30T00:00:00Z", "torch": "2.11",
                    "cuda": "13.0", "nvcc": "13.0", "timing": "t", "flush": "write"},
           "rows": [{"repeat": i, "case": "256x4K", "provider": "ours_plan", "median_us": t} for i, t in enumerate(times)]}
    (path / "h200" / "plan.json").write_text(json.dumps(doc))


def test_probe_results_rows_and_checks(tmp_path):
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\n".join([
        "not json: a compiler line",
        json.dumps({"round": 0, "case": "a", "median_us": 5.0}),
        json.dumps({"round": 0, "case": "b", "median_us": 6.0}),
        json.dumps({"check": "a", "tables_equal_library": True}),
    ]) + "\n")
    res = _run("probe_results.py", "--jsonl", str(jsonl), "--op", "probe_x", "--commit", "abc", "--timing", "t",
               "--note", "n", "--out-dir", str(tmp_path))
    assert res.returncode == 0, res.stderr
    doc = json.loads((tmp_path / "probe_x.json").read_text())
    assert [(r["provider"], r["median_us"]) for r in doc["rows"]] == [("a", 5.0), ("b", 6.0)]
    assert doc["meta"]["checks"] == [{"check": "a", "tables_equal_library": True}]
    assert (tmp_path / "probe_x.md").is_file()


def test_fixed_cost_recovers_a_known_line(tmp_path):
    """Rows built as T = F + floor / r at 64 and 256 MB (two rounds each, M following the size) give back F and r per
    shape; a shape with one size, and calls under 64 MB, are left out."""
    rows = []
    for mode, fixed, rate in (("per_token", 6.0, 1.02), ("group128", 8.0, 0.9)):
        for mb, m in ((1, 128), (64, 8192), (256, 32768)):
            floor = 0.3685 * mb
            t = fixed + floor / rate if mb >= 64 else 3.0
            rows += [{"mode": mode, "M": m, "N": 4096, "input_mb": mb, "provider": "ours", "round": k,
                      "median_us": t + (0.01 if k else -0.01), "floor_us": floor} for k in (0, 1)]
    rows.append({"mode": "odd", "M": 5, "N": 4095, "input_mb": 64, "provider": "ours", "median_us": 30.0, "floor_us": 23.6})
    src = tmp_path / "r.json"
    src.write_text(json.dumps({"meta": {}, "rows": rows}))
    res = _run("fixed_cost.py", str(src))
    assert res.returncode == 0, res.stderr
    lines = [[c.strip() for c in line.strip("|").split("|")] for line in res.stdout.splitlines()]
    head, body = lines[0], lines[2:]
    table = {row[head.index("mode")]: dict(zip(head, row)) for row in body}
    assert set(table) == {"per_token", "group128"}
    assert (table["per_token"]["sizes"], table["per_token"]["rate_pct"], table["per_token"]["fixed_us"]) == (
        "64/256", "102.0", "6.0")
    assert (table["group128"]["rate_pct"], table["group128"]["fixed_us"]) == ("90.0", "8.0")
