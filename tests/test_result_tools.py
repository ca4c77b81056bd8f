"""The tools that turn device runs into committed results (tools/ab_results.py, tools/probe_results.py,
tools/save_run.py, tools/fixed_cost.py): they
write the shared results format, and the rows keep what tells the runs apart."""

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


def test_ab_results_merges_runs_in_order_with_their_side_and_commit(tmp_path):
    for call, base in (("1", 5.0), ("2", 6.0)):
        _bench_run(tmp_path / call / "A1", "old1", [base, base + 0.1])
        _bench_run(tmp_path / call / "B", "new1+wip", [base - 1, base - 0.9])
        _bench_run(tmp_path / call / "A2", "old1", [base + 0.2, base + 0.3])
    out = tmp_path / "out"
    out.mkdir()
    res = _run("ab_results.py", "--name", "x_ab", "--op", "plan", "--note", "what it shows", "--out-dir", str(out),
               "call=1", *(str(tmp_path / "1" / r) for r in ("A1", "B", "A2")),
               "call=2", *(str(tmp_path / "2" / r) for r in ("A1", "B", "A2")))
    assert res.returncode == 0, res.stderr
    doc = json.loads((out / "x_ab.json").read_text())
    rows = doc["rows"]
    assert len(rows) == 12
    assert [(r["call"], r["process"], r["side"]) for r in rows[:6]] == [
        (1, 0, "old"), (1, 0, "old"), (1, 1, "new"), (1, 1, "new"), (1, 2, "old"), (1, 2, "old")]
    assert {r["commit"] for r in rows if r["side"] == "new"} == {"new1+wip"}
    assert [r["median_us"] for r in rows if r["call"] == 2 and r["side"] == "new"] == [5.0, 5.1]
    assert doc["meta"]["note"] == "what it shows" and "old1 (old)" in doc["meta"]["commit"]
    md = (out / "x_ab.md").read_text()
    assert "| call | process | side | commit |" in md and md.count("\n| 2 |") == 6


def test_ab_results_fails_without_rows(tmp_path):
    res = _run("ab_results.py", "--name", "x", "--op", "plan", "--note", "n", "--out-dir", str(tmp_path),
               str(tmp_path / "A1"))
    assert res.returncode != 0


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


def test_save_run_keeps_rows_and_meta_and_adds_the_note(tmp_path):
    _bench_run(tmp_path / "run", "abc123", [5.0, 5.1])
    doc = json.loads((tmp_path / "run" / "h200" / "plan.json").read_text())
    doc["rows"][1]["variant_only"] = 1  # a field only some rows have still gets its column
    (tmp_path / "run" / "h200" / "plan.json").write_text(json.dumps(doc))
    out = tmp_path / "out"
    out.mkdir()
    res = _run("save_run.py", "--name", "x_ab", "--note", "what it shows", "--out-dir", str(out),
               str(tmp_path / "run" / "h200" / "plan.json"))
    assert res.returncode == 0, res.stderr
    kept = json.loads((out / "x_ab.json").read_text())
    assert kept["rows"] == doc["rows"]
    assert kept["meta"]["note"] == "what it shows" and kept["meta"]["commit"] == "abc123"
    md = (out / "x_ab.md").read_text()
    assert "what it shows" in md and "commit abc123" in md
    assert "| repeat | case | provider | median_us | variant_only |" in md and md.count("| 256x4K |") == 2


def test_save_run_fails_without_rows(tmp_path):
    src = tmp_path / "empty.json"
    src.write_text(json.dumps({"meta": {"gpu": "g", "commit": "c", "date": "d"}, "rows": []}))
    res = _run("save_run.py", "--name", "x", "--note", "n", "--out-dir", str(tmp_path), str(src))
    assert res.returncode != 0 and "no rows" in res.stderr


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
