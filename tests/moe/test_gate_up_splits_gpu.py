"""GPU tests of the Gate-Up split-K (moe_gate_up_split.cuh), forced with run_fused_moe(gate_up_splits=S): for
every format, S in {2, 4, 8} and T in {1, 2, 5, 16} against the float64 reference of test_fused_moe_gpu (EP rank
1 of 2 with ids of other ranks and -1), bitwise determinism run to run, PDL on = off = unfused, CUDA-graph replay
with new routing = eager, an expert with several 16-pair chunks, and the arrival counters left at zero after
every call (the next launch and every graph replay depend on it)."""

from __future__ import annotations

import pytest
import torch

from test_fused_moe_gpu import QUANTS, _check_close, _reference, _run, _setup

pytestmark = pytest.mark.gpu

SPLITS = (2, 4, 8)


def _bits(t):
    return t.view(torch.int16)


def _counters_zero(c, tag):
    torch.cuda.synchronize()
    assert not c.ws.split_counters.any(), f"{tag}: a split counter left non-zero"


@pytest.mark.parametrize("T", [1, 2, 5, 16])
@pytest.mark.parametrize("S", SPLITS)
@pytest.mark.parametrize("quant", QUANTS)
def test_splits_match_reference_and_repeat(quant, S, T):
    # H = 1024: 8 K stages FP8, 16 BF16, so every S divides them; EP rank 1 of 2 over 64 global experts
    c = _setup(quant, T, 1024, 192, 64, 8, 2, 1, "uniform", 100 + T, shared=T % 2 == 1)
    tag = f"quant={quant} S={S} T={T}"
    out = _run(c, gate_up_splits=S)
    again = _run(c, gate_up_splits=S)
    _counters_zero(c, tag)
    ref = _reference(c)
    _check_close(out, ref, c.weights.quant, tag)
    assert torch.equal(_bits(out), _bits(again)), f"{tag}: not bitwise deterministic"
    _check_close(_run(c, gate_up_splits=1), ref, c.weights.quant, f"{tag} (S = 1)")


@pytest.mark.parametrize("S", SPLITS)
@pytest.mark.parametrize("quant", QUANTS)
def test_splits_hy3_tp8_one_token(quant, S):
    # Hy3 TP8: E = 192, top-8, H = 4096, I = 192 (the T = 1 row the split is for)
    c = _setup(quant, 1, 4096, 192, 192, 8, 1, 0, "uniform", 7)
    out = _run(c, gate_up_splits=S)
    _counters_zero(c, f"{quant} S={S}")
    _check_close(out, _reference(c), c.weights.quant, f"hy3 T=1 quant={quant} S={S}")


@pytest.mark.parametrize("S", SPLITS)
@pytest.mark.parametrize("quant", QUANTS)
def test_splits_pdl_unfused_and_graph(quant, S):
    T, H, I, E, K = 5, 1024, 192, 64, 8
    c = _setup(quant, T, H, I, E, K, 2, 1, "uniform", 41, shared=True)
    first = _run(c, pdl=True, gate_up_splits=S)
    for kw in ({"pdl": True}, {"pdl": False}, {"unfused": True}):
        again = _run(c, gate_up_splits=S, **kw)
        assert torch.equal(_bits(first), _bits(again)), f"{quant} S={S} {kw}: not bitwise"

    out = torch.empty_like(c.hidden)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _run(c, out=out, gate_up_splits=S)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _run(c, out=out, gate_up_splits=S)
    for seed in (42, 43):  # two replays with new routing: the counters the first one left must be zero
        new = _setup(quant, T, H, I, E, K, 2, 1, "uniform", seed, shared=True)
        c.ids.copy_(new.ids.to(c.ids.dtype))
        c.wts.copy_(new.wts)
        out.fill_(float("nan"))
        graph.replay()
        _counters_zero(c, f"{quant} S={S} replay")
        eager = _run(c, gate_up_splits=S)
        assert torch.equal(_bits(out), _bits(eager)), f"{quant} S={S}: graph replay != eager"
        _check_close(eager, _reference(c), c.weights.quant, f"{quant} S={S} graph routing {seed}")


@pytest.mark.parametrize("quant", QUANTS)
def test_splits_expert_with_several_chunks(quant):
    # T = 16, top-8, half of every row to local expert 0 (duplicates included): 64 pairs, four 16-pair chunks
    c = _setup(quant, 16, 1024, 128, 16, 8, 1, 0, "uniform", 51)
    ids = c.ids.long()
    ids[:, :4] = c.weights.expert_start
    c.ids.copy_(ids.to(c.ids.dtype))
    ref = None
    for S in SPLITS:
        out = _run(c, gate_up_splits=S)
        _counters_zero(c, f"{quant} S={S} chunks")
        ref = _reference(c) if ref is None else ref
        _check_close(out, ref, c.weights.quant, f"{quant} S={S} chunks")
