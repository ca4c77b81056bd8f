"""CPU tests of hpc_moe.heuristics (pure functions of the shape) and of run_fused_moe's `path` check."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


@settings(deadline=None, max_examples=50)
@given(T=st.integers(1, 8192), top_k=st.integers(1, 16), E=st.sampled_from([8, 24, 128, 192]),
       H=st.sampled_from([128, 2048, 4096]), I=st.sampled_from([64, 192, 768, 1536]),
       quant=st.sampled_from(["bf16", "fp8_tensor", "fp8_block"]), sms=st.sampled_from([78, 114, 132]))
def test_gemm_path_is_a_known_path_and_pure(T, top_k, E, H, I, quant, sms):
    from hpc_moe import heuristics

    got = heuristics.gemm_path(T, top_k, E, H, I, quant, sms)
    assert got in heuristics.PATHS
    assert got == heuristics.gemm_path(T, top_k, E, H, I, quant, sms)


def test_paths_match_the_kernel_codes():
    from hpc_moe import heuristics, kernels

    assert tuple(kernels.PATH_CODES) == heuristics.PATHS
    assert kernels.PATH_CODES == {"ring": 0, "bulk": 1}  # hpc::moe::Path


def test_unknown_path_is_rejected_before_any_launch():
    import torch
    from hpc_moe import kernels

    hidden = torch.zeros(1, 128, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="path"):
        kernels.run_fused_moe(None, hidden, torch.zeros(1, 1, dtype=torch.int32), torch.ones(1, 1), None,
                              torch.empty_like(hidden), None, path="tma")
