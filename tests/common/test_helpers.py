"""The shared test/benchmark helpers themselves (CPU)."""

import json

import pytest
import torch

from hpc_common.bench import BenchResults, floor_us
from hpc_common.checks import check_tensor
from hpc_common.testing import assert_bitwise_equal, assert_close, error_stats, poison_


def test_assert_close_reports_location_and_values():
    e = torch.zeros(3, 4, dtype=torch.float64)
    a = e.clone()
    a[1, 2] = 0.5
    with pytest.raises(AssertionError, match=r"(?s)1 of 12 .*at \(1, 2\): actual 0.5 expected 0.0"):
        assert_close(a, e, atol=1e-3)
    assert_close(a, e, atol=0.6)


def test_assert_close_catches_nan_and_inf_on_one_side():
    e = torch.ones(5)
    a = e.clone()
    a[3] = float("nan")
    with pytest.raises(AssertionError, match="NaN on one side"):
        assert_close(a, e, atol=1e9)
    a = e.clone()
    a[0] = float("inf")
    with pytest.raises(AssertionError, match="Inf on one side"):
        assert_close(a, e, atol=1e9)
    assert_close(torch.tensor([float("nan")]), torch.tensor([float("nan")]), atol=0, equal_nan=True)


def test_bitwise_equal_distinguishes_signed_zero():
    a = torch.tensor([0.0, 1.0])
    b = torch.tensor([-0.0, 1.0])
    with pytest.raises(AssertionError, match="differ bitwise"):
        assert_bitwise_equal(a, b)
    assert_bitwise_equal(a, a.clone())


def test_poison_fills_every_dtype():
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        assert torch.isnan(poison_(torch.zeros(4, dtype=dt))).all()
    f8 = poison_(torch.zeros(4, dtype=torch.float8_e4m3fn))
    assert torch.isnan(f8.float()).all()
    assert (poison_(torch.zeros(3, dtype=torch.int32)) == -1).all()


def test_error_stats():
    e = torch.tensor([1.0, 2.0, 3.0])
    s = error_stats(e * 1.01, e)
    assert s["max_abs_err"] == pytest.approx(0.03)
    assert s["rel_err"] == pytest.approx(0.01)
    assert s["cosine"] == pytest.approx(1.0)


def test_check_tensor_names_the_argument():
    x = torch.zeros(2, 3, dtype=torch.float32)
    with pytest.raises(TypeError, match="op: x must be bfloat16, got float32"):
        check_tensor(x, "x", "op", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"op: w must have shape \[\*, 4\], got \[2, 3\]"):
        check_tensor(x, "w", "op", shape=(None, 4))
    with pytest.raises(ValueError, match="op: x must be contiguous"):
        check_tensor(x.t(), "x", "op", contiguous=True)
    with pytest.raises(TypeError, match="op: x must be a torch.Tensor"):
        check_tensor([1, 2], "x", "op")


def test_results_format(tmp_path):
    r = BenchResults("demo_op", tmp_path / "h200")
    r.add("ours", 12.3456, M=4, K=64, floor_us=floor_us(4.27e6), tbps=3.9, cosine=None)
    r.add("cublas_fp32", 20.0, M=4, K=64)
    path = r.write()
    data = json.loads(path.read_text())
    assert set(data["meta"]) >= {"gpu", "commit", "date", "torch", "cuda", "nvcc"}
    assert data["rows"][0] == {"M": 4, "K": 64, "provider": "ours", "median_us": 12.346,
                               "floor_us": pytest.approx(1.0), "tbps": 3.9}
    md = (tmp_path / "h200" / "demo_op.md").read_text()
    assert "| M | K | provider | median_us | floor_us | tbps |" in md


def test_back_to_back_needs_functions():
    from hpc_common.bench import bench_back_to_back_us

    with pytest.raises(ValueError, match="fns"):
        bench_back_to_back_us([])


@pytest.mark.gpu
def test_back_to_back_time_is_per_call():
    """k copies back to back: the per-call time of 64 MB copies sits between the copy floor
    and the single cold call's time, and halving k leaves it about the same (it is per call)."""
    from hpc_common.bench import bench_back_to_back_us, bench_us, floor_us

    src = [torch.randn(16 << 20, device="cuda") for _ in range(8)]  # 64 MB each
    dst = [torch.empty_like(s) for s in src]
    fns = [(lambda s=s, d=d: d.copy_(s)) for s, d in zip(src, dst)]
    t8 = bench_back_to_back_us(fns, reps=5)
    t4 = bench_back_to_back_us(fns[:4], reps=5)
    cold = bench_us(fns[0], reps=10)
    assert floor_us(2 * (64 << 20)) * 0.75 < t8 < cold
    assert abs(t8 - t4) < 0.2 * t8


def test_timing_methods_and_rotation_copies():
    from hpc_common.bench import METHODS, methods, rotation_copies

    assert METHODS == ("cold", "rotation") and methods("both") == METHODS and methods("cold") == ("cold",)
    with pytest.raises(ValueError, match="--method"):
        methods("warm")
    assert rotation_copies(3 << 20) == 86  # 3 MB per call: 86 copies reach 256 MB
    assert rotation_copies(1 << 30) == 2  # at least two, so no call finds the previous one's data
    assert rotation_copies(1) == 512  # at most `cap`


def test_dev_entry_points_register_every_package(tmp_path):
    """tools/dev_entry_points.py (the device machine has no pip install) writes .dist-info folders whose entry
    points are the pyproject tables: importlib.metadata then finds every package's _ext and reference."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    subprocess.run([sys.executable, str(root / "tools" / "dev_entry_points.py"), str(tmp_path)], check=True,
                   capture_output=True)
    code = ("from importlib.metadata import entry_points as e; print(sorted(x.value for x in e(group='hpc_ops.jit')));"
            "print(sorted(x.value for x in e(group='hpc_ops.reference')))")
    out = subprocess.run([sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {code}"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert {"hpc_common._ext", "hpc_router_gemm._ext", "hpc_attention._ext"} <= set(eval(out[0]))
    assert {"hpc_common.fp8.reference", "hpc_router_gemm.reference"} <= set(eval(out[1]))
