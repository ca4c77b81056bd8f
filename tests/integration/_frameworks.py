"""Helpers of the framework tests: run a script or a snippet in a framework venv."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"


def venv_python(name: str) -> Path:
    py = Path(os.environ["HPC_INTEGRATION_VENVS"]) / name / "bin" / "python"
    if not (py.parent.parent / ".ready").exists():
        pytest.fail(f"the {name} venv at {py.parent.parent} is not built (tools/test_integration.sh builds it)")
    return py


def run_in(name: str, args: list[str], env: dict[str, str] | None = None, timeout: int = 600,
           check: bool = True) -> subprocess.CompletedProcess:
    """Run `python args...` in framework venv `name` (from the repository root); the output is kept
    for the assertion message."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("HPC_INTEGRATION_OPS", "VLLM_", "SGLANG_"))}
    full_env.pop("HPC_INTEGRATION_CPU_REFERENCE", None)
    full_env.pop("PYTHONPATH", None)
    full_env.update(env or {})
    p = subprocess.run([str(venv_python(name)), *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
                       timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{name}: {' '.join(args)} exited {p.returncode}\n--- stdout\n{p.stdout[-4000:]}"
                             f"\n--- stderr\n{p.stderr[-6000:]}")
    return p


def run_snippet(name: str, code: str, env: dict[str, str] | None = None, timeout: int = 600):
    """Run a Python snippet in venv `name`; it prints one JSON line prefixed 'RESULT ', returned parsed."""
    p = run_in(name, ["-c", code], env=env, timeout=timeout)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[7:]), p
    raise AssertionError(f"no RESULT line\n--- stdout\n{p.stdout[-4000:]}\n--- stderr\n{p.stderr[-4000:]}")
