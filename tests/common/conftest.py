"""Fixtures of the hpc-common tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fp8_dispatch import build_probe


@pytest.fixture(scope="session")
def probe(tmp_path_factory) -> Path:
    """The FP8 dispatch probe, default build (_fp8_dispatch.py), built once for every test module."""
    return build_probe(tmp_path_factory)
