"""default_device and to_device: CUDA when available, ATTNLIB_DEVICE overrides (and is
checked), NumPy <-> torch conversions keep dtype and land on the right device."""
import numpy as np
import pytest
import torch

import attnlib as al
from conftest import DEVICES


def test_default_device_follows_cuda(monkeypatch):
    monkeypatch.delenv("ATTNLIB_DEVICE", raising=False)
    assert al.default_device() == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.parametrize("value", ["cpu", " cpu "])
def test_env_var_overrides(monkeypatch, value):
    monkeypatch.setenv("ATTNLIB_DEVICE", value)
    assert al.default_device() == "cpu"


@pytest.mark.parametrize("value", ["gpu", "CUDA0", "numpy", "tpu:0"])
def test_invalid_env_var_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("ATTNLIB_DEVICE", value)
    with pytest.raises(ValueError, match=r"ATTNLIB_DEVICE=.*'cpu', 'cuda' or 'cuda:N'"):
        al.default_device()


def test_env_var_asking_for_missing_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("ATTNLIB_DEVICE", f"cuda:{torch.cuda.device_count()}")
    with pytest.raises(ValueError, match="ATTNLIB_DEVICE='cuda:.*' but this machine has"):
        al.default_device()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64, np.bool_])
def test_numpy_to_torch_keeps_dtype_and_values(device, dtype):
    x = (np.arange(6).reshape(2, 3) % 2).astype(dtype)
    t = al.to_device(x, device)
    assert isinstance(t, torch.Tensor) and t.device.type == device
    assert t.dtype == torch.from_numpy(x).dtype
    np.testing.assert_array_equal(t.cpu().numpy(), x)
    back = al.to_device(t, "numpy")
    assert isinstance(back, np.ndarray) and back.dtype == x.dtype
    np.testing.assert_array_equal(back, x)


def test_default_is_default_device(monkeypatch):
    monkeypatch.setenv("ATTNLIB_DEVICE", "cpu")
    t = al.to_device(np.ones(3))
    assert isinstance(t, torch.Tensor) and t.device.type == "cpu"


def test_cpu_numpy_shares_memory_and_handles_negative_strides():
    x = np.arange(4.0)
    t = al.to_device(x, "cpu")
    x[0] = 7.0
    assert t[0] == 7.0  # no copy on the CPU
    np.testing.assert_array_equal(al.to_device(x[::-1], "cpu").numpy(), x[::-1])


def test_torch_tensors_move_and_numpy_stays_numpy():
    t = torch.ones(2, requires_grad=True)
    assert al.to_device(t, "cpu") is t
    n = al.to_device(t * 2, "numpy")  # detached: no error for tensors that need grad
    assert isinstance(n, np.ndarray) and n.tolist() == [2.0, 2.0]
    x = np.ones(2)
    assert al.to_device(x, "numpy") is x
    assert al.to_device([1.0, 2.0], "numpy").tolist() == [1.0, 2.0]


def test_bfloat16_becomes_float32_numpy():
    n = al.to_device(torch.tensor([1.5], dtype=torch.bfloat16), "numpy")
    assert n.dtype == np.float32 and n[0] == 1.5


def test_bad_device_names_the_argument():
    with pytest.raises(ValueError, match="device='gpu0' is not a device"):
        al.to_device(np.ones(2), "gpu0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cuda_on_a_cpu_only_machine_is_a_clear_error():
    with pytest.raises(ValueError, match="no CUDA"):
        al.to_device(np.ones(2), "cuda")
