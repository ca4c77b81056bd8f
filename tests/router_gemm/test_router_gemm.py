"""router_gemm: GPU cases against FP64 (every path and split count, the listed shapes and
general ones), determinism, graph replay, PDL, weight refresh, errors; CPU tests of the
reference, the weight split, the planner and input validation."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal, poisoned_empty

from hpc_router_gemm import heuristics
from hpc_router_gemm.reference import (
    LO_SCALE,
    router_gemm_reference,
    split_product_reference,
    split_weight,
    topk_experts,
)

from ._cases import SHAPES, check_against_fp64, make_inputs

# ----------------------------------------------------------------------------- CPU tests


def test_split_weight_error_bound():
    torch.manual_seed(0)
    w = torch.cat([torch.randn(4096) * 0.02, torch.randn(4096) * 100, torch.randn(4096) * 1e-6])
    hi, lo = split_weight(w)
    assert hi.dtype == lo.dtype == torch.bfloat16
    assert torch.equal(hi, w.to(torch.bfloat16))
    approx = hi.double() + lo.double() / LO_SCALE
    assert ((approx - w.double()).abs() <= 2.0**-16 * w.double().abs()).all()


def test_split_product_reference_close_to_exact():
    torch.manual_seed(1)
    x = torch.randn(64, 4096).to(torch.bfloat16)
    w = torch.randn(192, 4096) * 0.02
    exact = router_gemm_reference(x, w)
    split = split_product_reference(x, *split_weight(w))
    assert (split - exact).abs().max().item() < 2e-5
    assert torch.equal(topk_experts(split), topk_experts(exact))
    bf16_only = x.double() @ w.to(torch.bfloat16).double().T
    assert (bf16_only - exact).abs().max().item() > 1e-3  # the low half matters


def test_reference_is_float64_matmul():
    x = torch.randn(3, 64).to(torch.bfloat16)
    w = torch.randn(64, 64)
    assert router_gemm_reference(x, w).dtype == torch.float64
    torch.testing.assert_close(router_gemm_reference(x, w), x.double() @ w.double().T)


def _fake_clusters(tile, s):
    return 132 // s if tile == heuristics.TILE_WIDE else 264 // s


@pytest.mark.parametrize("K,N", list(heuristics.TABLE))
def test_plan_table_is_ordered_and_valid(K, N):
    rows = heuristics.TABLE[(K, N)]
    assert [r[0] for r in rows] == sorted(r[0] for r in rows)
    for m_max, path, s, *opts in rows:
        assert path in heuristics.PATHS and s in heuristics.SPLIT_CHOICES
        assert set(opts) <= {"ef"}
        assert path not in heuristics.FP32_PATHS or m_max <= heuristics.FP32_MAX_M
        if path in heuristics.GEMV_PATHS:
            assert s in heuristics.GEMV_SPLITS and heuristics.gemv_fits(m_max, K, s, path)
            continue
        tile = heuristics.Plan(path, s).tile
        bm = heuristics.TILE_SHAPES[tile][0] if tile is not None else 8  # fp32: any split
        assert bm % s == 0 and s <= K // 64
    for M in (1, 8, 9, 64, 512, 513, 4096, 100000):
        plan = heuristics.choose_plan(M, N, K, _fake_clusters)
        row = next(r for r in rows if M <= r[0])
        assert plan.path == row[1] and plan.evict_first == ("ef" in row[3:])


@pytest.mark.parametrize("M", [1, 8, 9, 64, 512, 513, 4096])
def test_default_plan_for_unlisted_shapes(M):
    plan = heuristics.choose_plan(M, 320, 1024, _fake_clusters)
    assert plan.path == ("fp32" if M <= 8 else "narrow" if M <= 512 else "wide96")
    assert plan.splits in heuristics.SPLIT_CHOICES
    # A num_sms override (hpc_common.set_num_sms) bypasses the H200 table.
    assert heuristics.choose_plan(M, 192, 4096, _fake_clusters, num_sms=66).path == plan.path


def test_plan_splits_fill_the_gpu():
    # 32 wide tiles on 132 SMs: four-way split-K puts 128 CTAs to work in one wave.
    assert heuristics.choose_plan(4096, 192, 4096, _fake_clusters, path="wide").splits == 4
    # 128 wide tiles already fill the GPU: no split.
    assert heuristics.choose_plan(4096, 768, 6144, _fake_clusters, path="wide").splits == 1
    # Never more splits than K blocks, and BM must divide by the split count.
    assert heuristics.choose_plan(64, 192, 128, _fake_clusters, path="narrow").splits <= 2
    assert heuristics.fp32_splits(64, 192) == 1
    assert heuristics.fp32_splits(4096, 192) == 8
    assert heuristics.fp32_splits(6144, 768) == 2


def test_plan_rejects_bad_forced_paths():
    with pytest.raises(ValueError, match="fp32 path serves M <= 256"):
        heuristics.choose_plan(300, 192, 4096, _fake_clusters, path="fp32")
    with pytest.raises(ValueError, match="fp32pf path serves M <= 256"):
        heuristics.choose_plan(300, 192, 4096, _fake_clusters, path="fp32pf")
    assert heuristics.choose_plan(3, 768, 6144, _fake_clusters, path="fp32pf") == heuristics.Plan("fp32pf", 2)
    with pytest.raises(ValueError, match="unknown path"):
        heuristics.choose_plan(3, 192, 4096, _fake_clusters, path="tf32")


def test_validation_without_gpu():
    from hpc_router_gemm import router_gemm
    from hpc_router_gemm.router_gemm import _check_inputs
    from hpc_router_gemm.weight import check_weight

    w = torch.randn(192, 4096)
    with pytest.raises(TypeError, match="router_gemm: weight must be float32, got float16"):
        check_weight(w.half())
    with pytest.raises(ValueError, match="multiples of 64"):
        check_weight(torch.randn(100, 4096))
    with pytest.raises(ValueError, match="multiples of 64"):
        check_weight(torch.randn(192, 4000))
    with pytest.raises(ValueError, match="weight must be contiguous"):
        check_weight(torch.randn(4096, 192).T)
    with pytest.raises(ValueError, match="weight must be a CUDA tensor"):
        check_weight(w)
    with pytest.raises(ValueError, match="weight must be a CUDA tensor"):
        router_gemm(torch.randn(2, 4096).bfloat16(), w)
    x = torch.randn(5, 4096).bfloat16()
    with pytest.raises(TypeError, match="x must be bfloat16, got float32"):
        _check_inputs(x.float(), w, None)
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        _check_inputs([1.0], w, None)
    with pytest.raises(ValueError, match=r"x must have shape \[M, 4096\]"):
        _check_inputs(torch.randn(5, 2048).bfloat16(), w, None)
    with pytest.raises(ValueError, match="x must be 2-D"):
        _check_inputs(torch.randn(5, 1, 4096).bfloat16(), w, None)
    with pytest.raises(ValueError, match="x must have unit stride"):
        _check_inputs(torch.randn(4096, 5).bfloat16().T, w, None)
    with pytest.raises(ValueError, match="out must have shape"):
        _check_inputs(x, w, torch.empty(5, 191))
    with pytest.raises(TypeError, match="out must be float32"):
        _check_inputs(x, w, torch.empty(5, 192, dtype=torch.float64))
    with pytest.raises(ValueError, match="out must have unit stride"):
        _check_inputs(x, w, torch.empty(192, 5).T)
    _check_inputs(x, w, torch.empty(5, 192))  # a valid set passes


def test_router_weight_needs_cuda():
    from hpc_router_gemm import RouterWeight

    with pytest.raises(ValueError, match="weight must be a CUDA tensor"):
        RouterWeight(torch.randn(64, 64))


def test_fake_impl_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    import hpc_router_gemm  # noqa: F401  (registers the ops)

    with FakeTensorMode():
        x = torch.empty(7, 4096, dtype=torch.bfloat16)
        w = torch.empty(192, 4096)
        hi = torch.empty(192, 4096, dtype=torch.bfloat16)
        out = torch.ops.hpc_router_gemm.router_gemm(x, w, hi, hi)
        assert out.shape == (7, 192) and out.dtype == torch.float32


# ----------------------------------------------------------------------------- GPU tests

gpu = pytest.mark.gpu


def _run(x, rw, path=None, splits=None, out=None):
    from hpc_router_gemm.heuristics import Plan
    from hpc_router_gemm.router_gemm import launch, plan_for

    plan = plan_for(x.shape[0], *rw.weight.shape, x.device, path=path)
    if splits is not None:
        plan = Plan(plan.path, splits)
    out = poisoned_empty(x.shape[0], rw.weight.shape[0], dtype=torch.float32, device=x.device) if out is None else out
    launch(x, rw, out, plan)
    return out


@gpu
@pytest.mark.parametrize("K,N", SHAPES)
@pytest.mark.parametrize("M", [1, 7, 16, 33, 64, 100, 256, 513, 1000, 4096])
def test_listed_shapes_match_fp64(K, N, M):
    from hpc_router_gemm import RouterWeight, router_gemm

    x, w = make_inputs(M, K, N, seed=M * 7 + K)
    out = poisoned_empty(M, N, dtype=torch.float32, device="cuda")
    router_gemm(x, RouterWeight(w), out=out)
    check_against_fp64(out, x, w, strict_top8=True, tag=f"M={M} K={K} N={N}")


@gpu
@pytest.mark.parametrize("path,splits",
                         [(p, s) for p in ("fp32", "fp32pf", "narrow", "wide", "wide96") for s in (1, 2, 4, 8)])
@pytest.mark.parametrize("M", [1, 5, 64, 129, 250])
def test_every_path_and_split(path, splits, M):
    from hpc_router_gemm import RouterWeight

    x, w = make_inputs(M, 4096, 192, seed=M + splits)
    out = _run(x, RouterWeight(w), path, splits)
    check_against_fp64(out, x, w, strict_top8=True, tag=f"{path} S={splits} M={M}")


@gpu
@pytest.mark.parametrize("K,N", [(64, 64), (192, 128), (1024, 320), (2048, 448), (640, 1024)])
@pytest.mark.parametrize("path", ["fp32", "fp32pf", "narrow", "wide", "wide96"])
@pytest.mark.parametrize("M", [3, 200])
def test_general_shapes(K, N, path, M):
    from hpc_router_gemm import RouterWeight

    x, w = make_inputs(M, K, N, seed=K + N + M)
    out = _run(x, RouterWeight(w), path)
    check_against_fp64(out, x, w, strict_top8=False, tag=f"{path} M={M} K={K} N={N}")


@gpu
@pytest.mark.parametrize("M", [4, 40, 300, 2048])
def test_bitwise_deterministic_graph_and_pdl(M):
    import hpc_common
    from hpc_router_gemm import RouterWeight, router_gemm

    x, w = make_inputs(M, 4096, 192, seed=3)
    rw = RouterWeight(w)
    first = router_gemm(x, rw)
    for _ in range(3):
        assert_bitwise_equal(router_gemm(x, rw), first, name="rerun")
    out = poisoned_empty(M, 192, dtype=torch.float32, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        router_gemm(x, rw, out=out)  # warm up outside capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            router_gemm(x, rw, out=out)
    torch.cuda.current_stream().wait_stream(s)
    out.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(out, first, name="graph replay")
    for pdl in (False, True):
        with hpc_common.pdl_enabled(pdl):
            assert_bitwise_equal(router_gemm(x, rw), first, name=f"pdl={pdl}")


@gpu
def test_strided_inputs_and_outputs():
    from hpc_router_gemm import RouterWeight, router_gemm

    xw, w = make_inputs(77, 4096 + 64, 192, seed=5)
    x = xw[:, 64:]  # row stride 4160, offset 128 bytes
    big = poisoned_empty(77, 256, dtype=torch.float32, device="cuda")
    out = big[:, :192]
    router_gemm(x, RouterWeight(w[:, :4096].contiguous()), out=out)
    check_against_fp64(out, x, w[:, :4096], strict_top8=True, tag="strided")
    assert torch.isnan(big[:, 192:]).all(), "wrote outside out"


@gpu
def test_empty_batch():
    from hpc_router_gemm import router_gemm

    x, w = make_inputs(0, 4096, 192, seed=0)
    assert router_gemm(x, w).shape == (0, 192)


@gpu
def test_stale_weight_is_detected_and_refresh_reaches_graphs():
    from hpc_router_gemm import RouterWeight, StaleWeightError, router_gemm, stale_weights

    M = 300
    x, w = make_inputs(M, 4096, 192, seed=11)
    rw = RouterWeight(w)
    out = torch.empty(M, 192, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        router_gemm(x, rw, out=out)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            router_gemm(x, rw, out=out)
    torch.cuda.current_stream().wait_stream(s)

    w.mul_(-1.5)  # an in-place online update
    assert rw.is_stale and rw in stale_weights()
    with pytest.raises(StaleWeightError, match="refresh"):
        router_gemm(x, rw)
    rw.refresh()
    assert not rw.is_stale and rw.verify()
    g.replay()
    torch.cuda.synchronize()
    check_against_fp64(out, x, w, strict_top8=True, tag="graph after refresh")

    rw.update_(torch.randn_like(w) * 0.02)
    g.replay()
    torch.cuda.synchronize()
    check_against_fp64(out, x, w, strict_top8=True, tag="graph after update_")


@gpu
def test_implicit_cache_refreshes_in_eager_and_rejects_capture():
    from hpc_router_gemm import router_gemm

    x, w = make_inputs(64, 4096, 192, seed=12)
    check_against_fp64(router_gemm(x, w), x, w, strict_top8=True, tag="cached")
    w.add_(0.01)
    check_against_fp64(router_gemm(x, w), x, w, strict_top8=True, tag="cached after update")
    w2 = torch.randn_like(w) * 0.02
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        g = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="before CUDA-graph capture"):
            with torch.cuda.graph(g, stream=s):
                router_gemm(x, w2)
    torch.cuda.current_stream().wait_stream(s)


@gpu
def test_bad_inputs_on_gpu():
    from hpc_router_gemm import RouterWeight, router_gemm

    x, w = make_inputs(8, 4096, 192, seed=13)
    rw = RouterWeight(w)
    with pytest.raises(TypeError, match="x must be bfloat16"):
        router_gemm(x.half(), rw)
    with pytest.raises(ValueError, match=r"x must have shape \[M, 4096\]"):
        router_gemm(x[:, :2048], rw)
    with pytest.raises(ValueError, match="x must be on cuda"):
        router_gemm(x.cpu(), rw)
    flat = torch.empty(8 * 4096 + 1, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(ValueError, match="x must be 16-byte aligned"):
        router_gemm(flat[1:].view(8, 4096), rw)
    with pytest.raises(ValueError, match="row stride that is a multiple of 8"):
        router_gemm(torch.empty(8, 4100, dtype=torch.bfloat16, device="cuda")[:, :4096], rw)
    with pytest.raises(ValueError, match="out must have shape"):
        router_gemm(x, rw, out=torch.empty(8, 191, device="cuda"))
    with pytest.raises(ValueError, match="out must be on"):
        router_gemm(x, rw, out=torch.empty(8, 192))
    with pytest.raises(ValueError, match="weight must be contiguous"):
        RouterWeight(torch.randn(4096, 192, device="cuda").T)
    with pytest.raises(TypeError, match="weight must be float32"):
        router_gemm(x, w.to(torch.bfloat16))


@gpu
def test_opcheck():
    from hpc_router_gemm import RouterWeight

    x, w = make_inputs(16, 1024, 128, seed=14)
    rw = RouterWeight(w)
    torch.library.opcheck(torch.ops.hpc_router_gemm.router_gemm.default, (x, rw.weight, rw.w_hi, rw.w_lo),
                          test_utils=("test_schema", "test_faketensor"))
