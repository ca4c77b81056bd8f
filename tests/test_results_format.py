"""Every committed benchmark result follows the shared format (CPU): meta with the run's
provenance, one row per (case, provider), and the providers each operator's issue asks for."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
META = {"gpu", "commit", "date", "torch", "cuda", "nvcc"}
REQUIRED = {
    "router_gemm": ({"M", "K", "N"}, {"ours", "cublas_fp32", "cublas_fp32_cast", "cublas_tf32", "cublas_bf16"}),
    "decode": ({"case", "Hq", "Hkv", "kv_dtype"}, {"ours", "ours_static", "ours_plan"}),
    "fp8_quant": ({"mode", "M", "N", "dtype"}, {"ours"}),
}
FILES = sorted(RESULTS.glob("*/*.json"))


def test_there_are_results():
    assert {p.stem for p in FILES} >= set(REQUIRED)


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_result_file_format(path):
    data = json.loads(path.read_text())
    assert META <= set(data["meta"]), f"{path.name}: meta lacks {META - set(data['meta'])}"
    assert data["meta"]["commit"] not in ("", "unknown"), f"{path.name}: no commit recorded"
    rows = data["rows"]
    assert rows and all("provider" in r and r["median_us"] > 0 for r in rows)
    if path.stem in REQUIRED:
        fields, providers = REQUIRED[path.stem]
        assert providers <= {r["provider"] for r in rows}, f"{path.name}: missing providers"
        for r in rows:
            if r["provider"] in providers - {"ours_plan"}:
                assert fields <= set(r), f"{path.name}: row {r} lacks {fields - set(r)}"
    # The two timing methods of hpc_common.bench; a row that names its method names one of them.
    assert {r["method"] for r in rows if "method" in r} <= {"cold", "rotation"}, f"{path.name}: unknown method"
    md = path.with_suffix(".md")
    assert md.is_file(), f"{md.name} (the Markdown table) is missing"
