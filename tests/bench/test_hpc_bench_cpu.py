"""hpc-bench on a machine without an SM90 GPU: the references' CPU checks, --ops selection, the summary, and
the GPU path's bookkeeping (cases, skipped baselines, failures, tables, results files) with stand-in suites."""

import json

import pytest
import torch

from hpc_common.bench import cli
from hpc_common.bench.suite import BenchCase, BenchSuite, discover_suites, skip

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU path of hpc-bench")

OPS = ("decode", "prologue", "router_gemm", "fp8_quant", "moe", "e2e")  # e2e: hpc-integration's runner


def _run(tmp_path, *args):
    out = tmp_path / "report"
    rc = cli.main(["--no-build", "--out", str(out), *args])
    return rc, out, (out / "report.md").read_text()


def test_every_operator_package_registers_a_suite():
    suites = discover_suites()
    assert set(OPS) <= set(suites)
    for op, suite in suites.items():
        assert suite.op == op and suite.title
        assert suite.unavailable()  # no SM90 GPU here: each says why it cannot run
        quick, full = suite.cases(quick=True), suite.cases(quick=False)
        assert 0 < len(quick) < len(full), op
        assert len({c.label for c in full}) == len(full) and all(c.est_s > 0 for c in full)


def test_cpu_run_checks_the_references_and_says_what_it_could_not_run(tmp_path, capsys):
    rc, out, md = _run(tmp_path)
    assert rc == 0
    assert "without an SM90 (Hopper) GPU: no kernel and no benchmark ran" in md
    assert "No SM90 (Hopper) GPU here" in capsys.readouterr().out
    for op in OPS:
        assert f"| {op} | GPU cases not run | no CUDA GPU visible to torch |" in md
    checks = json.loads((out / "cpu_checks.json").read_text())["rows"]
    assert {c["op"] for c in checks} == set(OPS) and all(c["ok"] for c in checks)
    assert f"{len(checks)} of {len(checks)} checks pass." in md
    assert "| moe | MoE reference vs per-token loop |" in md and "| decode | decode reference vs softmax" in md
    assert not (out / "results").exists()  # nothing was measured


@pytest.mark.parametrize("ops, want", [("router", {"router_gemm"}), ("attention", {"decode", "prologue"}),
                                       ("moe,fp8", {"moe", "fp8_quant"}), ("e2e", {"e2e"})])
def test_ops_selects_operators(tmp_path, ops, want):
    rc, out, md = _run(tmp_path, "--ops", ops)
    assert rc == 0
    listed = {op for op in (*OPS, "e2e") if f"| {op} | " in md.split("## CPU checks")[0]}
    assert listed == want
    if want != {"e2e"}:
        checks = json.loads((out / "cpu_checks.json").read_text())["rows"]
        assert {c["op"] for c in checks} == want


def test_unknown_operator_names_the_argument(tmp_path):
    with pytest.raises(SystemExit, match="--ops: unknown operator 'nope'"):
        cli.main(["--no-build", "--out", str(tmp_path), "--ops", "router,nope"])


class FakeSuite(BenchSuite):
    """Runs "on the GPU" (unavailable() is None): one good case that skips a baseline, one that fails."""

    op, title = "fake_op", "A stand-in operator"

    def unavailable(self):
        return None

    def cases(self, quick):
        def good():
            skip("peer_lib", "not importable (ModuleNotFoundError)")
            return [dict(M=m, provider=p, method=meth, median_us=t * m, floor_us=2.0 * m)
                    for m in (1, 4) for meth in ("cold", "rotation") for p, t in (("ours", 4.0), ("cublas", 8.0))]

        def bad():
            raise RuntimeError("device fault in case 2")

        return [BenchCase("good", good, 0.5), BenchCase("bad", bad, 0.5)]


def test_gpu_path_tables_skips_and_failures(tmp_path, monkeypatch):
    from hpc_common import report

    monkeypatch.setattr(report, "_hopper", lambda: True)
    monkeypatch.setattr(cli, "discover_suites", lambda: {"fake_op": FakeSuite()})
    rc, out, md = _run(tmp_path)
    assert rc == 1  # a case failed
    assert "Measured on this machine by `hpc-bench`" in md
    assert "| fake_op | measured, with failures | 8 rows, 2 cases |" in md
    assert "- fake_op: peer_lib: not importable (ModuleNotFoundError)" in md
    assert "- fake_op: bad: failed: RuntimeError: device fault in case 2" in md
    assert "| M | floor us | ours us (% of floor) | cublas us | cublas / ours |" in md
    assert "| 4 | 8.00 | 16.0 (50 %) | 32.0 | 2.00x |" in md
    assert "### fake_op (cold)" in md and "### fake_op (rotation)" in md
    rows = json.loads((out / "results" / "fake_op.json").read_text())["rows"]
    assert len(rows) == 8 and {r["provider"] for r in rows} == {"ours", "cublas"}
    assert (out / "results" / "fake_op.md").is_file()
    assert "device fault in case 2" in (out / "bench.log").read_text()
    pngs = sorted((out / "plots").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert f"](plots/{pngs[0].name})" in md
