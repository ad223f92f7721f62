"""Chapter 7's instruments: the tasks, a small training loop with a live loss curve, and
the measurements taken on a trained :class:`attnlib.model.GPT` (head scores, ablation,
gradient statistics).

Kept apart from :mod:`attnlib.model`, which only defines the network (STYLE.md: chapter
instruments apart from the kernels). Import it as ``from attnlib import train``.

Tasks (all seeded through a ``torch.Generator``; ids are long tensors):

* :func:`repeated_blocks` - a random block of ``period`` tokens repeated: the second copy
  is predictable only by looking back one period (an induction head's job).
* :func:`previous_token_task` - random tokens whose target at position ``i`` is the token
  at position ``i - 1``: the answer depends on *where* a token stands, so a model without
  position information cannot learn it.

Shapes: ``N`` sequences, ``L`` positions, ``h`` heads, ``V`` vocabulary.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch.nn import functional as F

from .i18n import N_

__all__ = ["repeated_blocks", "lm_pair", "previous_token_task", "train", "History", "LivePlot",
           "prev_token_score", "induction_score", "head_scores", "position_losses",
           "copy_losses", "ablation_losses", "attention_stats", "grad_norms", "layer_grad_norms",
           "phase_change_step"]


# --------------------------------------------------------------------------- tasks

def repeated_blocks(n: int, period, *, length: int | None = None, vocab_size: int = 32,
                    generator: torch.Generator | None = None, device="cpu") -> torch.Tensor:
    """``n`` sequences, each a block of ``period`` distinct random ids repeated up to ``length`` ids.

    Args:
        n: number of sequences.
        period: the block length, an int, or ``(low, high)``: each sequence then draws its
            own period from ``low ... high`` (inclusive), so the distance to look back is
            not fixed and no position-based shortcut predicts the repeat.
        length: ids per sequence. Default: ``None`` (twice the longest period).
        vocab_size: ids are drawn uniformly from ``0 ... vocab_size - 1``. Default: ``32``.
        generator: the random generator (seed it). Default: ``None`` (torch's global one).
        device: where the result goes. Default: ``"cpu"``.

    Returns:
        ``(n, length)`` long tensor on ``device``.

    Example::

        >>> repeated_blocks(2, 3, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([2, 6])
    """
    low, high = (period, period) if isinstance(period, int) else period
    length = 2 * high if length is None else length
    if high > vocab_size:
        raise ValueError(f"a block of {high} distinct ids needs vocab_size >= {high}, got {vocab_size}")
    # distinct ids within a block, so "the token after the last occurrence" is unambiguous
    block = torch.rand(n, vocab_size, generator=generator).argsort(-1)[:, :high]  # (n, high)
    periods = torch.randint(low, high + 1, (n, 1), generator=generator)    # (n, 1)
    pos = torch.arange(length) % periods                                    # (n, length): i mod period
    return block.gather(1, pos).to(device)                                  # (n, length)


def lm_pair(seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and next-token targets of a language model: ``seq[:, :-1]``, ``seq[:, 1:]``."""
    return seq[:, :-1], seq[:, 1:]


def previous_token_task(n: int, length: int, *, vocab_size: int = 32,
                        generator: torch.Generator | None = None, device="cpu"):
    """Random ids ``x (n, length)`` and targets ``y`` with ``y[:, i] = x[:, i - 1]``
    (``y[:, 0] = -100``, ignored by the loss)."""
    x = torch.randint(0, vocab_size, (n, length), generator=generator)
    y = torch.full_like(x, -100)
    y[:, 1:] = x[:, :-1]
    return x.to(device), y.to(device)


# --------------------------------------------------------------------------- training

@dataclass
class History:
    """What :func:`train` recorded. ``loss[t]`` is the training loss of step ``t``;
    ``evals`` maps each evaluation step to the dict the ``evaluate`` callback returned;
    ``snapshots`` maps steps to what ``snapshot`` returned (e.g. attention maps)."""

    loss: list = field(default_factory=list)
    evals: dict = field(default_factory=dict)
    snapshots: dict = field(default_factory=dict)
    grad_norm: list = field(default_factory=list)

    def eval_series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of one evaluated quantity."""
        steps = np.array(sorted(self.evals))
        return steps, np.array([self.evals[s][key] for s in steps])


def train(model, batch: Callable[[int], tuple], *, steps: int, lr: float = 3e-3,
          warmup: int = 0, weight_decay: float = 0.0, evaluate: Callable | None = None,
          eval_every: int = 10, snapshot: Callable | None = None, snapshot_at=(),
          live: "LivePlot | None" = None) -> History:
    """Train ``model`` with AdamW on ``batch(step) -> (x, y)`` for ``steps`` steps.

    Args:
        model: a :class:`attnlib.model.GPT` (anything with ``.loss(x, y)``).
        batch: returns the inputs and targets of one step (seed it for reproducibility).
        steps: number of optimiser steps.
        lr: peak learning rate. Default: ``3e-3``.
        warmup: steps of linear learning-rate warm-up from 0. Default: ``0`` (none).
        weight_decay: AdamW's decoupled weight decay. Default: ``0.0``.
        evaluate: ``evaluate(model) -> dict`` of numbers, run without gradients every
            ``eval_every`` steps and after the last one. Default: ``None``.
        eval_every: steps between evaluations. Default: ``10``.
        snapshot: ``snapshot(model) -> anything``, stored at the steps in ``snapshot_at``
            (step ``s`` = after ``s`` updates; 0 = at initialisation). Default: ``None``.
        snapshot_at: the steps to snapshot. Default: ``()``.
        live: a :class:`LivePlot` updated with the evaluations. Default: ``None``.

    Returns:
        a :class:`History`. The total gradient norm of every step is in ``grad_norm``.
    """
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    hist = History()
    snapshot_at = set(snapshot_at)

    def observe(step):
        if snapshot is not None and step in snapshot_at:
            with torch.no_grad():
                hist.snapshots[step] = snapshot(model)
        if evaluate is not None and (step % eval_every == 0 or step == steps):
            with torch.no_grad():
                hist.evals[step] = {k: float(v) for k, v in evaluate(model).items()}
            if live is not None:
                live.update(hist)

    model.train()
    observe(0)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
        x, y = batch(step)
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        hist.grad_norm.append(float(torch.sqrt(sum((p.grad ** 2).sum() for p in model.parameters()
                                                   if p.grad is not None))))
        opt.step()
        hist.loss.append(float(loss.detach()))
        observe(step + 1)
    model.eval()
    if live is not None:
        live.close(hist)
    return hist


class LivePlot:
    """A loss curve that redraws while :func:`train` runs (in Jupyter), then stays as the
    cell's one figure (what the website shows).

    Args:
        keys: the evaluated quantities to draw, one line each.
        labels: legend text per key. Default: the keys.
        title: the axes' title (use it to state the finding). Default: ``""``.
        every: redraw after this many evaluations. Default: ``5``.
        ylabel: Default: ``"loss (nats)"``.
        figsize: Default: ``(6, 3)``.

    Only figures are displayed (no text), so a re-run leaves the same text output.
    """

    def __init__(self, keys, labels=None, *, title: str = "", every: int = 5,
                 ylabel: str = N_("loss (nats)"), figsize=(6, 3), logy: bool = False):
        self.keys, self.labels = list(keys), list(labels or keys)
        self.title, self.every, self.ylabel, self.figsize, self.logy = title, every, ylabel, figsize, logy
        self._handle, self._fig, self._n = None, None, 0

    def _draw(self, hist: History):
        import matplotlib.pyplot as plt

        if self._fig is None:
            self._fig, self._ax = plt.subplots(figsize=self.figsize)
            plt.close(self._fig)  # shown through display() only, never by the inline backend
        ax = self._ax
        ax.clear()
        for key, label in zip(self.keys, self.labels):
            steps, vals = hist.eval_series(key)
            ax.plot(steps, vals, label=label)
        ax.set_xlabel("training step")
        ax.set_ylabel(self.ylabel)
        if self.logy:
            ax.set_yscale("log")
        ax.set_title(self.title, fontsize=10)
        ax.legend(fontsize=8)
        self._fig.tight_layout()

    def update(self, hist: History):
        self._n += 1
        if self._n % self.every == 0:
            self._show(hist)

    def close(self, hist: History):
        """Draw the final curve (in place of the live one, or as a new display)."""
        self._show(hist)

    def _show(self, hist: History):
        """Redraw and show the curve in the notebook; nothing in plain Python (tests)."""
        try:
            from IPython import get_ipython
            from IPython.display import display
        except ImportError:  # pragma: no cover
            return
        if get_ipython() is None:
            return
        self._draw(hist)
        if self._handle is None:
            self._handle = display(self._fig, display_id=True)
        else:
            self._handle.update(self._fig)


# --------------------------------------------------------------------------- head scores

def prev_token_score(weights):
    """Mean weight from query ``i`` to key ``i - 1`` over ``i = 1 ... L - 1``.

    Args:
        weights: ``(..., L, L)`` attention weights, rows are queries (NumPy or torch).

    Returns:
        ``(...)``: 1 for a perfect previous-token head, about ``1/(i+1)`` averaged for a
        uniform causal head.
    """
    return _diagonal_mean(weights, offset=-1, first=1)


def induction_score(weights, period: int):
    """On a sequence whose block of ``period`` tokens repeats, the mean weight from query
    ``i`` to key ``i - period + 1`` (the token *after* the previous occurrence of the current
    token) over ``i = period ... L - 1``.

    Args:
        weights: ``(..., L, L)`` attention weights, rows are queries.
        period: the length of the repeated block.

    Returns:
        ``(...)``.
    """
    return _diagonal_mean(weights, offset=1 - period, first=period)


def _diagonal_mean(weights, offset: int, first: int):
    L = weights.shape[-1]
    i = np.arange(first, L)                            # the queries scored
    return weights[..., i, i + offset].mean(-1)        # (..., len(i)) -> (...)


@torch.no_grad()
def head_scores(model, seq: torch.Tensor, period: int) -> dict:
    """Every head's previous-token and induction score on ``seq (N, L)``, averaged over N.

    Returns:
        ``{"prev": (num_layers, h), "induction": (num_layers, h)}`` NumPy arrays and
        ``"weights"``, the list of per-layer weights ``(N, h, L, L)`` as NumPy arrays.
    """
    _, weights = model(seq, return_weights=True)
    ws = [w.float().cpu().numpy() for w in weights]                     # each (N, h, L, L)
    prev = np.stack([prev_token_score(w).mean(0) for w in ws])          # (num_layers, h)
    ind = np.stack([induction_score(w, period).mean(0) for w in ws])    # (num_layers, h)
    return {"prev": prev, "induction": ind, "weights": ws}


# --------------------------------------------------------------------------- losses

@torch.no_grad()
def position_losses(model, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Cross-entropy at every position, averaged over the batch: ``(L,)`` NumPy."""
    logits = model(x)                                                   # (N, L, V)
    loss = F.cross_entropy(logits.transpose(1, 2), y, reduction="none", ignore_index=-100)  # (N, L)
    return loss.float().mean(0).cpu().numpy()


def copy_losses(model, seq: torch.Tensor, period: int) -> dict:
    """Next-token loss on the first copy and on the repeats of a :func:`repeated_blocks` batch.

    The first copy (targets at positions ``1 ... period - 1``) is random: its best loss is
    ``ln V``. Targets from position ``period`` on repeat what was seen one period earlier.
    """
    x, y = lm_pair(seq)                                                 # (N, L - 1) each
    per = position_losses(model, x, y)                                  # (L - 1,)
    return {"first": float(per[:period - 1].mean()), "repeat": float(per[period - 1:].mean())}


@torch.no_grad()
def ablation_losses(model, seq: torch.Tensor, period: int, heads) -> dict:
    """Repeat-copy loss with each ``(layer, head)`` of ``heads`` zeroed, one at a time."""
    out = {}
    for head in heads:
        with model.ablated([head]):
            out[tuple(head)] = copy_losses(model, seq, period)["repeat"]
    return out


def phase_change_step(steps, values, *, start: float, end: float) -> int:
    """The first step at which ``values`` has fallen halfway from ``start`` to ``end``."""
    half = (start + end) / 2
    below = np.flatnonzero(np.asarray(values) <= half)
    return int(np.asarray(steps)[below[0]]) if below.size else -1


# --------------------------------------------------------------------------- gradient statistics

@torch.no_grad()
def attention_stats(model, x: torch.Tensor, *, min_keys: int = 8) -> dict:
    """Chapter 3's saturation measures on the model's own attention rows.

    Rows of queries that see at least ``min_keys`` keys, over every layer and head:
    ``max_weight`` (mean largest weight; 1 = one-hot) and ``entropy`` (mean, in nats) and
    ``jacobian_norm`` (mean Frobenius norm of the softmax Jacobian ``diag(p) - p pᵀ``, how
    much the weights can still move; 0 = frozen).
    """
    _, weights = model(x, return_weights=True)
    p = torch.cat([w[..., min_keys - 1:, :].flatten(0, -2) for w in weights]).double()  # (rows, S)
    ent = -(p * torch.log(torch.where(p > 0, p, torch.ones_like(p)))).sum(-1)
    # ||diag(p) - p p^T||_F^2 = sum p^2 - 2 sum p^3 + (sum p^2)^2
    s2, s3 = (p ** 2).sum(-1), (p ** 3).sum(-1)
    jac = torch.sqrt(torch.clamp(s2 - 2 * s3 + s2 ** 2, min=0))
    return {"max_weight": float(p.max(-1).values.mean()), "entropy": float(ent.mean()),
            "jacobian_norm": float(jac.mean())}


def grad_norms(model, x: torch.Tensor, y: torch.Tensor, names=("w_q", "w_k")) -> dict:
    """Gradient norm of the loss w.r.t. each named attention matrix, summed over layers
    (root of the sum of squares). Leaves the model's ``.grad`` cleared."""
    model.zero_grad(set_to_none=True)
    model.loss(x, y).backward()
    out = {}
    for name in names:
        g2 = sum(float((getattr(b.attn, name).grad ** 2).sum()) for b in model.blocks)
        out[name] = math.sqrt(g2)
    model.zero_grad(set_to_none=True)
    return out


def layer_grad_norms(model, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Gradient norm of the loss w.r.t. all parameters of each block: ``(num_layers,)`` NumPy."""
    model.zero_grad(set_to_none=True)
    model.loss(x, y).backward()
    norms = [math.sqrt(sum(float((p.grad ** 2).sum()) for p in b.parameters() if p.grad is not None))
             for b in model.blocks]
    model.zero_grad(set_to_none=True)
    return np.array(norms)
