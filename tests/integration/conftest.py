"""Framework integration tests. Tests marked `integration` run scripts inside the per-framework
virtual environments that tools/test_integration.sh builds (HPC_INTEGRATION_VENVS); without
them they are skipped with the command to run. The other tests here need only the project venv."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import _frameworks


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: runs inside the SGLang / vLLM venvs of tools/test_integration.sh")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("HPC_INTEGRATION_VENVS"):
        return
    skip = pytest.mark.skip(reason="needs the framework venvs: run `bash tools/test_integration.sh`")
    for item in items:
        if item.get_closest_marker("integration"):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("tiny_qwen3_moe")
    _frameworks.run_in("vllm", [str(_frameworks.SCRIPTS / "make_tiny_qwen3_moe.py"), str(d)])
    return d
