"""Shared inputs and checks of the router GEMM tests."""

from __future__ import annotations

import torch
from hpc_common.testing import assert_bitwise_equal, poisoned_empty

from hpc_router_gemm.reference import router_gemm_reference, topk_experts, topk_gap

# (K, N): the generic sweep shape, LongCat-Flash Chat, LongCat-Flash-Lite.
SHAPES = [(4096, 192), (6144, 768), (3072, 384)]
MAX_ABS_ERR = 1e-4  # the accuracy goal (router DESIGN.md), with x ~ N(0, 1) and W ~ 0.02 N(0, 1)


def make_inputs(M: int, K: int, N: int, seed: int, device="cuda"):
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(M, K, device=device, generator=gen).to(torch.bfloat16)
    w = torch.randn(N, K, device=device, generator=gen) * 0.02
    return x, w


def check_against_fp64(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, *, strict_top8: bool, tag: str) -> float:
    """Max |error| <= 1e-4 and the top-8 expert sets of the FP64 reference. With strict_top8
    every token must match; otherwise a token may differ only where the reference's 8th/9th
    gap is below 2 * max|error| (a tie within the error budget)."""
    ref = router_gemm_reference(x, w)
    assert torch.isfinite(out).all(), f"{tag}: non-finite output (an element was not written?)"
    err = (out.double() - ref).abs().max().item()
    assert err <= MAX_ABS_ERR, f"{tag}: max |error| {err:.3e} > {MAX_ABS_ERR}"
    if out.shape[1] >= 9:
        same = (topk_experts(out.double()) == topk_experts(ref)).all(dim=1)
        if strict_top8:
            bad = (~same).nonzero().flatten().tolist()
            assert not bad, f"{tag}: top-8 set differs from FP64 at tokens {bad[:8]} (gaps {topk_gap(ref)[bad[:8]].tolist()})"
        else:
            allowed = topk_gap(ref) < 2 * err
            bad = (~same & ~allowed).nonzero().flatten().tolist()
            assert not bad, f"{tag}: top-8 set differs from FP64 at tokens {bad[:8]} beyond the error budget"
    return err


_WEIGHTS: dict = {}


def router_weight(K: int, N: int, seed: int):
    """A RouterWeight of W ~ 0.02 N(0, 1) drawn from `seed` on the GPU, made once per process
    for each (K, N, seed) (the split into W_hi / W_lo is the expensive part)."""
    from hpc_router_gemm import RouterWeight

    key = (K, N, seed)
    if key not in _WEIGHTS:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        _WEIGHTS[key] = RouterWeight(torch.randn(N, K, device="cuda", generator=gen) * 0.02)
    return _WEIGHTS[key]


def launch_poisoned(x: torch.Tensor, rw, plan, pdl=None, out=None) -> torch.Tensor:
    """One pinned plan (router_gemm.launch) into `out`, or into a fresh NaN-poisoned [M, N]
    output so that an element the kernel does not write shows."""
    from hpc_router_gemm.router_gemm import launch

    if out is None:
        out = poisoned_empty(x.shape[0], rw.weight.shape[0], dtype=torch.float32, device=x.device)
    launch(x, rw, out, plan, pdl=pdl)
    return out


def twin_plan(plan, twin_of: dict):
    """`plan` on the twin tile twin_of[its tile path] (heuristics.RS_TWIN, FUSED_TWIN), with the same
    split suffix (`_ws`, `_wsp`) and split count: the plan that must give the same bits."""
    base, _, suffix = plan.path.partition("_")
    return type(plan)(twin_of[base] + (f"_{suffix}" if suffix else ""), plan.splits)


def check_plan_and_twins(x: torch.Tensor, rw, plan, *, tag: str, twins=()) -> torch.Tensor:
    """One pinned plan against FP64 (top-8 within the error budget), then every (name, plan) of
    `twins` (the same plan again for a rerun, or a plan that must give the same arithmetic)
    bitwise equal to it. Returns the output."""
    out = launch_poisoned(x, rw, plan)
    check_against_fp64(out, x, rw.weight, strict_top8=False, tag=tag)
    for name, twin in twins:
        assert_bitwise_equal(launch_poisoned(x, rw, twin), out, name=f"{name} {tag}")
    return out


def assert_graph_replays(x: torch.Tensor, rw, plan, expected: torch.Tensor, *, name: str, replays: int = 1) -> None:
    """The plan captured in a CUDA graph (capture_on_side_stream) and replayed `replays` times,
    the output poisoned before each: every replay gives `expected`'s bits."""
    out = poisoned_empty(x.shape[0], rw.weight.shape[0], dtype=torch.float32, device=x.device)
    g = capture_on_side_stream(lambda: launch_poisoned(x, rw, plan, out=out))
    for _ in range(replays):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(out, expected, name=name)


def assert_pdl_and_graph_equal_eager(x: torch.Tensor, rw, plan) -> None:
    """The plan launched eagerly, with PDL off and on, and replayed twice from a CUDA graph: the
    same bits every time."""
    eager = launch_poisoned(x, rw, plan)
    for pdl in (False, True):
        assert_bitwise_equal(launch_poisoned(x, rw, plan, pdl=pdl), eager, name=f"pdl={pdl}")
    assert_graph_replays(x, rw, plan, eager, name=f"graph replay {plan}", replays=2)


def capture_on_side_stream(fn) -> torch.cuda.CUDAGraph:
    """fn() once on a side stream (warm-up: module load, a split-K workspace), then captured
    into a CUDA graph on that stream; the current stream waits for both."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=s):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    return g
