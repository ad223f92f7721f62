"""Helpers for chapter 1 (why attention): a tiny RNN, receptive fields and path lengths.

These are measuring instruments for the lesson, not part of the attention API, so they
are not re-exported from :mod:`attnlib`; import them as ``from attnlib import motivation``.
Everything here is plain NumPy (float64; the timing pair and the lookups also accept torch
tensors) and deterministic for a given seed.

Symbols: ``T`` sequence length, ``B`` batch size, ``d`` hidden size, ``k`` kernel size,
``m`` number of conv layers.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["TinyRNN", "rnn_influence", "rnn_loop", "batched_step", "conv_reach",
           "receptive_field_formula", "layers_to_connect", "path_length_table",
           "soft_lookup", "hard_lookup"]


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
               source: int = 0) -> np.ndarray:
    """Which of ``n`` positions token ``source`` has influenced after ``num_layers``
    stacked causal 1-D convolutions (output ``t`` reads inputs ``t - k + 1 … t``).

    Measured by pushing a one-hot "influence" vector through the layers, not by formula.
    With ``dilated=True`` layer ``l`` (from 0) spaces its taps ``kernel_size**l`` apart.
    Returns a bool array of shape ``(n,)``.
    """
    _check_conv(n, num_layers, kernel_size)
    if not 0 <= source < n:
        raise ValueError(f"source must be a position in 0..{n - 1}, got {source}")
    reach = np.zeros(n, dtype=bool)
    reach[source] = True
    for layer in range(num_layers):
        gap = kernel_size ** layer if dilated else 1
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


def path_length_table(ns, kernel_size: int = 3) -> list[tuple]:
    """Rows ``(n, RNN steps, CNN layers, dilated-CNN layers, self-attention layers)``:
    how many sequential operations separate token 1 from token ``n``."""
    rows = []
    for n in ns:
        _check_conv(n, 0, kernel_size)
        dilated = 0
        while kernel_size ** dilated < n:      # ceil(log_k n), exact in integers
            dilated += 1
        rows.append((n, n - 1, math.ceil((n - 1) / (kernel_size - 1)), dilated, 1))
    return rows


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


def hard_lookup(query, keys, values):
    """Dictionary-style lookup: the value of the single best-matching key (``argmax``).

    Shapes as :func:`soft_lookup`. The index is an integer, so no gradient reaches
    ``query`` or ``keys``.
    """
    return values[int((keys @ query).argmax())]   # (S, E) @ (E,) -> (S,) -> one row (Ev,)
