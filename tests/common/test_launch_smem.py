"""hpc::launch_kernel opts a kernel in to dynamic shared memory whenever dynamic plus static bytes
exceed the 48 KB default, also when the dynamic part alone is <= 48 KB (GPU)."""

from __future__ import annotations

import pytest
import torch

from hpc_common import _ext
from hpc_common.selftest import smem_opt_in, smem_opt_in_reference
from hpc_common.testing import assert_bitwise_equal

pytestmark = pytest.mark.gpu


def test_48kb_dynamic_plus_static_shared_memory_launches(cuda):
    n = _ext.load().SMEM_OPT_IN_FLOATS
    assert n * 4 == 48 * 1024  # exactly the default limit: only the static 1 KB pushes it over
    x = torch.randn(n, device=cuda, generator=torch.Generator(cuda).manual_seed(3))
    y = smem_opt_in(x)
    torch.cuda.synchronize()
    assert_bitwise_equal(y, smem_opt_in_reference(x), name="smem_opt_in vs reference")


def test_smem_opt_in_rejects_a_wrong_shape(cuda):
    with pytest.raises(ValueError, match="smem_opt_in: x"):
        smem_opt_in(torch.zeros(10, device=cuda))
