"""Property tests of the FP8 quantisers: shapes and seeds are drawn, never tensor contents.
CPU: reference invariants. GPU: kernel == reference bit for bit on awkward shapes, strides
and misaligned starts (the scalar path), with special values mixed in."""

from __future__ import annotations

import pytest
import torch
from _fp8_cases import DTYPES, MODES, assert_same, make_input, run, run_ref, shape_for
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hpc_common.fp8 import reference as ref
from hpc_common.testing import assert_bitwise_equal
from hpc_common.testing.strategies import dim, seeds


@settings(deadline=None, max_examples=40)
@given(m=dim(1, 40), n=dim(1, 700), group=st.sampled_from([32, 64, 128, 100]), seed=seeds(),
       dtype=st.sampled_from(DTYPES))
def test_reference_group_is_per_token_on_each_group(m, n, group, seed, dtype):
    x = make_input((m, n), dtype, seed)
    q, s = ref.quantize_per_token_group_ref(x, group)
    for g0 in range(0, n, group):
        qg, sg = ref.quantize_per_token_ref(x[:, g0:g0 + group])
        assert_bitwise_equal(q[:, g0:g0 + group].view(torch.uint8), qg.view(torch.uint8))
        assert_bitwise_equal(s[:, g0 // group:g0 // group + 1], sg)


@settings(deadline=None, max_examples=40)
@given(m=dim(1, 64), n=dim(1, 1100), seed=seeds(), dtype=st.sampled_from(DTYPES), ue8m0=st.booleans())
def test_reference_error_bound_and_scale_range(m, n, seed, dtype, ue8m0):
    x = make_input((m, n), dtype, seed, special=False)
    q, s = ref.quantize_per_token_ref(x, ue8m0)
    xf = x.float()
    assert torch.isfinite(s).all() and (s >= ref.AMAX_FLOOR / 448 * (1 - 1e-6)).all()
    d = ref.dequantize_ref(q, s)
    assert ((d - xf).abs() <= torch.maximum(xf.abs() * 2.0**-4, s * 2.0**-10) * (1 + 1e-6)).all()
    assert (q.float().abs() <= 448).all()


@pytest.mark.gpu
@settings(deadline=None, max_examples=60)
@given(mode=st.sampled_from(list(MODES)), m=dim(1, 300), n=dim(1, 2100), dtype=st.sampled_from(DTYPES),
       ue8m0=st.booleans(), seed=seeds(), col0=st.sampled_from([0, 0, 1, 3]), pad=st.sampled_from([0, 0, 5, 64]),
       group=st.sampled_from([128, 128, 64]))
@example(mode="group", m=1, n=128, dtype=torch.bfloat16, ue8m0=False, seed=0, col0=0, pad=0, group=128)
@example(mode="group", m=7, n=129, dtype=torch.bfloat16, ue8m0=False, seed=1, col0=0, pad=0, group=128)
@example(mode="group_col", m=5, n=127, dtype=torch.float32, ue8m0=True, seed=2, col0=0, pad=0, group=128)
@example(mode="per_token", m=3, n=4097, dtype=torch.float16, ue8m0=False, seed=3, col0=0, pad=0, group=128)
@example(mode="per_token", m=2, n=2048, dtype=torch.bfloat16, ue8m0=False, seed=4, col0=0, pad=0, group=128)
@example(mode="per_head", m=9, n=128, dtype=torch.bfloat16, ue8m0=False, seed=5, col0=0, pad=0, group=128)
@example(mode="per_tensor", m=1, n=2049, dtype=torch.bfloat16, ue8m0=False, seed=6, col0=0, pad=0, group=128)
@example(mode="per_tensor", m=255, n=257, dtype=torch.float32, ue8m0=True, seed=7, col0=1, pad=5, group=128)
def test_kernel_matches_reference(mode, m, n, dtype, ue8m0, seed, col0, pad, group):
    if mode == "per_tensor_static":
        ue8m0 = False
    dev = torch.device("cuda", torch.cuda.current_device())
    if MODES[mode] == 3:
        m, heads = max(1, m // 8), 1 + seed % 8
        n = min(n, 600)
    else:
        heads = 4
    shape = list(shape_for(mode, m, n, heads))
    shape[-1] += col0 + pad
    x = make_input(tuple(shape), dtype, seed, device=dev)[..., col0:col0 + n]
    repro = f"repro: mode={mode} shape={tuple(x.shape)} dtype={dtype} ue8m0={ue8m0} seed={seed} col0={col0} pad={pad}"
    got = run(mode, x, ue8m0=ue8m0, group_size=group)
    assert_same(got, run_ref(mode, x, ue8m0=ue8m0, group_size=group), what=repro)
