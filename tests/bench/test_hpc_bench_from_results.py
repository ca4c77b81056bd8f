"""hpc-bench --from-results: report.md, plots and results copies from a recorded results folder, no GPU."""

import json
from pathlib import Path

import pytest

from hpc_common.bench import cli
from hpc_common.bench.layouts import Layout
from hpc_common.bench.report_md import table_lines

REPO = Path(__file__).resolve().parents[2]
RECORDED = REPO / "benchmarks" / "results" / "h200"
PNG = b"\x89PNG\r\n\x1a\n"


def _build(tmp_path, folder, *args):
    out = tmp_path / "report"
    assert cli.main(["--from-results", str(folder), "--out", str(out), *args]) == 0
    return out, (out / "report.md").read_text()


def _ours(rows, **want):
    return next(r for r in rows if r.get("provider") == "ours" and all(r.get(k) == v for k, v in want.items()))


def test_report_from_the_recorded_h200_results(tmp_path):
    out, md = _build(tmp_path, RECORDED)
    assert "from recorded results: no benchmark ran" in md
    for title in ("## Decode attention", "## Fused attention prologue", "## Router GEMM", "## FP8 quantisation",
                  "## Fused MoE"):
        assert title in md
    e2e = json.loads((RECORDED / "e2e.json").read_text())["rows"]
    assert f"| e2e | recorded | {len(e2e)} rows from `results/e2e.json`" in md
    assert "## End-to-end decode step" in md
    # A row of each of three operators, with the value the recorded file holds.
    decode = json.loads((RECORDED / "decode.json").read_text())["rows"]
    r = _ours(decode, case="1x128K+31x4K", Hq=8, Hkv=1, kv_dtype="fp8", method="cold")
    assert f"| 1x128K+31x4K | {r['floor_us']:.1f} | {r['median_us']:.1f} (" in md
    router = json.loads((RECORDED / "router_gemm.json").read_text())["rows"]
    r = _ours(router, shape="generic", M=4096, method="rotation")
    cublas = next(x for x in router if x["provider"] == "cublas_fp32" and x["shape"] == "generic" and x["M"] == 4096
                  and x["method"] == "rotation")
    assert f"| {cublas['median_us']:.1f} | {cublas['median_us'] / r['median_us']:.2f}x |" in md
    assert "### Fused MoE: model hy3_tp8, dtype fp8_block (cold)" in md
    for name in ("decode", "prologue", "router_gemm", "fp8_quant", "moe"):
        assert (out / "results" / f"{name}.json").read_bytes() == (RECORDED / f"{name}.json").read_bytes()
    assert not (out / "results" / "router_gemm_paths.json").exists()  # probe files are not operators' tables
    pngs = {p.name for p in (out / "plots").glob("*.png")}
    assert {"decode_0_8_1_heads_fp8.png", "decode_0_error.png", "router_gemm_0_error.png", "moe_0_error.png"} <= pngs
    assert all((out / "plots" / p).read_bytes()[:8] == PNG for p in pngs)
    assert "](plots/decode_0_8_1_heads_fp8.png)" in md


def test_ops_and_no_plots(tmp_path):
    out, md = _build(tmp_path, RECORDED, "--ops", "router", "--no-plots")
    assert "## Router GEMM" in md and "## Decode attention" not in md
    assert not (out / "plots").exists()
    assert sorted(p.name for p in (out / "results").iterdir()) == ["router_gemm.json"]


def _e2e_rows():
    return [dict(model="hy3_tp8", batch=b, Hq=8, Hkv=1, kv_dtype="fp8", provider=p, method=m, median_us=us * b,
                 greedy_match=(b != 64)) for b in (1, 64) for m in ("cold", "rotation")
            for p, us in (("ours", 100.0), ("baseline", 150.0))]


def test_e2e_section(tmp_path):
    folder = tmp_path / "recorded"
    folder.mkdir()
    (folder / "e2e_hy3.json").write_text(json.dumps({"meta": {"commit": "abc"}, "rows": _e2e_rows()}))
    (folder / "decode.json").write_text(json.dumps({"meta": {}, "rows": []}))
    out, md = _build(tmp_path, folder, "--ops", "e2e")
    assert "## End-to-end decode step" in md and "## Decode attention" not in md
    assert "| batch | Hq | Hkv | kv_dtype | ours us | baseline us | baseline / ours | ours greedy_match |" in md
    assert "| 1 | 8 | 1 | fp8 | 100.0 | 150.0 | 1.50x | yes |" in md
    assert "| 64 | 8 | 1 | fp8 | 6400.0 | 9600.0 | 1.50x | no |" in md
    assert (out / "results" / "e2e_hy3.json").is_file()


def test_broken_results_file_is_named(tmp_path):
    folder = tmp_path / "recorded"
    folder.mkdir()
    (folder / "moe.json").write_text("{not json")
    out, md = _build(tmp_path, folder)
    assert "- moe.json: " in md and "not a results file" in md
    assert "| moe | no results |" in md


def test_missing_folder_names_the_argument(tmp_path):
    with pytest.raises(SystemExit, match="--from-results"):
        cli.main(["--from-results", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")])


def test_table_rows_carry_floor_and_speedups():
    layout = Layout("t", case=("T",), show=("cosine",))
    rows = [dict(T=1, provider="ours", method="cold", median_us=10.0, floor_us=5.0, cosine=0.99999),
            dict(T=1, provider="triton", method="cold", median_us=30.0, floor_us=5.0),
            dict(T=1, provider="torch", method="cold", median_us=15.0, floor_us=5.0),
            dict(T=1, provider="ours", method="rotation", median_us=8.0)]
    lines = table_lines(layout, rows, "cold")
    assert lines[0] == "| T | floor us | ours us (% of floor) | triton us | triton / ours | torch us | torch / ours | ours cosine |"
    assert lines[2] == "| 1 | 5.00 | 10.0 (50 %) | 30.0 | 3.00x | 15.0 | 1.50x | 0.999990 |"
    assert table_lines(layout, rows, "rotation")[2] == "| 1 | 8.00 |"


def test_plots_survive_an_ipython_without_version_info(tmp_path, monkeypatch):
    # SGLang's trimmed H200 bundle ships an IPython module without version_info; once SGLang imported it,
    # every matplotlib figure raised AttributeError and hpc-bench failed after its benchmarks.
    import sys
    import types

    monkeypatch.setitem(sys.modules, "IPython", types.ModuleType("IPython"))
    out, md = _build(tmp_path, RECORDED, "--ops", "router")
    assert sys.modules["IPython"].__name__ == "IPython"  # put back after plotting
    assert any(p.read_bytes()[:8] == PNG for p in (out / "plots").glob("router_gemm_*.png"))
    assert "plot(s) failed" not in md
