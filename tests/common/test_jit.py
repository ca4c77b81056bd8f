"""JIT build and cache behaviour (CPU only: builds and imports, launches nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpc_common.jit import JitError, build_extension, load_extension
from hpc_common.jit.cache_key import included_files

HERE = Path(__file__).resolve().parent / "tiny_ext"
REPO = Path(__file__).resolve().parents[2]


def _copy_ext(dst: Path) -> Path:
    shutil.copytree(HERE, dst)
    return dst


def _sources(d: Path):
    return [d / "tiny.cu", d / "bindings.cpp"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    c = tmp_path / "cache"
    monkeypatch.setenv("HPC_JIT_CACHE_DIR", str(c))
    monkeypatch.delenv("HPC_JIT_DISABLE", raising=False)
    return c


def test_build_load_and_cache_hit(tmp_path, cache, capfd):
    src = _copy_ext(tmp_path / "src")
    mod = load_extension("_tiny_a", _sources(src))
    assert mod.value() == 42
    err = capfd.readouterr().err
    assert "building _tiny_a" in err  # a visible progress line on the first build
    so = build_extension("_tiny_a", _sources(src))
    assert "building" not in capfd.readouterr().err  # second call: cache hit, silent
    assert so.parent.parent == cache
    assert not list(cache.glob(".*-*-*/")), "temporary build folders must not be left behind"


def test_key_follows_included_header(tmp_path, cache):
    src = _copy_ext(tmp_path / "src")
    first = build_extension("_tiny_b", _sources(src))
    assert (src / "tiny.cuh") in included_files(_sources(src), [])
    (src / "tiny.cuh").write_text("#pragma once\n#define TINY_VALUE 99\n")
    second = build_extension("_tiny_b", _sources(src))
    assert first.parent != second.parent


def test_key_follows_flags(tmp_path, cache):
    src = _copy_ext(tmp_path / "src")
    a = build_extension("_tiny_c", _sources(src))
    b = build_extension("_tiny_c", _sources(src), cuda_flags=["-DEXTRA_FLAG=1"])
    assert a.parent != b.parent


def test_jit_disable_forbids_build_but_allows_cached(tmp_path, cache, monkeypatch):
    src = _copy_ext(tmp_path / "src")
    monkeypatch.setenv("HPC_JIT_DISABLE", "1")
    with pytest.raises(JitError, match="HPC_JIT_DISABLE"):
        build_extension("_tiny_d", _sources(src))
    monkeypatch.delenv("HPC_JIT_DISABLE")
    built = build_extension("_tiny_d", _sources(src))
    monkeypatch.setenv("HPC_JIT_DISABLE", "1")
    assert build_extension("_tiny_d", _sources(src)) == built


def test_missing_nvcc_is_a_clear_error(tmp_path, cache, monkeypatch):
    from hpc_common.jit import toolchain

    monkeypatch.setenv("HPC_NVCC", str(tmp_path / "no-such-nvcc"))
    toolchain.find_nvcc.cache_clear()
    toolchain.nvcc_version.cache_clear()
    try:
        with pytest.raises(JitError, match="HPC_NVCC"):
            build_extension("_tiny_e", _sources(_copy_ext(tmp_path / "src")))
    finally:
        monkeypatch.delenv("HPC_NVCC")
        toolchain.find_nvcc.cache_clear()
        toolchain.nvcc_version.cache_clear()


def test_compile_error_is_reported(tmp_path, cache):
    src = _copy_ext(tmp_path / "src")
    (src / "tiny.cu").write_text("this is not C++;\n")
    with pytest.raises(JitError, match="build failed"):
        build_extension("_tiny_f", _sources(src))


def test_two_processes_build_the_same_key_at_once(tmp_path, cache):
    src = _copy_ext(tmp_path / "src")
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO / 'packages' / 'hpc-common' / 'src')!r})
        from hpc_common.jit import load_extension
        m = load_extension("_tiny_g", [{str(src / 'tiny.cu')!r}, {str(src / 'bindings.cpp')!r}])
        print("VALUE", m.value())
    """)
    env = dict(os.environ, HPC_JIT_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "VALUE 42" in out
    builds = sum(err.count("building _tiny_g") for _, err in outs)
    assert builds == 1, "the lock must make the second process reuse the first one's build"
    finals = [d for d in cache.iterdir() if d.is_dir() and d.name.startswith("_tiny_g-")]
    assert len(finals) == 1


def test_key_is_the_same_for_two_copies_at_different_paths(tmp_path, cache):
    # Two clones of one commit (or one wheel in two venvs) must share a prebuilt cache: the key
    # hashes contents and relative names, never where the checkout lies.
    from hpc_common.jit.build import build_dir_for

    a = _copy_ext(tmp_path / "clone_a" / "src")
    b = _copy_ext(tmp_path / "somewhere" / "else" / "clone_b" / "src")
    key_a = build_dir_for("_tiny_h", _sources(a), [a])[1]
    key_b = build_dir_for("_tiny_h", _sources(b), [b])[1]
    assert key_a == key_b
    (b / "tiny.cuh").write_text("#pragma once\n#define TINY_VALUE 7\n")
    assert build_dir_for("_tiny_h", _sources(b), [b])[1] != key_a, "a header's contents must change the key"
    built_a = build_extension("_tiny_h", _sources(a))
    assert build_extension("_tiny_h", _sources(_copy_ext(tmp_path / "clone_c"))) == built_a, "second copy: cache hit"


def test_key_of_the_shipped_extensions_ignores_the_checkout_path(tmp_path):
    from hpc_common.jit.build import build_dir_for

    pkg = REPO / "packages" / "hpc-common" / "src" / "hpc_common"
    copy = tmp_path / "moved" / "hpc_common"
    shutil.copytree(pkg / "csrc", copy / "csrc")
    shutil.copytree(pkg / "include", copy / "include")
    here = build_dir_for("_k", sorted((pkg / "csrc").glob("*.c*")), [pkg / "include"])[1]
    there = build_dir_for("_k", sorted((copy / "csrc").glob("*.c*")), [copy / "include"])[1]
    # COMMON_INCLUDE_DIR (hpc_common's own headers) joins both builds; the copy's headers are the same bytes.
    assert here == there


def test_tests_never_build_into_the_home_folder():
    from hpc_common import env

    assert Path.home() not in env.jit_cache_dir().parents, "tests/conftest.py must point HPC_JIT_CACHE_DIR away from ~"
