"""The public API on the CPU: MoEWeights.prepare, MoEWorkspace, fused_moe (its reference path)
and their argument checks; every error names the argument."""

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hpc_common.testing.strategies import seeds

import hpc_moe
from hpc_moe import MoEWeights, MoEWorkspace, fused_moe
from hpc_moe.reference import fused_moe_reference_quant, reference_from_prepared
from hpc_moe.workspace import cached_workspace

FP8 = torch.float8_e4m3fn


def _tensors(quant, E=4, H=256, inter=192, seed=0, gate_up_scales=False):
    g = torch.Generator().manual_seed(seed)
    if quant == "bf16":
        w13 = (torch.randn(E, 2 * inter, H, generator=g) * 0.05).to(torch.bfloat16)
        w2 = (torch.randn(E, H, inter, generator=g) * 0.05).to(torch.bfloat16)
        return dict(w13=w13, w2=w2)
    w13 = (torch.randn(E, 2 * inter, H, generator=g) * 100).clamp(-448, 448).to(FP8)
    w2 = (torch.randn(E, H, inter, generator=g) * 100).clamp(-448, 448).to(FP8)
    if quant == "fp8_tensor":
        s13 = torch.rand(E, 2 if gate_up_scales else 1, generator=g).squeeze(1) * 1e-3 + 1e-4
        s2 = torch.rand(E, generator=g) * 1e-3 + 1e-4
    else:
        s13 = torch.rand(E, -(-2 * inter // 128), H // 128, generator=g) * 1e-3 + 1e-4
        s2 = torch.rand(E, H // 128, -(-inter // 128), generator=g) * 1e-3 + 1e-4
    return dict(w13=w13, w2=w2, w13_scale=s13, w2_scale=s2)


def _routing(T, k, E, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1, E, (T, k), generator=g, dtype=torch.int32)
    wts = torch.rand(T, k, generator=g)
    x = torch.randn(T, 256, generator=g).to(torch.bfloat16)
    return x, ids, wts


FORMATS = [("bf16", False, None), ("fp8_tensor", False, None), ("fp8_tensor", True, None),
           ("fp8_tensor", True, 0.03), ("fp8_block", False, None)]


@pytest.mark.parametrize("quant,gate_up,a1", FORMATS)
@pytest.mark.parametrize("inter", [192, 128])
def test_prepare_on_cpu_keeps_the_computation(quant, gate_up, a1, inter):
    t = _tensors(quant, inter=inter, gate_up_scales=gate_up)
    w = MoEWeights.prepare(**t, quant=quant, a1_scale=a1, ep_rank=1, ep_size=3)
    assert (w.quant, w.num_local_experts, w.num_experts, w.hidden_size, w.intermediate_size) == (quant, 4, 12, 256, inter)
    assert w.expert_range == range(4, 8) and w.device == torch.device("cpu")
    assert (w.a1_scale is None) == (a1 is None)
    x, ids, wts = _routing(5, 4, 12)
    shared = torch.randn(5, 256).to(torch.bfloat16)
    want = fused_moe_reference_quant(x, t["w13"], t["w2"], ids, wts, quant=quant, w13_scale=t.get("w13_scale"),
                                     w2_scale=t.get("w2_scale"), a1_scale=a1, expert_offset=4, shared_output=shared)
    got = reference_from_prepared(w, x, ids, wts, shared_output=shared)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_weights_are_frozen_and_keep_no_checkpoint_tensors():
    t = _tensors("fp8_block")
    w = MoEWeights.prepare(**t, quant="fp8_block")
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.quant = "bf16"
    kept = [f.name for f in dataclasses.fields(w) if isinstance(getattr(w, f.name), torch.Tensor)]
    for name in kept:  # nothing shares storage with what the caller passed
        for orig in t.values():
            assert getattr(w, name).untyped_storage().data_ptr() != orig.untyped_storage().data_ptr()
    assert "fp8_block" in repr(w)


@pytest.mark.parametrize("quant,gate_up,a1", FORMATS)
def test_fused_moe_cpu_path_matches_the_reference(quant, gate_up, a1):
    t = _tensors(quant, gate_up_scales=gate_up)
    w = MoEWeights.prepare(**t, quant=quant, a1_scale=a1, ep_rank=0, ep_size=2)
    x, ids, wts = _routing(7, 3, 8)
    ids[3] = -1  # a token with no expert: zeros, or the shared output
    ids[4] = torch.tensor([5, 6, 7])  # only other ranks' experts
    ref = reference_from_prepared(w, x, ids, wts)
    out = fused_moe(x, w, ids, wts)
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * ref.abs().max().item())
    assert torch.all(out[3] == 0) and torch.all(out[4] == 0)
    shared = torch.randn(7, 256).to(torch.bfloat16)
    ws = w.workspace(8, 4)
    dst = torch.full_like(x, float("nan"))
    got = fused_moe(x, w, ids.long(), wts, shared_output=shared, out=dst, workspace=ws)
    assert got is dst and not torch.isnan(dst).any()
    torch.testing.assert_close(dst[3], shared[3], rtol=0, atol=0)
    torch.testing.assert_close(got.double(), reference_from_prepared(w, x, ids, wts, shared_output=shared),
                               rtol=1e-2, atol=1e-2 * ref.abs().max().item())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(quant=st.sampled_from(["bf16", "fp8_tensor", "fp8_block"]), H=st.sampled_from([128, 256]),
       inter=st.sampled_from([64, 128, 192]), E_local=st.integers(1, 6), ep_size=st.sampled_from([1, 2, 4]),
       rank_frac=st.floats(0, 0.999), T=st.sampled_from([1, 2, 7, 17]), k=st.integers(1, 16), seed=seeds())
@example(quant="fp8_block", H=128, inter=64, E_local=1, ep_size=1, rank_frac=0.0, T=1, k=16, seed=0)
def test_cpu_path_matches_checkpoint_reference(quant, H, inter, E_local, ep_size, rank_frac, T, k, seed):
    """prepare then fused_moe on the CPU equals the reference on the checkpoint tensors, for drawn
    sizes, EP settings and routings (up to BF16 rounding of the output)."""
    g = torch.Generator().manual_seed(seed)
    ep_rank = int(rank_frac * ep_size)
    E = E_local * ep_size
    t = _tensors(quant, E=E_local, H=H, inter=inter, seed=seed, gate_up_scales=quant == "fp8_tensor" and seed % 2)
    w = MoEWeights.prepare(**t, quant=quant, ep_rank=ep_rank, ep_size=ep_size, num_experts=E)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    ids = torch.randint(-1, E, (T, k), generator=g, dtype=torch.int32)
    wts = torch.rand(T, k, generator=g)
    want = fused_moe_reference_quant(x, t["w13"], t["w2"], ids, wts, quant=quant, w13_scale=t.get("w13_scale"),
                                     w2_scale=t.get("w2_scale"), expert_offset=ep_rank * E_local)
    got = fused_moe(x, w, ids, wts)
    scale = max(want.abs().max().item(), 1e-30)
    assert (got.double() - want).abs().max().item() <= 1e-2 * scale, (quant, H, inter, E_local, ep_size, ep_rank, T, k, seed)


def test_fused_moe_empty_batch():
    w = MoEWeights.prepare(**_tensors("bf16"), quant="bf16")
    out = fused_moe(torch.empty(0, 256, dtype=torch.bfloat16), w, torch.empty(0, 2, dtype=torch.int32),
                    torch.empty(0, 2))
    assert out.shape == (0, 256)


@pytest.mark.parametrize("quant", ["bf16", "fp8_block"])
def test_custom_op_opcheck(quant):
    w = MoEWeights.prepare(**_tensors(quant, E=2, inter=64), quant=quant)
    x, ids, wts = _routing(3, 2, 2)
    args = (x, w.w13, w.w2, w.w13_scale, w.w2_scale, None, ids, wts, None, torch.empty_like(x),
            torch.empty(0, 64, dtype=torch.bfloat16), torch.empty(0, 256, dtype=FP8), torch.empty(0, 2),
            torch.empty(0, 256, dtype=torch.bfloat16), torch.empty(0, dtype=torch.int32), quant, 2, 0, 1, 64, 3, 2)
    # Not test_schema: it compares every tensor argument before and after the call, which torch
    # cannot do for FP8 tensors (the workspace's xq) on the CPU.
    utils = ("test_faketensor", "test_aot_dispatch_static", "test_aot_dispatch_dynamic")
    torch.library.opcheck(torch.ops.hpc_moe.fused_moe.default, args, test_utils=utils)


def test_fused_moe_under_torch_compile():
    w = MoEWeights.prepare(**_tensors("bf16", E=2, inter=64), quant="bf16")
    x, ids, wts = _routing(3, 2, 2)
    ws = w.workspace(4, 2)
    eager = fused_moe(x, w, ids, wts, workspace=ws)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def layer(x, ids, wts, out):
        return fused_moe(x, w, ids, wts, out=out, workspace=ws)

    torch.testing.assert_close(layer(x, ids, wts, torch.empty_like(x)), eager, rtol=0, atol=0)


# ---- argument checks -----------------------------------------------------------------------

def _bad_prepare(**over):
    quant = over.pop("quant", "fp8_block")
    t = _tensors(quant)
    t.update(over)
    return lambda: MoEWeights.prepare(**t, quant=quant)


@pytest.mark.parametrize("make,exc,match", [
    (_bad_prepare(quant="bf16", w13=torch.zeros(4, 384, 256)), TypeError, "w13 must be bfloat16"),
    (_bad_prepare(w2=torch.zeros(4, 256, 192, dtype=torch.bfloat16)), TypeError, "w2 must be float8_e4m3fn"),
    (_bad_prepare(quant="bf16", w13=torch.zeros(384, 256, dtype=torch.bfloat16)), ValueError, "w13 must be 3-D"),
    (_bad_prepare(quant="bf16", w13=torch.zeros(4, 384, 200, dtype=torch.bfloat16)), ValueError, "multiple of 128"),
    (_bad_prepare(quant="bf16", w13=torch.zeros(4, 192, 256, dtype=torch.bfloat16)), ValueError, "multiple of 64"),
    (_bad_prepare(quant="bf16", w2=torch.zeros(4, 256, 128, dtype=torch.bfloat16)), ValueError, r"w2 must have shape \[4, 256, 192\]"),
    (_bad_prepare(quant="bf16", w2=torch.zeros(4, 256, 192, dtype=torch.bfloat16, device="meta")), ValueError, "w2 must be on cpu"),
    (_bad_prepare(w13_scale=None), ValueError, "w13_scale is required"),
    (_bad_prepare(w13_scale=torch.ones(4, 3, 3)), ValueError, r"w13_scale must have shape \[4, 3, 2\]"),
    (_bad_prepare(w2_scale=torch.ones(4, 2, 1)), ValueError, r"w2_scale must have shape \[4, 2, 2\]"),
    (_bad_prepare(w2_scale=torch.ones(4, 2, 2, dtype=torch.float64)), TypeError, "w2_scale must be float32"),
    (_bad_prepare(w2_scale=torch.full((4, 2, 2), float("nan"))), ValueError, "w2_scale must hold finite"),
    (_bad_prepare(a1_scale=0.1), ValueError, "a1_scale must be None for quant='fp8_block'"),
    (_bad_prepare(quant="fp8_tensor", w13_scale=torch.ones(4, 3)), ValueError, r"w13_scale for quant='fp8_tensor'"),
    (_bad_prepare(quant="fp8_tensor", a1_scale=-1.0), ValueError, "a1_scale must be finite and positive"),
    (_bad_prepare(quant="fp8_tensor", a1_scale=torch.ones(2)), ValueError, "a1_scale must hold one value"),
    (_bad_prepare(quant="bf16", w13_scale=torch.ones(4)), ValueError, "w13_scale must be None for quant='bf16'"),
    (_bad_prepare(quant="int4"), ValueError, "quant must be one of"),
    (_bad_prepare(num_experts=10, ep_size=4), ValueError, "num_experts .10. must be a positive multiple of ep_size"),
    (_bad_prepare(num_experts=16, ep_size=2), ValueError, "w13 holds 4 experts but num_experts / ep_size"),
    (_bad_prepare(ep_rank=2, ep_size=2), ValueError, "ep_rank must satisfy"),
    (_bad_prepare(ep_size=0), ValueError, "ep_size must be >= 1"),
])
def test_prepare_errors_name_the_argument(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


@pytest.fixture(scope="module")
def moe():
    w = MoEWeights.prepare(**_tensors("fp8_block"), quant="fp8_block", ep_size=2)  # experts 0..3 of 8
    x, ids, wts = _routing(6, 2, 8)
    return w, x, ids, wts


@pytest.mark.parametrize("change,exc,match", [
    (lambda x, ids, wts: dict(hidden=x.float()), TypeError, "hidden must be bfloat16"),
    (lambda x, ids, wts: dict(hidden=x[:, :128]), ValueError, r"hidden must be \[T, 256\]"),
    (lambda x, ids, wts: dict(hidden=x.t().contiguous().t()), ValueError, "hidden must have a unit stride"),
    (lambda x, ids, wts: dict(hidden=torch.zeros(6, 264, dtype=torch.bfloat16)[:, 4:260]), ValueError, "16-byte"),
    (lambda x, ids, wts: dict(topk_ids=ids.float()), TypeError, "topk_ids must be int32 or int64"),
    (lambda x, ids, wts: dict(topk_ids=ids[:5]), ValueError, r"topk_ids must be \[T, k\] with T = 6"),
    (lambda x, ids, wts: dict(topk_ids=torch.zeros(6, 17, dtype=torch.int32)), ValueError, "top-k .* 1..16"),
    (lambda x, ids, wts: dict(topk_ids=torch.zeros(2, 6, dtype=torch.int32).t()), ValueError, "topk_ids must be contiguous"),
    (lambda x, ids, wts: dict(topk_weights=wts.bfloat16()), TypeError, "topk_weights must be float32"),
    (lambda x, ids, wts: dict(topk_weights=wts[:, :1]), ValueError, r"topk_weights must have shape \[6, 2\]"),
    (lambda x, ids, wts: dict(out=torch.empty(6, 256)), TypeError, "out must be bfloat16"),
    (lambda x, ids, wts: dict(out=torch.empty(5, 256, dtype=torch.bfloat16)), ValueError, r"out must have shape"),
    (lambda x, ids, wts: dict(shared_output=torch.empty(6, 128, dtype=torch.bfloat16)), ValueError, "shared_output must have shape"),
    (lambda x, ids, wts: dict(out=x), ValueError, "out must not alias hidden"),
    (lambda x, ids, wts: dict(topk_ids=torch.full_like(ids, 8)), ValueError, r"topk_ids must lie in \[-1, num_experts = 8\)"),
    (lambda x, ids, wts: dict(topk_ids=torch.full_like(ids, -2)), ValueError, r"topk_ids\[0, 0\] = -2"),
    (lambda x, ids, wts: dict(workspace=MoEWorkspace(4, 2, 256, 192)), ValueError, "T = 6 tokens exceeds workspace.max_tokens = 4"),
    (lambda x, ids, wts: dict(workspace=MoEWorkspace(8, 1, 256, 192)), ValueError, "top-k = 2 exceeds workspace.top_k = 1"),
    (lambda x, ids, wts: dict(workspace=MoEWorkspace(8, 2, 256, 128)), ValueError, "workspace was made for H=256, I=128"),
    (lambda x, ids, wts: dict(workspace=MoEWorkspace(8, 2, 256, 192, fp8=False)), ValueError, "fp8=True"),
    (lambda x, ids, wts: dict(workspace="ws"), TypeError, "workspace must be a MoEWorkspace"),
    (lambda x, ids, wts: dict(weights="w"), TypeError, "weights must be a MoEWeights"),
])
def test_fused_moe_errors_name_the_argument(moe, change, exc, match):
    w, x, ids, wts = moe
    kw = dict(hidden=x, weights=w, topk_ids=ids, topk_weights=wts)
    kw.update(change(x, ids, wts))
    with pytest.raises(exc, match=match):
        fused_moe(kw.pop("hidden"), kw.pop("weights"), kw.pop("topk_ids"), kw.pop("topk_weights"), **kw)


def test_workspace_sizes():
    ws = MoEWorkspace(32, 8, 4096, 192)
    assert ws.inter.shape == (256, 192) and ws.xq.shape == (32, 4096) and ws.xs.shape == (32, 32)
    # the expert-form Down's partials and index: one window's pairs (here all 256 of them)
    assert ws.y.shape == (256, 4096) and ws.y.dtype == torch.bfloat16
    assert ws.down_index.shape == (3 * 256 + 2,) and ws.down_index.dtype == torch.int32
    assert ws.nbytes == 256 * 192 * 2 + 32 * 4096 + 32 * 32 * 4 + 256 * 4096 * 2 + (3 * 256 + 2) * 4
    bf = MoEWorkspace(32, 8, 4096, 192, fp8=False)
    assert bf.xq.numel() == 0 and bf.xs.numel() == 0 and bf.y.shape == (256, 4096)
    # y never exceeds one window (8192 pairs), however large max_tokens
    big = MoEWorkspace(4096, 8, 128, 64, fp8=False)
    assert big.y.shape == (8192, 128) and big.down_index.numel() == 3 * 8192 + 2
    with pytest.raises(ValueError, match="top_k must be in 1..16"):
        MoEWorkspace(32, 17, 4096, 192)
    with pytest.raises(ValueError, match="hidden_size must be a multiple of 128"):
        MoEWorkspace(32, 8, 100, 192)


def test_cached_workspace_grows_outside_capture_only():
    dev = torch.device("cpu")
    a = cached_workspace(5, 4, 128, 64, True, dev, False, "t")
    assert a.max_tokens == 8 and a.top_k == 4
    assert cached_workspace(8, 2, 128, 64, True, dev, False, "t") is a
    assert cached_workspace(3, 4, 128, 64, True, dev, True, "t") is a and a.captured  # fits: used as is
    with pytest.raises(RuntimeError, match="during CUDA-graph capture"):
        cached_workspace(9, 4, 128, 64, True, dev, True, "t")
    b = cached_workspace(9, 8, 128, 64, True, dev, False, "t")
    assert b is not a and (b.max_tokens, b.top_k) == (16, 8)
    from hpc_moe import workspace as wsmod

    assert any(kept is a for kept in wsmod._KEPT_FOR_GRAPHS)  # a captured graph may still read it
    wsmod.clear_cache()


def test_public_names():
    assert hpc_moe.__version__ == "0.2.0"
    assert {"MoEWeights", "MoEWorkspace", "fused_moe"} <= set(hpc_moe.__all__)


def test_bench_moe_case_table_builds_on_the_cpu():
    """benchmarks/bench_moe.py imports without a GPU and its --dry-run case table has every brief case."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_moe.py"
    spec = importlib.util.spec_from_file_location("bench_moe", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_moe"] = bench  # dataclasses look their module up there
    spec.loader.exec_module(bench)
    table = bench.case_table(list(bench.MODELS.values()), bench.DTYPES, (), quick=False)
    assert len(table) == (9 + 7 + 9 + 9) * 3
    ep8 = [r for r in table if r["model"] == "hy3_ep8"]
    assert sorted({r["T"] for r in ep8}) == [4, 8, 16, 32, 64, 128, 256] and all(r["ep"] == 8 for r in ep8)
    t1 = next(r for r in table if r["model"] == "hy3_tp8" and r["dtype"] == "fp8_block" and r["T"] == 1)
    assert t1["experts_hit"] == 8 and 4.3 < t1["floor_us"] < 4.5  # BRIEF 3.3: 18.9 MB, 4.4 us
    assert all(r["copies"] * r["bytes"] >= bench.ROTATION_BYTES or r["copies"] == bench.MAX_COPIES for r in table)
    assert len(bench.case_table(list(bench.MODELS.values()), bench.DTYPES, (), quick=True)) < len(table)


# ---- the public path on the GPU (custom op, workspace cache, graphs, check_ids, torch.compile) ----

def _gpu_case(quant, T=33, E=8, k=4, ep_size=2, seed=0):
    dev = torch.device("cuda")
    t = {n: v.to(dev) for n, v in _tensors(quant, E=E // ep_size, gate_up_scales=quant == "fp8_tensor",
                                              seed=seed).items()}
    w = MoEWeights.prepare(**t, quant=quant, ep_rank=1, ep_size=ep_size)
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(-1, E, (T, k), generator=g, dtype=torch.int32).to(dev)
    wts = torch.rand(T, k, generator=g).to(dev)
    x = torch.randn(T, 256, generator=g).to(torch.bfloat16).to(dev)
    return w, x, ids, wts


@pytest.mark.gpu
@pytest.mark.parametrize("quant", ["bf16", "fp8_tensor", "fp8_block"])
def test_gpu_public_path_matches_kernels_and_reference(quant):
    from hpc_moe import kernels

    w, x, ids, wts = _gpu_case(quant)
    ws = w.workspace(64, 4)
    out = torch.full_like(x, float("nan"))
    fused_moe(x, w, ids, wts, out=out, workspace=ws)
    direct = torch.full_like(x, float("nan"))
    kernels.run_fused_moe(w, x, ids, wts, None, direct, w.workspace(33, 4))
    assert torch.equal(out, direct)
    assert torch.equal(fused_moe(x, w, ids, wts), out)  # cached workspace, allocated output
    ref = reference_from_prepared(w, x, ids, wts)
    cos = torch.nn.functional.cosine_similarity(out.double().flatten(), ref.flatten(), dim=0).item()
    assert cos >= (0.99999 if quant == "bf16" else 0.9997), cos


@pytest.mark.gpu
def test_gpu_graph_replay_with_new_routing_and_cached_workspace():
    w, x, ids, wts = _gpu_case("fp8_block")
    ws = w.workspace(33, 4)
    out = torch.empty_like(x)
    fused_moe(x, w, ids, wts, out=out, workspace=ws)  # warm: builds the extension outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fused_moe(x, w, ids, wts, out=out, workspace=ws)
    _, x2, ids2, wts2 = _gpu_case("fp8_block", seed=5)
    x.copy_(x2), ids.copy_(ids2), wts.copy_(wts2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fused_moe(x2, w, ids2, wts2, workspace=ws))
    # Without a workspace: the cache serves a capture of a size it already holds, and refuses to grow inside one.
    fused_moe(x, w, ids, wts)
    with pytest.raises(RuntimeError, match="during CUDA-graph capture"):
        with torch.cuda.graph(torch.cuda.CUDAGraph()):
            big = torch.zeros(4096, 256, dtype=torch.bfloat16, device="cuda")
            fused_moe(big, w, torch.zeros(4096, 4, dtype=torch.int32, device="cuda"),
                      torch.zeros(4096, 4, device="cuda"))


@pytest.mark.gpu
def test_gpu_out_of_range_ids_skipped_or_raised():
    w, x, ids, wts = _gpu_case("bf16")
    bad = ids.clone()
    bad[0, 0], bad[1, 1] = 1000, -7
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[-1, num_experts = 8\)"):
        fused_moe(x, w, bad, wts, check_ids=True)
    skipped = ids.clone()
    skipped[0, 0], skipped[1, 1] = -1, -1
    assert torch.equal(fused_moe(x, w, bad, wts), fused_moe(x, w, skipped, wts))  # no fault, skipped like -1


@pytest.mark.gpu
def test_gpu_torch_compile_equals_eager():
    w, x, ids, wts = _gpu_case("fp8_tensor")
    ws = w.workspace(33, 4)
    eager = fused_moe(x, w, ids, wts, workspace=ws)

    @torch.compile(backend="aot_eager", fullgraph=True)
    def layer(x, ids, wts):
        return fused_moe(x, w, ids, wts, workspace=ws)

    assert torch.equal(layer(x, ids, wts), eager)
