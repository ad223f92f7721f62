"""Positions beyond the training length (chapter 12): a model run as if its tokens stood later
in the sequence, and what a copying model does at every position of a long input.

A model trained on sequences of ``L_train`` tokens has seen the positions ``0 ... L_train - 1``
and, between a query and a key, the offsets ``0 ... L_train - 1``. On a longer input it meets
positions it never saw (the untrained rows of a learned position table) or offsets it never
saw (with RoPE, whose scores depend on offsets only). Chapter 12 measures what a copying
model does then, with two instruments:

* :func:`logits_from` - the logits of tokens placed at positions ``start, start + 1, ...``
  with nothing before them (a cache of ``start`` positions that no query may see);
* :func:`position_profile` - at every position of a batch, the accuracy where the next token
  can be copied and what the heads do there, measured per query by chapter 9's instruments
  (:func:`attnlib.instruments.train.prev_token_weight`, :func:`attnlib.instruments.train.induction_weight`,
  :func:`attnlib.instruments.train.seen_before`).

The models are trained, several seeds together, by :func:`attnlib.instruments.train.train_seeds`.
Shapes use the package's symbols: ``N`` sequences, ``L`` tokens, ``h`` heads.
"""
from __future__ import annotations

import math

import torch

from ..kernels.masks import causal_mask
from .train import induction_weight, prev_token_weight, seen_before

__all__ = ["logits_from", "position_profile"]


# --------------------------------------------------------------------------- positions

@torch.no_grad()
def logits_from(model, idx, start):
    """Next-token logits of ``idx`` placed at positions ``start, ..., start + L - 1``.

    Nothing stands before the tokens: the model runs against a cache of ``start`` positions
    whose keys and values are zeros and which a mask hides from every query, so only the
    positions change (a learned table's rows ``start ...``; RoPE's rotation angles).
    ``start = 0`` is the ordinary forward pass.

    Args:
        model: a :class:`attnlib.models.gpt.GPT` or :func:`attnlib.instruments.inference.rope_gpt`.
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


@torch.no_grad()
def position_profile(model, seq, trained):
    """What a copying model does at every position of ``seq``, averaged over the sequences.

    Args:
        model: a :class:`attnlib.models.gpt.GPT` (or :func:`attnlib.instruments.inference.rope_gpt`) with at
            least two layers.
        seq: token ids ``(N, L + 1)``; the model reads ``seq[:, :-1]`` and predicts ``seq[:, 1:]``.
        trained: the number of positions seen in training (``0 ... trained - 1``).

    Returns:
        a dict of tensors over the ``L`` input positions (NaN where nothing was measured):

        * ``"accuracy"`` ``(L,)``: the next token predicted right, where the current token
          occurred before (:func:`attnlib.instruments.train.seen_before`, so the next one can be copied);
        * ``"previous"`` ``(h, L)``: each head of the first layer, its weight on the previous
          token (:func:`attnlib.instruments.train.prev_token_weight`);
        * ``"induction"`` ``(h, L)``: each head of the last layer, its weight on the tokens that
          followed earlier occurrences of the current token (:func:`attnlib.instruments.train.induction_weight`);
        * ``"in_window"`` ``(h, L)``: each head of the last layer, its weight on the keys at
          positions ``0 ... trained - 1``, where the current token occurred before.
    """
    if not isinstance(seq, torch.Tensor) or seq.ndim != 2 or seq.shape[1] < 2:
        shape = tuple(seq.shape) if hasattr(seq, "shape") else type(seq).__name__
        raise ValueError(f"seq is {shape}; it must be a torch tensor of token ids (N, L + 1) with L >= 1: "
                         "the model reads seq[:, :-1] and predicts seq[:, 1:]")
    if isinstance(trained, bool) or not isinstance(trained, int) or trained < 1:
        raise ValueError(f"trained must be a positive int (the positions seen in training), got {trained!r}")
    x, y = seq[:, :-1], seq[:, 1:]                                         # (N, L) each
    logits, weights = model(x, return_weights=True)                        # weights: per layer (N, h, L, L)
    copyable = seen_before(x)                                              # (N, L)
    right = (logits.argmax(-1) == y).float()                               # (N, L)
    right = torch.where(copyable, right, torch.full_like(right, math.nan))
    last = weights[-1]                                                     # (N, h, L, L)
    window = last[..., :trained].sum(-1)                                   # (N, h, L)
    window = torch.where(copyable[:, None], window, torch.full_like(window, math.nan))
    return {"accuracy": right.nanmean(0),                                  # (L,)
            "previous": prev_token_weight(weights[0]).nanmean(0),          # (h, L)
            "induction": induction_weight(last, x).nanmean(0),             # (h, L)
            "in_window": window.nanmean(0)}                                # (h, L)
