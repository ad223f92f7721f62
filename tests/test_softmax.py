"""softmax: equal to torch.softmax on any axis and dtype, stable for huge logits, zeros
(not NaN) for all -inf rows, 16-bit floats accumulated in float32, clear errors."""
import numpy as np
import pytest
import torch

import attnlib as al
from conftest import DEVICES, to_np


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape,axis", [((1,), -1), ((7,), 0), ((3, 97), -1), ((3, 97), 0),
                                        ((2, 3, 5), 1), ((2, 3, 5), -3)], ids=str)
def test_matches_torch_softmax(rng, lib, dtype, shape, axis):
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    ref = torch.softmax(torch.from_numpy(x).double(), dim=axis).numpy()
    if lib == "torch":
        x = torch.from_numpy(x)
    out = al.softmax(x, axis=axis)
    assert type(out) is type(x) and out.dtype == x.dtype and out.shape == x.shape
    tol = 1e-12 if dtype == "float64" else 1e-6
    np.testing.assert_allclose(to_np(out), ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_huge_logits_do_not_overflow(lib):
    x = np.array([[1e4, 0.0, -1e4], [1e4, 1e4, 1e4], [-1e4, -1e4, 88.0]], dtype=np.float32)
    if lib == "torch":
        x = torch.from_numpy(x)
    out = to_np(al.softmax(x))
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, [[1, 0, 0], [1 / 3, 1 / 3, 1 / 3], [0, 0, 1]], atol=1e-7)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_all_minus_inf_row_gives_zeros(lib):
    x = np.array([[-np.inf, -np.inf, -np.inf], [0.0, -np.inf, 0.0]])
    if lib == "torch":
        x = torch.from_numpy(x)
    out = to_np(al.softmax(x))
    np.testing.assert_array_equal(out, [[0, 0, 0], [0.5, 0, 0.5]])


def test_shift_invariance_and_list_input():
    np.testing.assert_allclose(al.softmax([1.0, 2.0, 3.0]), al.softmax(np.array([101.0, 102.0, 103.0])))
    np.testing.assert_allclose(al.softmax([1.0, 2.0, 3.0]).sum(), 1.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_16bit_floats_accumulate_in_float32(rng, device, dtype):
    # 1024 logits: summing 1024 float16 terms in float16 would lose about 3 digits
    x = torch.from_numpy(rng.standard_normal((3, 1024)).astype(np.float32)).to(device)
    out = al.softmax(x.to(dtype))
    assert out.dtype == dtype and out.device == x.device
    ref = torch.softmax(x.to(dtype).float(), dim=-1).to(dtype)  # float32 accumulation
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert abs(out.float().sum(-1) - 1).max() < 0.02


def test_numpy_float16_is_kept(rng):
    x = rng.standard_normal((2, 5)).astype(np.float16)
    out = al.softmax(x)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out, al.softmax(x.astype(np.float32)), atol=1e-3)


def test_empty_axis_and_scalar():
    assert al.softmax(np.zeros((3, 0))).shape == (3, 0)
    assert al.softmax(np.float64(3.0)) == 1.0


@pytest.mark.parametrize("x,exc,words", [
    (np.array([1, 2, 3]), TypeError, ["x", "int64", "astype"]),
    (torch.tensor([1, 2, 3]), TypeError, ["x", "int64", ".float()"]),
    ("abc", TypeError, ["x", "str"]),
], ids=["numpy_int", "torch_int", "string"])
def test_bad_input_raises_a_message_that_names_the_argument(x, exc, words):
    with pytest.raises(exc) as info:
        al.softmax(x)
    for w in words:
        assert w in str(info.value)


def test_axis_out_of_range_names_axis():
    with pytest.raises(ValueError, match="axis=2"):
        al.softmax(np.ones((2, 3)), axis=2)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("axis", [None, (0, 1), 1.0, True, "1"], ids=["None", "tuple", "float", "bool", "str"])
def test_axis_must_be_one_int(lib, axis):
    """``axis=None``, ``(0, 1)`` or ``1.0`` used to give raw Python errors."""
    x = np.ones((2, 3)) if lib == "numpy" else torch.ones(2, 3, dtype=torch.float64)
    with pytest.raises(TypeError) as info:
        al.softmax(x, axis=axis)
    msg = str(info.value)
    assert msg.startswith(f"axis must be one int, got {axis!r}") and "reshape" in msg, msg


@pytest.mark.parametrize("axis", [np.int64(0), np.int32(-2), 0])
def test_numpy_integer_axis_is_accepted(axis):
    x = np.random.default_rng(0).standard_normal((2, 3))
    np.testing.assert_allclose(al.softmax(x, axis=axis), al.softmax(x, axis=0))
