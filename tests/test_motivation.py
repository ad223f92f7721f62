"""Chapter 1 helpers: the RNN influence is the true Jacobian, the measured receptive
field agrees with real (torch) convolutions, and soft lookups pass gradients."""
import math

import numpy as np
import pytest
import torch

from attnlib.instruments import motivation as mo


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


@pytest.mark.parametrize("n", [4, 16, 64])
def test_layer_flops_match_the_layers_arithmetic(n):
    d, k = 8, 3
    assert mo.layer_flops("rnn", n, d) == 2 * d * d * (2 * n - 1)      # x U every step, h W from step 2
    assert mo.layer_flops("cnn", n, d, kernel_size=k) == 2 * k * n * d * d
    assert mo.layer_flops("attention", n, d) == 4 * n * n * d         # scores and weights @ values


def test_dependency_depth_grows_with_n_for_the_rnn_only():
    depth = {kind: [mo.dependency_depth(mo.layer_graph(kind, n)[1]) for n in (8, 32)]
             for kind in ("rnn", "cnn", "attention")}
    assert depth["rnn"][1] - depth["rnn"][0] == 5 * 24                  # five operations per step
    assert depth["cnn"][0] == depth["cnn"][1] and depth["attention"][0] == depth["attention"][1]


def test_dependency_depth_of_a_hand_built_chain():
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(10):
        y = torch.sin(y)
    z = y + x.exp()                      # a short branch beside the long chain
    assert mo.dependency_depth(z) == 12  # leaf, 10 sines, the add


@pytest.mark.parametrize("n", [2, 5, 17])
def test_mixing_ops_on_path_counts_the_rnn_steps_and_one_for_attention(n):
    xs, outs = mo.layer_graph("rnn", n)
    assert mo.mixing_ops_on_path(outs[-1], xs[0]) == n
    assert mo.mixing_ops_on_path(outs[-1], xs[-1]) == 1
    xs, outs = mo.layer_graph("attention", n)
    assert mo.mixing_ops_on_path(outs[-1], xs[0]) == 1


def test_mixing_ops_on_path_refuses_an_unconnected_leaf():
    xs, outs = mo.layer_graph("rnn", 4)
    with pytest.raises(ValueError, match="does not depend"):
        mo.mixing_ops_on_path(outs[0], xs[3])       # h_1 was computed before x_4 was read


def test_layer_graph_cnn_is_causal_and_local():
    xs, outs = mo.layer_graph("cnn", 10, kernel_size=3)
    grads = torch.autograd.grad(outs[9].sum(), xs, allow_unused=True)
    reached = [g is not None and bool(g.abs().sum() > 0) for g in grads]
    assert reached == [False] * 7 + [True] * 3


@pytest.mark.parametrize("base", [1, 2, 3])
def test_conv_reach_with_a_dilation_base_matches_torch_conv1d(base):
    n, k, m = 60, 3, 3
    x = torch.zeros(1, 1, n, requires_grad=True)
    y = x
    for layer in range(m):
        gap = base ** layer
        y = torch.nn.functional.conv1d(torch.nn.functional.pad(y, ((k - 1) * gap, 0)),
                                       torch.ones(1, 1, k), dilation=gap)
    (g,) = torch.autograd.grad(y[0, 0, n - 1], x)
    reached_by_last = (g[0, 0] != 0).numpy()[::-1]        # which inputs the last output reads
    np.testing.assert_array_equal(reached_by_last, mo.conv_reach(n, m, k, dilation_base=base))


def test_scalar_rnn_influence_matches_autograd():
    x = np.random.default_rng(2).standard_normal(12)
    w, u = 0.8, 1.3
    got = mo.scalar_rnn_influence(w, u, x)
    x1 = torch.tensor(x[0], dtype=torch.float64, requires_grad=True)
    h = torch.zeros((), dtype=torch.float64)
    for t in range(12):
        h = torch.tanh(w * h + u * (x1 if t == 0 else float(x[t])))
        (dh,) = torch.autograd.grad(h, x1, retain_graph=True)
        assert got[t] == pytest.approx(abs(dh.item()), rel=1e-10)
    assert (got <= abs(u) * abs(w) ** np.arange(12) + 1e-15).all()


def test_independent_steps_read_only_their_own_input():
    x = torch.randn(5, 2, 3, generator=torch.Generator().manual_seed(0))
    W = torch.eye(3)
    np.testing.assert_allclose(mo.independent_steps(x, W).numpy(), torch.tanh(2 * x[-1]).numpy(), rtol=1e-6)


def test_finite_difference_grad_agrees_with_autograd_and_sees_no_slope_in_argmax():
    rng = np.random.default_rng(3)
    keys, values, q = rng.standard_normal((6, 4)), rng.standard_normal((6, 3)), rng.standard_normal(4)
    f = lambda z: float((mo.soft_lookup(z, keys, values) ** 2).sum())  # noqa: E731
    qt = torch.tensor(q, requires_grad=True)
    (auto,) = torch.autograd.grad((mo.soft_lookup(qt, torch.from_numpy(keys), torch.from_numpy(values)) ** 2).sum(), qt)
    np.testing.assert_allclose(mo.finite_difference_grad(f, q, eps=1e-6), auto.numpy(), atol=1e-7)
    hard = lambda z: float((mo.hard_lookup(z, keys, values) ** 2).sum())  # noqa: E731
    assert not mo.finite_difference_grad(hard, q).any()


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
    lambda: mo.conv_reach(10, 1, 3, dilated=True, dilation_base=2),
    lambda: mo.conv_reach(0, 1, 3),
    lambda: mo.conv_reach(10, -1, 3),
    lambda: mo.conv_reach(10, 1, 3, source=10),
])
def test_bad_conv_arguments_raise_a_clear_value_error(call):
    with pytest.raises(ValueError, match="kernel_size|n >= 1|source|dilation_base"):
        call()


def test_diagrams_are_drawn_by_code_and_stay_small(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlib.ui import diagrams

    for name, fig in [("paths", diagrams.token_paths(8, 3)), ("qkv", diagrams.qkv_path())]:
        path = tmp_path / f"{name}.png"
        fig.savefig(path, dpi=72)
        plt.close(fig)
        assert 0 < path.stat().st_size < 60_000, f"{name}: {path.stat().st_size} bytes"


def test_token_paths_cnn_panel_uses_the_measured_depth():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from attnlib.ui import diagrams

    fig = diagrams.token_paths(n=10, kernel_size=3)
    titles = [ax.get_title() for ax in fig.axes]
    plt.close(fig)
    assert f"{mo.layers_to_connect(10, 3)} layers" in titles[1] and "9 hops" in titles[0]
