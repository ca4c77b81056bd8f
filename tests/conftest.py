"""Shared fixtures. GPU tests carry the `gpu` marker; selecting them on a machine without
an SM90 GPU is an error, not a skip (a skipped GPU test is not a pass)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# Every test that builds a kernel builds into a folder of the test run, never the user's
# ~/.cache: CI (tools/test.sh) and gpu_check.sh set HPC_JIT_CACHE_DIR; a plain `pytest` gets a
# folder under the temporary directory that later runs reuse.
if not os.environ.get("HPC_JIT_CACHE_DIR"):
    os.environ["HPC_JIT_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"hpc_ops_test_jit_{os.getuid()}")


def _hopper_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
    except Exception:
        return False


@pytest.hookimpl(trylast=True)  # after `-m` deselection, so only selected tests count
def pytest_collection_modifyitems(config, items):
    wants_gpu = any(item.get_closest_marker("gpu") for item in items)
    if wants_gpu and not _hopper_available() and not config.option.collectonly:
        if os.environ.get("HPC_ALLOW_GPU_SKIP") == "1":
            skip = pytest.mark.skip(reason="no SM90 GPU (HPC_ALLOW_GPU_SKIP=1)")
            for item in items:
                if item.get_closest_marker("gpu"):
                    item.add_marker(skip)
            return
        raise pytest.UsageError(
            "GPU tests were selected but no SM90 GPU is visible; run `pytest -m 'not gpu'` on a "
            "CPU machine, or set HPC_ALLOW_GPU_SKIP=1 to skip them knowingly"
        )


@pytest.fixture
def cuda():
    import torch

    return torch.device("cuda", torch.cuda.current_device())
