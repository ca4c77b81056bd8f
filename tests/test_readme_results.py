"""The README's results tables are generated from the committed results (tools/readme_results.py)."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("readme_results", REPO / "tools" / "readme_results.py")
rr = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("readme_results", rr)
_spec.loader.exec_module(rr)


def _write(folder: Path, stem: str, rows, commit="abc1234def"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps({"meta": {"commit": commit}, "rows": rows}))


def _decode_row(case, hq, hkv, dt, us, **extra):
    return dict(case=case, Hq=hq, Hkv=hkv, kv_dtype=dt, provider="ours", median_us=us, floor_us=us / 2,
                **extra)


def test_readme_section_is_generated_from_committed_results():
    readme = (REPO / "README.md").read_text()
    assert rr.generated_section(readme) == rr.render(rr.DEFAULT_RESULTS), (
        "README.md results section differs from the committed results: run python tools/readme_results.py")


def test_every_table_names_its_files():
    body = rr.render(rr.DEFAULT_RESULTS)
    for line in body.splitlines():
        if line.startswith("Sources: "):
            for part in line[len("Sources: "):].rstrip(".").split("; "):
                method, _, where = part.partition(": ")
                assert method in rr.METHODS
                if where != rr.NOT_MEASURED:
                    name = where.split("`")[1]
                    assert (REPO / name).is_file(), name


def test_empty_folder_reads_not_measured(tmp_path):
    body = rr.render(tmp_path)
    assert body.splitlines().count(rr.NOT_MEASURED) == len(rr.TABLES) - 1  # no e2e table without e2e rows
    assert "End-to-end" not in body


def test_new_names_with_method_field(tmp_path):
    rows = [_decode_row("64x4K", 8, 1, "bf16", 40.0, method="cold"),
            _decode_row("64x4K", 8, 1, "bf16", 30.0, method="rotation"),
            dict(case="256x4K", Hq=8, Hkv=1, kv_dtype="any", provider="ours_plan", median_us=4.5, method="cold")]
    _write(tmp_path, "decode", rows, commit="1234567890")
    # An old-named file is ignored once the new one holds both methods.
    _write(tmp_path, "decode_attention", [_decode_row("64x4K", 8, 1, "bf16", 99.0)])
    body = rr.render(tmp_path)
    assert "| 64x4K | 40.0 (50 %) / 30.0 (50 %) | - / - |" in body
    assert "99.0" not in body
    assert "8/1 4.50 us" in body
    assert "cold: `" in body and "decode.json` (commit 1234567)" in body


def test_old_names_without_method(tmp_path):
    _write(tmp_path, "decode_attention", [_decode_row("64x0.5K", 64, 8, "fp8", 20.0)])
    _write(tmp_path, "decode_attention_rotation", [_decode_row("64x0.5K", 64, 8, "fp8", 16.0)])
    fp8 = dict(mode="per_token", M=8192, N=4096, dtype="bfloat16", median_us=30.0, pct_of_copy=80.0)
    _write(tmp_path, "fp8_quant", [dict(fp8, provider="ours"),
                                   dict(fp8, provider="ours_back_to_back", timing="back_to_back",
                                        median_us=25.0, pct_of_copy=93.0)])
    body = rr.render(tmp_path)
    assert "| 64x0.5K | - / - | - / - | - / - | 20.0 (50 %) / 16.0 (50 %) |" in body
    assert "decode_attention_rotation.json" in body
    assert "| per_token | 30.0 (80 %) / 25.0 (93 %) | - / - |" in body
    # Router, prologue and MoE have no files here.
    assert body.splitlines().count(rr.NOT_MEASURED) == 3


def test_one_method_only(tmp_path):
    _write(tmp_path, "router_gemm", [dict(shape="generic", M=1, provider="ours", median_us=6.5,
                                          max_abs_err=4e-7)])
    body = rr.render(tmp_path)
    assert "| 1 | 6.50 / n/m | - / n/m | - / n/m | 4.0e-07 |" in body
    assert "rotation: not measured" in body


def test_moe_table(tmp_path):
    rows = [dict(model="hy3_tp8", T=t, dtype=q, provider=p, method=m, median_us=us, floor_us=us / 4)
            for t in (1, 4, 1024) for q in ("bf16", "fp8_block") for p in ("ours", "sglang_triton")
            for m, us in (("cold", 20.0), ("rotation", 12.0))]
    _write(tmp_path, "moe", rows)
    body = rr.render(tmp_path)
    assert "| model | weights | T=1 | T=4 |" in body
    assert "| hy3_tp8 | fp8_block | 20.0 (25 %) / 12.0 (25 %) | 20.0 (25 %) / 12.0 (25 %) |" in body
    assert body.count("| hy3_tp8 |") == 2  # ours only, one row per weight format


def test_moe_cold_only(tmp_path):
    _write(tmp_path, "moe", [dict(shape="hy3_ep8", T=4, quant="bf16", provider="ours", method="cold",
                                  median_us=30.0)])
    assert "| hy3_ep8 | bf16 | 30.0 / n/m |" in rr.render(tmp_path)


def test_prologue_table(tmp_path):
    rows = [dict(part="prologue", T=64, Hq=8, Hkv=1, kv_dtype="fp8", provider=p, method=m, median_us=us, floor_us=2.0)
            for p in ("ours", "unfused") for m, us in (("cold", 8.0), ("rotation", 4.0))]
    rows.append(dict(part="step", case="64x4K", T=64, Hq=8, Hkv=1, kv_dtype="fp8", provider="ours",
                     method="rotation", median_us=99.0, floor_us=20.0))
    _write(tmp_path, "prologue", rows)
    body = rr.render(tmp_path)
    assert "| 64 | - / - | 8.00 (25 %) / 4.00 (50 %) | - / - | - / - |" in body
    assert "99.0" not in body


def test_broken_file_is_skipped(tmp_path):
    (tmp_path / "decode.json").write_text("{not json")
    _write(tmp_path, "decode_attention", [_decode_row("64x4K", 8, 1, "bf16", 40.0)])
    assert "| 64x4K | 40.0 (50 %) / n/m |" in rr.render(tmp_path)


def test_check_and_update(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{rr.BEGIN}\nstale\n{rr.END}\n\ntail\n")
    results = tmp_path / "results"
    _write(results, "router_gemm", [dict(shape="generic", M=16, provider="ours", median_us=9.0)])
    args = ["--readme", str(readme), "--results", str(results)]
    assert rr.main(args + ["--check"]) == 1
    assert rr.main(args) == 0
    assert rr.main(args + ["--check"]) == 0
    text = readme.read_text()
    assert text.startswith("# x\n") and text.endswith(f"{rr.END}\n\ntail\n") and "stale" not in text


def test_e2e_table(tmp_path):
    rows = [dict(model="qwen3_30b_a3b", batch=b, Hq=32, Hkv=4, kv_dtype="fp8", provider=p, method=m, median_us=us,
                 greedy_match=True) for b in (1, 4) for p, us in (("ours", 100.0), ("baseline", 150.0))
            for m in ("cold", "rotation")]
    _write(tmp_path, "e2e_h200", rows)
    body = rr.render(tmp_path)
    assert "| model | heads | KV | batch 1 | batch 4 | greedy match |" in body
    assert "| qwen3_30b_a3b | 32/4 | fp8 | 100.0 / 100.0 (1.50x / 1.50x) | 100.0 / 100.0 (1.50x / 1.50x) | yes |" in body
    assert "e2e_h200.json" in body
    rows[0]["greedy_match"] = False  # one mismatching step shows as "no"
    _write(tmp_path, "e2e_h200", rows)
    assert "| 100.0 / 100.0 (1.50x / 1.50x) | no |" in rr.render(tmp_path)


def test_missing_markers():
    with pytest.raises(ValueError):
        rr.splice("no markers here", "body")
