"""plan_decode's scheduling arguments on the CPU (runs in CI): the per-item task cost and the
bin-first-task table reach the planner binding, and bad values name the argument."""

from __future__ import annotations

import pytest
import torch

import hpc_attention as ha
from hpc_attention import heuristics

from .test_decode_api import fake  # noqa: F401  (the stand-in extension fixture)

FP8 = torch.float8_e4m3fn


@pytest.mark.parametrize("kv_dtype, want", [(None, heuristics.TASK_COST_TILES_BF16),
                                            (torch.bfloat16, heuristics.TASK_COST_TILES_BF16),
                                            (FP8, heuristics.TASK_COST_TILES_FP8)])
def test_task_cost_follows_the_kv_dtype(fake, kv_dtype, want):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu")
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, kv_dtype=kv_dtype)
    kw = fake.calls[0][1]
    assert kw["task_cost"] == want and plan.task_cost == want
    assert kw["bin_first"] == ws.bin_first.data_ptr() and ws.bin_first.shape == (132, 4)


def test_task_cost_override_and_static_plans(fake):  # noqa: F811
    lens = torch.tensor([5, 0, 200], dtype=torch.int32)
    ws = ha.DecodeWorkspace(3, 2, 8, 256, "cpu", static_splits="auto")
    assert ha.plan_decode(lens, 2, 8, workspace=ws, task_cost=0).task_cost == 0
    assert fake.calls[-1][1]["task_cost"] == 0
    plan = ha.plan_decode(lens, 2, 8, workspace=ws, static_splits="auto")
    assert plan.task_cost == 0  # static plans do not use it


def test_bad_scheduling_arguments_name_the_argument(fake):  # noqa: F811
    lens = torch.tensor([5, 9], dtype=torch.int32)
    ws = ha.DecodeWorkspace(2, 1, 8, 64, "cpu")
    with pytest.raises(ValueError, match="kv_dtype"):
        ha.plan_decode(lens, 1, 8, workspace=ws, kv_dtype=torch.float16)
    with pytest.raises(ValueError, match="task_cost"):
        ha.plan_decode(lens, 1, 8, workspace=ws, task_cost=-1)
    with pytest.raises(ValueError, match="task_cost"):
        ha.plan_decode(lens, 1, 8, workspace=ws, task_cost=heuristics.MAX_TASK_COST + 1)
