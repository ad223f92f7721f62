"""Chapter 1 helpers: the RNN influence is the true Jacobian, the measured receptive
field agrees with real (torch) convolutions, and soft lookups pass gradients."""
import math

import numpy as np
import pytest
import torch

from attnlib import motivation as mo


def test_rnn_influence_matches_torch_autograd_jacobian():
    rnn = mo.TinyRNN(d=6, gain=0.9, seed=3)
    x = np.random.default_rng(4).standard_normal((8, 6))
    W, U = torch.from_numpy(rnn.W), torch.from_numpy(rnn.U)

    def state_at(t, x1):
        h = torch.zeros(6, dtype=torch.float64)
        for s in range(t):
            xs = x1 if s == 0 else torch.from_numpy(x[s])
            h = torch.tanh(h @ W + xs @ U)
        return h

    got = mo.rnn_influence(rnn, x)
    for t in (1, 2, 5, 8):
        J = torch.autograd.functional.jacobian(lambda x1: state_at(t, x1), torch.from_numpy(x[0]))
        assert got[t - 1] == pytest.approx(torch.linalg.matrix_norm(J, ord=2).item(), rel=1e-10)


def test_rnn_states_match_the_recurrence():
    rnn = mo.TinyRNN(d=4, gain=0.5, seed=0)
    x = np.random.default_rng(1).standard_normal((3, 4))
    h = rnn.states(x)
    np.testing.assert_allclose(h[2], np.tanh(h[1] @ rnn.W + x[2] @ rnn.U))


def test_rnn_influence_vanishes_for_gain_below_one():
    x = np.random.default_rng(1).standard_normal((100, 16))
    norms = mo.rnn_influence(mo.TinyRNN(16, gain=0.9), x)
    assert norms[99] < 1e-10 * norms[0]
    # never grows: each step multiplies by a matrix of norm <= gain < 1
    assert (np.diff(norms) <= 1e-15).all()


def test_batched_step_does_the_same_work_as_the_loop_without_the_recurrence():
    rng = np.random.default_rng(2)
    x, W = rng.standard_normal((5, 3, 4)), rng.standard_normal((4, 4))
    np.testing.assert_allclose(mo.batched_step(x, W)[2], np.tanh(x[2] @ W))
    assert mo.rnn_loop(x, W).shape == (3, 4)
    # the loop's last state depends on x[0]; the batched outputs at t > 0 do not
    x2 = x.copy()
    x2[0] += 1.0
    assert not np.allclose(mo.rnn_loop(x2, W), mo.rnn_loop(x, W))
    np.testing.assert_array_equal(mo.batched_step(x2, W)[1:], mo.batched_step(x, W)[1:])


def _torch_conv_support(n, L, k, dilated):
    """Positions whose input influences the last output of L causal torch conv layers."""
    x = torch.zeros(1, 1, n, dtype=torch.float64, requires_grad=True)
    h = x
    for layer in range(L):
        dil = k ** layer if dilated else 1
        h = torch.nn.functional.pad(h, ((k - 1) * dil, 0))
        h = torch.nn.functional.conv1d(h, torch.ones(1, 1, k, dtype=torch.float64), dilation=dil)
    h[0, 0, -1].backward()
    return int((x.grad[0, 0] != 0).sum())


@pytest.mark.parametrize("dilated", [False, True])
@pytest.mark.parametrize("L,k", [(0, 3), (1, 3), (3, 3), (4, 2), (2, 5), (5, 3)])
def test_measured_receptive_field_agrees_with_torch_conv1d(L, k, dilated):
    n = 400
    assert _torch_conv_support(n, L, k, dilated) == mo.conv_reach(n, L, k, dilated=dilated).sum()
    assert mo.conv_reach(n, L, k, dilated=dilated).sum() == mo.receptive_field_formula(L, k, dilated)


@pytest.mark.parametrize("k", [2, 3, 5])
def test_path_length_table_matches_measured_layers(k):
    ns = [2, 3, 9, 10, 27, 28, 100]
    for n, rnn, cnn, dil, att in mo.path_length_table(ns, k):
        assert rnn == n - 1 and att == 1
        assert cnn == mo.layers_to_connect(n, k)
        assert dil == mo.layers_to_connect(n, k, dilated=True)
        assert dil == math.ceil(math.log(n) / math.log(k) - 1e-12)


def test_soft_lookup_passes_gradient_and_hard_lookup_does_not():
    g = torch.Generator().manual_seed(0)
    keys, values = torch.randn(5, 3, generator=g), torch.randn(5, 2, generator=g)
    q = torch.randn(3, generator=g, requires_grad=True)
    soft = mo.soft_lookup(q, keys, values)
    (gs,) = torch.autograd.grad(soft.sum(), q)
    assert gs.abs().sum() > 1e-3
    hard = mo.hard_lookup(q, keys, values)
    assert not hard.requires_grad  # the integer index cuts the graph


def test_soft_lookup_becomes_the_hard_lookup_at_low_temperature():
    rng = np.random.default_rng(5)
    keys, values, q = rng.standard_normal((6, 4)), rng.standard_normal((6, 3)), rng.standard_normal(4)
    np.testing.assert_allclose(mo.soft_lookup(q, keys, values, beta=1e4), mo.hard_lookup(q, keys, values),
                               atol=1e-8)
    # beta = 0: plain average of all values
    np.testing.assert_allclose(mo.soft_lookup(q, keys, values, beta=0.0), values.mean(0), atol=1e-12)


@pytest.mark.parametrize("call", [
    lambda: mo.layers_to_connect(10, 1),
    lambda: mo.path_length_table([10], kernel_size=1),
    lambda: mo.conv_reach(0, 1, 3),
    lambda: mo.conv_reach(10, -1, 3),
    lambda: mo.conv_reach(10, 1, 3, source=10),
])
def test_bad_conv_arguments_raise_a_clear_value_error(call):
    with pytest.raises(ValueError, match="kernel_size|n >= 1|source"):
        call()
