"""Positions beyond the training length (chapter 8): several seeds trained at once, a model
run as if its tokens stood later in the sequence, and the measures of which heads formed.

A model trained on sequences of ``L_train`` tokens has seen the positions ``0 ... L_train - 1``
and, between a query and a key, the offsets ``0 ... L_train - 1``. On a longer input it meets
positions it never saw (the untrained rows of a learned position table) or offsets it never
saw (with RoPE, whose scores depend on offsets only). Chapter 8 measures what a copying
model does then, with these instruments:

* :func:`train_seeds` - train one model per seed *together*: the parameters of all seeds are
  stacked along a leading seed dimension (``torch.func.stack_module_state``), one loss is
  computed for every seed at once with ``torch.func.vmap``, and one AdamW step updates them
  all. Each seed keeps its own initialisation and its own data.
* :func:`logits_from` - the logits of tokens placed at positions ``start, start + 1, ...``
  with nothing before them (a cache of ``start`` positions that no query may see).
* :func:`seen_before` - where the current token already occurred: there an induction head
  can predict the next token by copying what followed it.
* :func:`previous_token_weight`, :func:`induction_weight` - per query, the attention weight a
  head puts on the previous token, or on the tokens that followed earlier occurrences of
  the current token (an induction head's targets, however far back they are);
  :func:`position_profile` gathers them, with the accuracy, at every position of a batch.

Shapes use the package's symbols: ``N`` sequences, ``L`` tokens, ``h`` heads, ``n`` seeds.
"""
from __future__ import annotations

import contextlib
import copy
import math

import torch
from torch.nn import functional as F

from . import model as _model
from .masks import causal_mask

__all__ = ["train_seeds", "logits_from", "seen_before", "previous_token_weight", "induction_weight",
           "position_profile"]


# --------------------------------------------------------------------------- seeds together

def _plain_attention(q, k, v, attn_mask=None, *, is_causal=False, scale=None, return_weights=False):
    """``softmax(q kᵀ · scale + mask) v`` in plain torch operations, which ``vmap`` can batch.

    The same semantics as :func:`attnlib.scaled_dot_product_attention` for the model's calls
    (bool mask, True = may attend; ``is_causal`` upper-left). attnlib's own function checks
    its output for NaN by reading a number back to Python, which ``vmap`` refuses.
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.mT) * scale                            # (N, h, L, E) @ (N, h, E, S) -> (N, h, L, S)
    L, S = scores.shape[-2:]
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril()  # (L, S)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, -math.inf)
    weights = scores.softmax(-1)                           # (N, h, L, S)
    out = weights @ v                                      # (N, h, L, S) @ (N, h, S, Ev) -> (N, h, L, Ev)
    return (out, weights) if return_weights else out


@contextlib.contextmanager
def _vmappable_attention():
    """Let the model's attention layers use :func:`_plain_attention` inside the block."""
    saved = _model.scaled_dot_product_attention
    _model.scaled_dot_product_attention = _plain_attention
    try:
        yield
    finally:
        _model.scaled_dot_product_attention = saved


def train_seeds(models, batch, *, steps, lr=3e-3, weight_decay=0.0, callback=None):
    """Train ``models``, one per seed and all of one architecture, together with AdamW.

    Their parameters are stacked along a new leading dimension (one slice per seed), the
    loss of every seed is computed in one call with ``torch.func.vmap``, and one AdamW step
    updates the stack. The seeds do not interact: the gradient of the summed loss with
    respect to a seed's slice is that seed's own gradient, and AdamW works element by
    element, so each seed follows the path it would follow alone (to rounding). Inside the
    vmapped loss the attention is computed by a plain ``softmax(q kᵀ · scale) v``, which
    vmap can batch; the trained models use attnlib's attention as usual.

    Args:
        models: a list of ``n`` modules of one architecture whose call ``model(idx)`` maps
            token ids ``(B, L)`` to next-token logits ``(B, L, V)`` (e.g.
            :class:`attnlib.model.GPT`, :func:`attnlib.inference.rope_gpt`); each seeded
            before it was built. They are trained in place and left in eval mode.
        batch: ``batch(step) -> (x, y)``: token ids and next-token targets, each
            ``(n, B, L)``, one batch per seed (draw each from its own seeded generator).
            Targets of ``-100`` are ignored.
        steps: number of optimiser steps.
        lr: AdamW's learning rate. Default: ``3e-3``.
        weight_decay: AdamW's decoupled weight decay. Default: ``0.0``.
        callback: ``callback(step, losses)``, called after every step with the step number
            (1 ... ``steps``) and that step's losses ``(n,)``. Default: ``None``.

    Returns:
        the training losses, a ``(steps, n)`` tensor: column ``i`` is seed ``i``'s curve.

    Example::

        >>> models = []
        >>> for seed in range(5):
        ...     torch.manual_seed(seed)
        ...     models.append(GPT(cfg))
        >>> losses = train_seeds(models, batch, steps=200)     # (200, 5): one curve per seed
    """
    models = list(models)
    if not models or not all(isinstance(m, torch.nn.Module) for m in models):
        raise TypeError(f"models must be a non-empty list of torch modules (one per seed), got "
                        f"{type(models).__name__} of {len(models)}")
    shapes = [{k: tuple(p.shape) for k, p in m.named_parameters()} for m in models]
    if any(s != shapes[0] for s in shapes) or any(type(m) is not type(models[0]) for m in models):
        raise ValueError("models must share one architecture (the same parameter names and shapes): "
                         "build every seed from the same config")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int (optimiser steps), got {steps!r}")
    n = len(models)
    params, buffers = torch.func.stack_module_state(models)      # name -> (n, ...) each
    params = {k: p.detach().requires_grad_() for k, p in params.items()}
    template = copy.deepcopy(models[0]).to("meta")              # the architecture, no storage

    def loss(p, b, x, y):                                       # one seed: (B, L) ids and targets
        logits = torch.func.functional_call(template, (p, b), (x,))  # (B, L, V)
        return F.cross_entropy(logits.flatten(0, 1), y.flatten(), ignore_index=-100)

    losses_of = torch.func.vmap(loss)                           # (n, ...) stacks -> (n,) losses
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=weight_decay)
    history = []
    for step in range(steps):
        x, y = batch(step)
        if step == 0 and not (x.ndim == 3 and x.shape[0] == n and tuple(y.shape) == tuple(x.shape)):
            raise ValueError(f"batch(0) returned x {tuple(x.shape)} and y {tuple(y.shape)}; with "
                             f"{n} models both must be (n, B, L) = ({n}, B, L): one batch per seed")
        with _vmappable_attention():
            losses = losses_of(params, buffers, x, y)           # (n,)
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()                                 # each slice gets its own seed's gradient
        opt.step()
        history.append(losses.detach())
        if callback is not None:
            callback(step + 1, history[-1])
    with torch.no_grad():
        for i, m in enumerate(models):
            for name, p in m.named_parameters():
                p.copy_(params[name][i])
            m.eval()
    return torch.stack(history)                                 # (steps, n)


# --------------------------------------------------------------------------- positions

@torch.no_grad()
def logits_from(model, idx, start):
    """Next-token logits of ``idx`` placed at positions ``start, ..., start + L - 1``.

    Nothing stands before the tokens: the model runs against a cache of ``start`` positions
    whose keys and values are zeros and which a mask hides from every query, so only the
    positions change (a learned table's rows ``start ...``; RoPE's rotation angles).
    ``start = 0`` is the ordinary forward pass.

    Args:
        model: a :class:`attnlib.model.GPT` or :func:`attnlib.inference.rope_gpt`.
        idx: token ids ``(N, L)``.
        start: the position of the first token, an int ``>= 0``.

    Returns:
        logits ``(N, L, V)``.
    """
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be an int >= 0 (the position of the first token), got {start!r}")
    if not isinstance(idx, torch.Tensor) or idx.ndim != 2:
        shape = tuple(idx.shape) if hasattr(idx, "shape") else type(idx).__name__
        raise ValueError(f"idx is {shape}; it must be a torch tensor of token ids (N, L)")
    if start == 0:
        return model(idx)
    cfg = model.cfg
    N, L = idx.shape
    hidden = torch.zeros(N, cfg.num_heads, start, cfg.d_head, dtype=model.tok_emb.dtype,
                         device=idx.device)                                 # (N, h, start, d_head)
    past = [(hidden, hidden)] * cfg.num_layers
    visible = torch.arange(start + L, device=idx.device) >= start          # (S,): not the hidden ones
    mask = causal_mask(L, start + L, align="lower_right", like=idx) & visible  # (L, S)
    return model(idx, past_kv=past, attn_mask=mask)


# --------------------------------------------------------------------------- what heads do

def seen_before(idx):
    """``(N, L)`` bool: True where ``idx[:, t]`` already occurred in ``idx[:, :t]``.

    There the next token is predictable by copying (an induction head): it is the token that
    followed the earlier occurrence, in sequences whose blocks hold distinct tokens.
    """
    same = idx[:, :, None] == idx[:, None, :]                              # (N, L, L): token i == token j
    earlier = torch.ones(idx.shape[1], idx.shape[1], dtype=torch.bool, device=idx.device).tril(-1)
    return (same & earlier).any(-1)                                        # (N, L)


def previous_token_weight(weights):
    """Per query, the weight on the previous token: ``weights[..., i, i - 1]``.

    Args:
        weights: attention weights ``(..., L, S)``, rows are queries (torch).

    Returns:
        ``(..., L)``; NaN at query 0, which has no previous token.
    """
    L = weights.shape[-2]
    out = torch.full(weights.shape[:-1], math.nan, dtype=weights.dtype, device=weights.device)
    i = torch.arange(1, L, device=weights.device)
    out[..., 1:] = weights[..., i, i - 1]                                  # (..., L - 1)
    return out


def induction_weight(weights, idx):
    """Per query ``i``, the weight on the keys ``j <= i`` whose *previous* token equals token
    ``i``: the tokens that followed earlier occurrences of the current token, however far
    back. An induction head puts its weight there and copies the token it finds.

    Args:
        weights: attention weights ``(N, h, L, L)`` (or ``(N, L, L)``) on the sequences ``idx``.
        idx: token ids ``(N, L)``.

    Returns:
        ``(N, h, L)`` (or ``(N, L)``); NaN where token ``i`` had not occurred before.
    """
    N, L = idx.shape
    same = idx[:, :, None] == idx[:, None, :]                              # (N, L, L): idx[i] == idx[j]
    after = torch.zeros(N, L, L, dtype=torch.bool, device=idx.device)
    after[:, :, 1:] = same[:, :, :-1]                                      # key j: idx[j - 1] == idx[i]
    after &= torch.ones(L, L, dtype=torch.bool, device=idx.device).tril()  # j <= i
    if weights.ndim == 4:
        after = after[:, None]                                             # (N, 1, L, L): every head
    out = (weights * after).sum(-1)                                        # (N, [h,] L)
    seen = seen_before(idx) if weights.ndim == 3 else seen_before(idx)[:, None]
    return torch.where(seen, out, torch.full_like(out, math.nan))


@torch.no_grad()
def position_profile(model, seq, trained):
    """What a copying model does at every position of ``seq``, averaged over the sequences.

    Args:
        model: a :class:`attnlib.model.GPT` (or :func:`attnlib.inference.rope_gpt`) with at
            least two layers.
        seq: token ids ``(N, L + 1)``; the model reads ``seq[:, :-1]`` and predicts ``seq[:, 1:]``.
        trained: the number of positions seen in training (``0 ... trained - 1``).

    Returns:
        a dict of tensors over the ``L`` input positions (NaN where nothing was measured):

        * ``"accuracy"`` ``(L,)``: the next token predicted right, where the current token
          occurred before (:func:`seen_before`, so the next one can be copied);
        * ``"previous"`` ``(h, L)``: each head of the first layer, its weight on the previous
          token (:func:`previous_token_weight`);
        * ``"induction"`` ``(h, L)``: each head of the last layer, its weight on the tokens that
          followed earlier occurrences of the current token (:func:`induction_weight`);
        * ``"in_window"`` ``(h, L)``: each head of the last layer, its weight on the keys at
          positions ``0 ... trained - 1``, where the current token occurred before.
    """
    x, y = seq[:, :-1], seq[:, 1:]                                         # (N, L) each
    logits, weights = model(x, return_weights=True)                        # weights: per layer (N, h, L, L)
    copyable = seen_before(x)                                              # (N, L)
    right = (logits.argmax(-1) == y).float()
    right = torch.where(copyable, right, torch.full_like(right, math.nan))
    last = weights[-1]                                                     # (N, h, L, L)
    window = last[..., :trained].sum(-1)                                   # (N, h, L)
    window = torch.where(copyable[:, None], window, torch.full_like(window, math.nan))
    return {"accuracy": right.nanmean(0),                                  # (L,)
            "previous": previous_token_weight(weights[0]).nanmean(0),      # (h, L)
            "induction": induction_weight(last, x).nanmean(0),             # (h, L)
            "in_window": window.nanmean(0)}                                # (h, L)
