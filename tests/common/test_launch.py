"""Launch knobs (CPU) and CUDA-error-to-exception conversion (GPU)."""

import pytest
import torch

import hpc_common
from hpc_common import env


def test_pdl_switch_roundtrip(monkeypatch):
    monkeypatch.delenv("HPC_PDL", raising=False)
    hpc_common.set_pdl(False)
    try:
        assert hpc_common.get_pdl() is False
        hpc_common.set_pdl(True)
        assert hpc_common.get_pdl() is True
    finally:
        hpc_common.set_pdl(None)
    assert hpc_common.get_pdl() is True  # None restored the default
    monkeypatch.setenv("HPC_PDL", "0")
    assert hpc_common.get_pdl() is False
    monkeypatch.setenv("HPC_PDL", "1")
    assert hpc_common.get_pdl() is True


def test_pdl_enabled_restores_the_setting_before(monkeypatch):
    """pdl_enabled: the override inside the block; afterwards the previous state, including "no
    override" (the default follows HPC_PDL again) and an explicit one."""
    monkeypatch.delenv("HPC_PDL", raising=False)
    with hpc_common.pdl_enabled(False):
        assert hpc_common.get_pdl() is False
    monkeypatch.setenv("HPC_PDL", "0")
    assert hpc_common.get_pdl() is False  # no override left behind
    hpc_common.set_pdl(True)
    try:
        with pytest.raises(RuntimeError), hpc_common.pdl_enabled(False):
            raise RuntimeError("leaves the block")
        assert hpc_common.get_pdl() is True
    finally:
        hpc_common.set_pdl(None)


def test_num_sms_override(monkeypatch):
    hpc_common.set_num_sms(7)
    try:
        assert hpc_common.get_num_sms() == 7
    finally:
        hpc_common.set_num_sms(None)
    monkeypatch.setenv("HPC_NUM_SMS", "11")
    assert hpc_common.get_num_sms() == 11
    with pytest.raises(ValueError, match="n must be >= 1"):
        hpc_common.set_num_sms(0)


def test_env_parsing(monkeypatch):
    monkeypatch.setenv("HPC_CUDA_ARCHS", "90a, 100a")
    assert env.cuda_archs() == ["90a", "100a"]
    monkeypatch.setenv("HPC_JIT_CACHE_DIR", "/x/y")
    assert str(env.jit_cache_dir()) == "/x/y"
    monkeypatch.setenv("HPC_JIT_DISABLE", "off")
    assert env.jit_disabled() is False


def test_require_hopper_rejects_cpu_tensor():
    from hpc_common.launch import require_hopper

    with pytest.raises(ValueError, match="op: x must be a CUDA tensor"):
        require_hopper(torch.zeros(1), "x", "op")


@pytest.mark.gpu
def test_num_sms_reads_the_device(monkeypatch):
    monkeypatch.delenv("HPC_NUM_SMS", raising=False)
    assert hpc_common.get_num_sms() == torch.cuda.get_device_properties(0).multi_processor_count


@pytest.mark.gpu
def test_cuda_error_becomes_exception_naming_the_kernel(cuda):
    from hpc_common import _ext

    x = torch.ones(16, device=cuda)
    # A zero-sized grid is an invalid launch configuration: it must surface as a Python error
    # that names the kernel, not as a silent no-op or a sticky device error.
    with pytest.raises(RuntimeError, match="hpc-ops kernel 'pdl_chain' failed"):
        _ext.load().pdl_chain(x.data_ptr(), x.data_ptr(), x.data_ptr(), 0, 0, True,
                              torch.cuda.current_stream().cuda_stream)
    # The error was consumed: later work on the device still runs.
    assert torch.cuda.synchronize() is None and float((x + 1).sum()) == 32.0
