"""The BF16x2 wgmma kernel's per-CTA timeline diagnostics (router_timeline.cuh): with
router_gemm.DIAG["timeline"] set the output keeps its bits and every CTA's stamps are present and
in order, for each split mode (none, cluster, workspace last-arrival / all-reduce, multicast) and
the x-in-registers tile. CPU tests of the Python side."""

from __future__ import annotations

import pytest
import torch
from hpc_common.testing import assert_bitwise_equal
from hpc_router_gemm import _ext
from hpc_router_gemm.heuristics import TILE_SHAPES, Plan, bf16x2_tiles
from hpc_router_gemm.router_gemm import DIAG, _timeline_ptr

from ._cases import launch_poisoned, make_inputs, router_weight

SLOTS = 16
(ENTRY, SETUP, ISSUE0, ISSUE_LAST, LANDED_LAST, DATA, LOOP_END, RED_START, RED_GO, EXIT, SMID, BLOCKS, CLK0, CLK1,
 LOOP_END_WG1) = range(15)
# %globaltimer advances in 32 ns steps on the H200, and two reads in program order by one thread were seen one
# step apart the wrong way (whole GPU suite of 2f2200b, wide96rsf_s2: the reduction's go 32 ns after the exit,
# both stamped by the owner warpgroup's first thread). Orders are asserted to within that one step.
TIMER_STEP_NS = 32


def in_order(*stamps: int) -> bool:
    """Each stamp no earlier than the one before it, to within one %globaltimer step."""
    return all(b + TIMER_STEP_NS >= a for a, b in zip(stamps, stamps[1:]))


# ----------------------------------------------------------------------------- CPU tests


def test_timeline_variant_is_its_own_module():
    assert _ext.variant_tag(("-DHPC_ROUTER_TIMELINE=1",)) == "HPC_ROUTER_TIMELINE_1"
    assert DIAG == {"timeline": None, "defines": ()}  # the library never records nor switches builds


def test_timeline_buffer_is_checked():
    with pytest.raises(ValueError, match="64-bit words"):
        _timeline_ptr(torch.zeros(16, dtype=torch.int64), 1)  # not on the GPU


# ----------------------------------------------------------------------------- GPU tests

gpu = pytest.mark.gpu


@gpu
@pytest.mark.parametrize("plan", [Plan("wide96f", 2), Plan("wide96f", 1), Plan("wide96f_ws", 2), Plan("wide96f_wsp", 4),
                                  Plan("wide96_wsm", 1), Plan("wide96rsf", 2), Plan("narrow", 8)], ids=lambda p: p.name)
def test_timeline_keeps_bits_and_orders_stamps(plan, monkeypatch):
    M, K, N = 800, 4096, 192  # 7 M tiles: a partial last one, and an odd count for multicast
    x, _ = make_inputs(M, K, N, seed=5)
    rw = router_weight(K, N, 0)
    base = launch_poisoned(x, rw, plan)
    ctas = bf16x2_tiles(plan.tile, M, N, plan.multicast) * plan.splits
    tl = torch.zeros(ctas * SLOTS, dtype=torch.int64, device="cuda")
    monkeypatch.setitem(DIAG, "timeline", tl)
    out = launch_poisoned(x, rw, plan)
    torch.cuda.synchronize()
    monkeypatch.setitem(DIAG, "timeline", None)
    assert_bitwise_equal(out, base, name=f"timeline on vs off {plan.name}")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    two_wg = TILE_SHAPES[plan.tile][0] == 128  # a second consumer warpgroup stamps LOOP_END_WG1
    blocks = 0
    # Orders asserted: within one thread, or across threads where one event causes the other.
    for c, r in enumerate(tl.view(ctas, SLOTS).cpu().tolist()):
        assert 0 < r[ENTRY] and in_order(r[ENTRY], r[SETUP], r[DATA], r[LOOP_END], r[EXIT]), (c, r)  # thread 0
        assert in_order(r[ENTRY], r[ISSUE0], r[ISSUE_LAST], r[LANDED_LAST]), (c, r)  # the producer thread
        assert in_order(r[ENTRY], r[LOOP_END_WG1]) if two_wg else r[LOOP_END_WG1] == 0, (c, r)
        if plan.splits > 1:
            assert in_order(r[LOOP_END], r[RED_START], r[RED_GO], r[EXIT]), (c, r)
        else:
            assert r[RED_START] == r[RED_GO] == 0, (c, r)
        assert 0 <= r[SMID] < sms and r[CLK1] > r[CLK0] > 0, (c, r)
        blocks += r[BLOCKS]
    # Every CTA ran its K range: the tiles' K blocks add up (multicast: the padded tile count).
    assert blocks == bf16x2_tiles(plan.tile, M, N, plan.multicast) * (K // 64), blocks
