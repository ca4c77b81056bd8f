"""Programmatic Dependent Launch self-test and the JIT-built extension itself (GPU)."""

from __future__ import annotations

import pytest
import torch

from hpc_common import _ext
from hpc_common.selftest import pdl_chain, pdl_chain_reference
from hpc_common.testing import assert_bitwise_equal

pytestmark = pytest.mark.gpu


def test_extension_loads_and_exports_its_kernels():
    mod = _ext.load()
    for name in ("pdl_chain", "fp8_quant", "FP8_AMAX_BLOCKS_PER_SM", "FP8_AMAX_FLOOR"):
        assert hasattr(mod, name), name
    assert _ext.load() is mod  # loaded once per process


@pytest.mark.parametrize("n", [4097, 1 << 20])
def test_pdl_on_equals_off_and_reference(cuda, n):
    x = torch.randn(n, device=cuda, generator=torch.Generator(cuda).manual_seed(n))
    on = pdl_chain(x, pdl=True)
    off = pdl_chain(x, pdl=False)
    torch.cuda.synchronize()
    assert_bitwise_equal(on, off, name="pdl on vs off")
    assert_bitwise_equal(on, pdl_chain_reference(x), name="pdl vs reference")


@pytest.mark.parametrize("pdl", [True, False])
def test_pdl_under_graph_replay(cuda, pdl):
    x = torch.randn(1 << 18, device=cuda, generator=torch.Generator(cuda).manual_seed(5))
    eager = pdl_chain(x, pdl=pdl).clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        z = pdl_chain(x, pdl=pdl)
    for _ in range(3):
        z.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(z, eager, name=f"replay pdl={pdl}")
    x.copy_(torch.randn(x.shape, device=cuda, generator=torch.Generator(cuda).manual_seed(6)))
    graph.replay()
    torch.cuda.synchronize()
    assert_bitwise_equal(z, pdl_chain_reference(x), name="replay on new input")
