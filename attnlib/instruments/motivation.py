"""Helpers for chapter 1 (why attention): tiny RNNs, receptive fields, and the three
columns of the Transformer paper's comparison (FLOPs, longest dependency chain, path
length) measured on real torch layers.

These are measuring instruments for the lesson, not part of the attention API, so they
are not re-exported from :mod:`attnlib`; import them as ``from attnlib.instruments import motivation``.
The RNN and convolution helpers are plain NumPy (float64; the timing trio and the lookups
also accept torch tensors); :func:`layer_graph` and the graph measurements use torch.
Everything is deterministic for a given seed.

Symbols: ``T`` (or ``n``) sequence length, ``B`` batch size, ``d`` hidden size, ``k`` kernel size,
``m`` number of conv layers.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["scalar_rnn_states", "scalar_rnn_influence", "TinyRNN", "rnn_influence", "rnn_loop",
           "independent_steps", "batched_step", "conv_reach", "receptive_field_formula",
           "layers_to_connect", "layer_graph", "dependency_depth", "mixing_ops_on_path", "layer_flops",
           "soft_lookup", "hard_lookup", "finite_difference_grad"]


def scalar_rnn_states(w: float, u: float, x: np.ndarray) -> np.ndarray:
    """States of the one-number RNN ``h_t = tanh(w h_{t-1} + u x_t)``, ``h_0 = 0``.

    Args:
        w: recurrent weight.
        u: input weight.
        x: ``(T,)`` inputs, one number per step.

    Returns:
        ``(T,)``: ``h_1 … h_T``.
    """
    h, out = 0.0, np.empty(len(x))
    for t, xt in enumerate(x):          # the relay: step t needs h_{t-1}
        h = math.tanh(w * h + u * xt)
        out[t] = h
    return out


def scalar_rnn_influence(w: float, u: float, x: np.ndarray) -> np.ndarray:
    """``|dh_t / dx_1|`` for ``t = 1 … T`` in the one-number RNN, by the chain rule.

    ``dh_1/dx_1 = u (1 - h_1²)`` and every later step multiplies by
    ``dh_t/dh_{t-1} = w (1 - h_t²)``, a number of size at most ``|w|``.
    Returns shape ``(T,)``.
    """
    h = scalar_rnn_states(w, u, x)
    factors = np.concatenate([[u], np.full(len(x) - 1, w)]) * (1 - h ** 2)   # (T,)
    return np.abs(np.cumprod(factors))


class TinyRNN:
    """An Elman RNN ``h_t = tanh(h_{t-1} W + x_t U)`` with random weights.

    Args:
        d: hidden size (and input size).
        gain: spectral scale of the recurrent matrix ``W`` (an orthogonal matrix times
            ``gain``): below 1 the influence of old inputs shrinks at every step.
            Default: ``0.9``.
        seed: seed of the weights. Default: ``0``.
    """

    def __init__(self, d: int = 16, gain: float = 0.9, seed: int = 0):
        rng = np.random.default_rng(seed)
        qm, _ = np.linalg.qr(rng.standard_normal((d, d)))
        self.W = gain * qm                                   # (d, d), singular values = gain
        self.U = rng.standard_normal((d, d)) / math.sqrt(d)  # (d, d)
        self.d = d

    def states(self, x: np.ndarray) -> np.ndarray:
        """Run over ``x`` of shape ``(T, d)``; return every state, shape ``(T, d)``."""
        h = np.zeros(self.d)
        out = np.empty_like(x, dtype=float)
        for t in range(x.shape[0]):        # the relay: step t needs step t-1
            h = np.tanh(h @ self.W + x[t] @ self.U)  # (d,) @ (d, d) -> (d,)
            out[t] = h
        return out


def rnn_influence(rnn: TinyRNN, x: np.ndarray) -> np.ndarray:
    """How strongly the first input still acts on the state at every step.

    Args:
        rnn: the network.
        x: ``(T, d)`` inputs.

    Returns:
        ``(T,)``: entry ``t - 1`` is the spectral norm of the Jacobian ``dh_t / dx_1``.

    Example: ``rnn_influence(TinyRNN(16, gain=0.9), np.ones((100, 16)))[-1]`` is tiny.

    Uses the chain rule ``dh_t/dx_1 = dh_1/dx_1 · Π_{s=2..t} dh_s/dh_{s-1}`` with
    ``dh_s/dh_{s-1} = W diag(1 - h_s²)`` (row-vector convention: ``dh = dh_prev J``).
    """
    h = rnn.states(x)                       # (T, d)
    J = rnn.U * (1 - h[0] ** 2)             # (d, d): dh_1/dx_1, columns scaled by tanh'
    norms = [np.linalg.norm(J, 2)]
    for t in range(1, x.shape[0]):
        J = J @ (rnn.W * (1 - h[t] ** 2))   # (d, d) @ (d, d) -> (d, d)
        norms.append(np.linalg.norm(J, 2))
    return np.array(norms)


def _tanh(a):
    return a.tanh() if hasattr(a, "tanh") else np.tanh(a)   # torch tensor or NumPy array


def rnn_loop(x, W):
    """The sequential work of an RNN: ``T`` dependent steps ``h = tanh(h W + x_t)``.

    ``x`` is ``(T, B, d)`` (NumPy array or torch tensor); returns the last state ``(B, d)``.
    """
    h = x[0] * 0
    for t in range(x.shape[0]):
        h = _tanh(h @ W + x[t])            # (B, d) @ (d, d) -> (B, d): needs the previous h
    return h


def independent_steps(x, W):
    """The same ``T`` small steps as :func:`rnn_loop`, one Python call each, but no step
    needs another's result (``tanh(x_t W)``): the dispatch cost without the dependency.
    Returns the last step's ``(B, d)``."""
    h = None
    for t in range(x.shape[0]):
        h = _tanh(x[t] @ W + x[t])          # (B, d) @ (d, d) -> (B, d): reads only x_t
    return h


def batched_step(x, W):
    """The same multiply-adds and ``tanh`` calls as :func:`rnn_loop`, but with no step
    waiting for another: all ``T`` positions in one matrix product, ``(T, B, d) -> (T, B, d)``."""
    T, B, d = x.shape
    out = x.reshape(T * B, d) @ W           # (T·B, d) @ (d, d) -> (T·B, d): one matrix product
    return _tanh(out).reshape(T, B, d)


# --------------------------------------------------------------------------- CNN windows

def _check_conv(n: int, num_layers: int, kernel_size: int) -> None:
    if kernel_size < 2:
        raise ValueError(f"kernel_size must be at least 2 (a window of 1 never widens), got {kernel_size}")
    if n < 1 or num_layers < 0:
        raise ValueError(f"need n >= 1 positions and num_layers >= 0, got n={n}, num_layers={num_layers}")


def conv_reach(n: int, num_layers: int, kernel_size: int, *, dilated: bool = False,
               source: int = 0, dilation_base: int | None = None) -> np.ndarray:
    """Which of ``n`` positions token ``source`` has influenced after ``num_layers``
    stacked causal 1-D convolutions (output ``t`` reads inputs ``t - k + 1 … t``).

    Measured by pushing a one-hot "influence" vector through the layers, not by formula.
    With ``dilated=True`` layer ``l`` (from 0) spaces its taps ``kernel_size**l`` apart;
    ``dilation_base=b`` spaces them ``b**l`` apart (``b = 1``: no dilation).
    Returns a bool array of shape ``(n,)``.
    """
    _check_conv(n, num_layers, kernel_size)
    if dilation_base is not None and (dilated or int(dilation_base) < 1):
        raise ValueError(f"give either dilated=True or a dilation_base >= 1, got dilated={dilated}, "
                         f"dilation_base={dilation_base}")
    base = kernel_size if dilated else (1 if dilation_base is None else int(dilation_base))
    if not 0 <= source < n:
        raise ValueError(f"source must be a position in 0..{n - 1}, got {source}")
    reach = np.zeros(n, dtype=bool)
    reach[source] = True
    for layer in range(num_layers):
        gap = base ** layer
        new = reach.copy()                       # tap 0: position t reads itself
        for tap in range(1, kernel_size):        # taps 1..k-1 read t - tap*gap
            shift = tap * gap
            if shift < n:
                new[shift:] |= reach[:n - shift]  # influence moves `shift` places right
        reach = new
    return reach


def receptive_field_formula(num_layers: int, kernel_size: int, dilated: bool = False) -> int:
    """Width of the window one output sees after ``num_layers`` layers of kernel ``k``:
    ``1 + m (k - 1)``, or ``k**m`` when layer ``l`` has dilation ``k**l``."""
    if dilated:
        return kernel_size ** num_layers
    return 1 + num_layers * (kernel_size - 1)


def layers_to_connect(n: int, kernel_size: int, dilated: bool = False) -> int:
    """Fewest conv layers after which token 1 and token ``n`` are linked (measured with
    :func:`conv_reach`, counting layers until the last position is reached)."""
    _check_conv(n, 0, kernel_size)
    if n == 1:
        return 0
    layers = 0
    while not conv_reach(n, layers, kernel_size, dilated=dilated)[n - 1]:
        layers += 1
    return layers


# --------------------------------------------------------------------------- three layers, measured

def layer_graph(kind: str, n: int, d: int = 8, *, kernel_size: int = 3, seed: int = 0):
    """One layer of each kind over ``n`` tokens, built in torch so autograd records it.

    Each token's input is its own leaf tensor, so a path from token 1 to an output can be
    traced in the autograd graph.

    Args:
        kind: ``"rnn"`` (``h_t = tanh(h_{t-1} W + x_t U)``), ``"cnn"`` (one causal
            convolution of width ``kernel_size``, then ``tanh``) or ``"attention"``
            (``softmax(X Xᵀ / √d) X``, no projections).
        n: number of tokens.
        d: width of every vector. Default: ``8``.
        kernel_size: the CNN's window. Default: ``3``.
        seed: seed of the weights and inputs. Default: ``0``.

    Returns:
        ``(xs, outs)``: the ``n`` leaf inputs ``(d,)`` and the ``n`` outputs ``(d,)``;
        ``outs[t]`` is position ``t``'s own tensor (for the RNN the state ``h_t`` itself,
        so a path through a later state is not mistaken for a shortcut).
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    xs = [torch.randn(d, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    if kind == "rnn":
        W = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        U = torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d)
        h, hs = None, []
        for x in xs:                                   # step t waits for h_{t-1}
            h = torch.tanh(x @ U if h is None else h @ W + x @ U)   # (d,) @ (d, d) -> (d,)
            hs.append(h)
        return xs, hs
    X = torch.stack(xs)                                # (n, d)
    if kind == "cnn":
        weight = torch.randn(d, d, kernel_size, generator=g, dtype=torch.float64) / math.sqrt(d * kernel_size)
        padded = torch.nn.functional.pad(X.T[None], (kernel_size - 1, 0))   # (1, d, n + k - 1): causal
        out = torch.nn.functional.conv1d(padded, weight)[0].T               # (n, d): all positions at once
        return xs, list(torch.tanh(out))
    if kind == "attention":
        scores = X @ X.T / math.sqrt(d)                # (n, d) @ (d, n) -> (n, n)
        return xs, list(torch.softmax(scores, dim=-1) @ X)   # (n, n) @ (n, d) -> (n, d)
    raise ValueError(f"kind must be 'rnn', 'cnn' or 'attention', got {kind!r}")


def _parents(node):
    return [f for f, _ in getattr(node, "next_functions", ()) if f is not None]


def dependency_depth(outs) -> int:
    """Length of the longest chain of operations in the autograd graph of ``outs`` (a
    tensor or a list of tensors): operations on such a chain must run one after another,
    whatever the hardware.

    Counts the graph's nodes (each operation once, leaves included) along the longest
    path from an output to an input. Iterative, so chains of thousands of steps are fine.
    """
    import torch

    out = torch.stack(list(outs)) if isinstance(outs, (list, tuple)) else outs
    root = out.grad_fn
    depth: dict = {}
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in depth:
            continue
        parents = _parents(node)
        if ready:
            depth[node] = 1 + max((depth[p] for p in parents), default=0)
            continue
        stack.append((node, True))
        stack.extend((p, False) for p in parents if p not in depth)
    return depth[root]


def mixing_ops_on_path(out, leaf, op: str = "MmBackward") -> int:
    """Fewest operations named ``op`` (matrix products, by default) on any path from
    ``leaf`` to ``out`` in the autograd graph: how many sequential mixing steps token
    ``leaf`` must pass before it reaches ``out``.

    A 0-1 breadth-first search from ``out.grad_fn``; raises ``ValueError`` when ``out``
    does not depend on ``leaf``.
    """
    from collections import deque

    start = out.grad_fn
    best = {start: int(op in type(start).__name__)}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if getattr(node, "variable", None) is leaf:
            return best[node]
        for p in _parents(node):
            cost = best[node] + int(op in type(p).__name__)
            if cost < best.get(p, math.inf):
                best[p] = cost
                (queue.appendleft if cost == best[node] else queue.append)(p)
    raise ValueError("out does not depend on leaf: there is no path between them")


def layer_flops(kind: str, n: int, d: int = 8, *, kernel_size: int = 3) -> int:
    """Floating-point operations of one :func:`layer_graph` layer, counted by
    ``torch.utils.flop_counter.FlopCounterMode`` on the real calls (matmuls and
    convolutions; elementwise work such as ``tanh`` is not counted)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        layer_graph(kind, n, d, kernel_size=kernel_size)
    return int(counter.get_total_flops())


# --------------------------------------------------------------------------- lookups

def soft_lookup(query, keys, values, beta: float = 1.0):
    """Differentiable lookup: ``softmax(beta · keys q) @ values``.

    Works for NumPy arrays and torch tensors. Shapes: query ``(E,)``, keys ``(S, E)``,
    values ``(S, Ev)``; returns ``(Ev,)``.
    """
    scores = beta * (keys @ query)             # (S, E) @ (E,) -> (S,)
    scores = scores - scores.max()
    w = np.exp(scores) if isinstance(scores, np.ndarray) else scores.exp()
    w = w / w.sum()                            # (S,), sums to 1
    return w @ values                          # (S,) @ (S, Ev) -> (Ev,)


def finite_difference_grad(f, q, eps: float = 1e-4) -> np.ndarray:
    """Central finite-difference gradient of the scalar ``f(q)`` at ``q`` (a 1-D float64
    NumPy array): no autograd involved, so it also probes functions that cut the graph."""
    q = np.asarray(q, dtype=np.float64)
    grad = np.empty_like(q)
    for i in range(q.size):
        step = np.zeros_like(q)
        step[i] = eps
        grad[i] = (f(q + step) - f(q - step)) / (2 * eps)
    return grad


def hard_lookup(query, keys, values):
    """Dictionary-style lookup: the value of the single best-matching key (``argmax``).

    Shapes as :func:`soft_lookup`. The index is an integer, so no gradient reaches
    ``query`` or ``keys``.
    """
    return values[int((keys @ query).argmax())]   # (S, E) @ (E,) -> (S,) -> one row (Ev,)
