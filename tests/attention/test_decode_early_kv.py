"""KV loads before the PDL wait (`decode(new_tokens=n)`, DecodeParams::early_kv_tokens; GPU): the plan entries
and the first task's older KV tiles that the TMA producer reads before griddepcontrol.wait give the same bits as the
plain call, whatever share of the first task goes out early (all of it, part, none, more than one lap of the ring),
on static and dynamic plans, several page sizes and both KV dtypes; the first decode after plan_decode never loads
early; and a captured step (plan, then per layer: the newest token's K, V and q written, decode) replays right with
new values for those tokens."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import DecodeOptions
from hpc_common import pdl_enabled
from hpc_common.testing import assert_bitwise_equal, poisoned_empty

from ._cases import FP8, check_accuracy, make_case
from .test_decode import check_counters_zero, run

pytestmark = pytest.mark.gpu

# (lengths, Hkv, group): first tasks of every kind.
CASES = {
    "one_level": ([700, 3000, 1, 0, 129], 2, 4),  # split items of 2-16 parts
    "two_level": ([40_000, 64, 5000], 1, 8),  # a long item over > 24 CTAs
    "short": ([1, 5, 64, 65, 130, 300], 1, 8),  # tasks at or under new_tokens: little or nothing early
    "long_first": ([9000], 1, 16),  # first tasks longer than a lap of the ring
}


def decode_again(case, plan, new_tokens):
    B, Hq = case.q.shape[:2]
    out = poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda")
    ha.decode(case.q, case.k, case.v, case.page_table, case.kv_lens, plan, sm_scale=case.sm_scale,
              k_scale=case.k_scale, v_scale=case.v_scale, q_scale=case.q_scale, out=out, new_tokens=new_tokens)
    return out


@pytest.mark.parametrize("new_tokens", [1, 64, 300])
@pytest.mark.parametrize("static_splits", [None, 3], ids=["dynamic", "static3"])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_early_kv_bitwise_equals_plain(name, kv_dtype, static_splits, new_tokens):
    lens, hkv, group = CASES[name]
    case = make_case(lens, hkv, group, kv_dtype, seed=len(name) + new_tokens)
    with pdl_enabled(True):
        plain, plan = run(case, static_splits=static_splits, producer="tma")
        assert not plan.workspace.fresh_plan, "the first decode after plan_decode runs without early loads"
        early = decode_again(case, plan, new_tokens)
        again = decode_again(case, plan, new_tokens)  # the counters were put back by the early call too
    torch.cuda.synchronize()
    assert_bitwise_equal(early, plain, name=f"early KV vs plain [{case.describe()}]")
    assert_bitwise_equal(again, plain, name="second early call")
    check_counters_zero(plan.workspace)
    if new_tokens == 1 and static_splits is None:
        check_accuracy(early, case, "early KV")


@pytest.mark.parametrize("page_size", [16, 32, 128])
@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_early_kv_other_page_sizes(page_size, kv_dtype):
    case = make_case([5000, 33, 700, 1, 12000], 2, 8, kv_dtype, page_size=page_size, seed=page_size)
    with pdl_enabled(True):
        plain, plan = run(case, producer="tma")
        early = decode_again(case, plan, 1)
    torch.cuda.synchronize()
    assert_bitwise_equal(early, plain, name=f"early KV vs plain, page {page_size}")
    check_accuracy(early, case, "early KV")


def test_early_kv_off_without_pdl_or_tma():
    case = make_case([3000, 20], 1, 8, torch.bfloat16, seed=3)
    with pdl_enabled(False):
        plain, plan = run(case, producer="tma")
        out = decode_again(case, plan, 1)
    with pdl_enabled(True):
        _, plan = run(case, producer="cp_async")
        out2 = decode_again(case, plan, 1)
    torch.cuda.synchronize()
    assert_bitwise_equal(out, plain)
    assert_bitwise_equal(out2, plain)


@pytest.mark.parametrize("kv_dtype", [torch.bfloat16, FP8], ids=["bf16", "fp8"])
def test_captured_step_with_newest_token_written_before_each_layer(kv_dtype):
    """A decode step as a serving engine captures it: plan_decode, then per layer the newest token's K, V (at
    position length - 1) and q written by the kernel right before that layer's decode(new_tokens=1). Replayed with
    new values for those tokens, every layer's output equals the float64 reference on the updated cache and the
    plain eager call bitwise; layer 0 (right after the plan) runs without early loads, layers 1.. with them."""
    lens = [3000, 70, 1, 20000, 640]
    hkv, group, layers = 2, 4, 3
    cases = [make_case(lens, hkv, group, kv_dtype, seed=40 + i) for i in range(layers)]
    B, Hq = cases[0].q.shape[:2]
    page_size = cases[0].k.shape[1]
    pos = torch.tensor(lens, device="cuda") - 1
    rows = torch.arange(B, device="cuda")
    ws = ha.DecodeWorkspace(B, hkv, Hq, max(lens))
    gen = torch.Generator(device="cuda").manual_seed(7)

    def fresh(c):  # new values of the newest token's K / V rows and of q, in the cache's dtype
        kv = torch.randn(2, B, hkv, 128, generator=gen, device="cuda") * (2 if kv_dtype == FP8 else 1)
        return kv.to(c.k.dtype), torch.randn(B, Hq, 128, generator=gen, device="cuda").to(torch.bfloat16)

    new_kv = [fresh(c) for c in cases]
    outs = [poisoned_empty(B, Hq, 128, dtype=torch.bfloat16, device="cuda") for _ in cases]
    flags = []

    def step():
        plan = ha.plan_decode(cases[0].kv_lens, hkv, Hq, workspace=ws, options=DecodeOptions(producer="tma"))
        for c, (kv, q), out in zip(cases, new_kv, outs):
            # Both caches share each case's page table: the newest token of request b lies in page
            # page_table[b, pos // page_size] at row pos % page_size.
            page = c.page_table[rows, pos // page_size].long()
            slot = pos % page_size
            c.k.view(torch.uint8)[page, slot] = kv[0].view(torch.uint8)  # as bytes: no FP8 index_put kernel
            c.v.view(torch.uint8)[page, slot] = kv[1].view(torch.uint8)
            c.q.copy_(q)
            flags.append(not ws.fresh_plan)  # early loads: every layer but the first after the plan
            ha.decode(c.q, c.k, c.v, c.page_table, cases[0].kv_lens, plan, sm_scale=c.sm_scale, k_scale=c.k_scale,
                      v_scale=c.v_scale, out=out, new_tokens=1)

    for c in cases[1:]:  # one lengths tensor for the plan and every layer
        c.kv_lens = cases[0].kv_lens
    with pdl_enabled(True):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            step()  # warm-up (JIT load) outside capture
        torch.cuda.current_stream().wait_stream(s)
        flags.clear()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        assert flags == [False] + [True] * (layers - 1), flags
        for kv, q in new_kv:  # the next step's newest tokens
            nkv, nq = fresh(cases[0])
            kv.copy_(nkv)
            q.copy_(nq)
        for out in outs:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for i, (c, out) in enumerate(zip(cases, outs)):
            check_accuracy(out, c, f"layer {i} after replay")
            eager, _ = run(c)
            assert_bitwise_equal(out, eager, name=f"layer {i}: replay vs eager")
    check_counters_zero(ws)
