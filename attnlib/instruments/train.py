"""Chapter 9's instruments, which the later chapters use too: the tasks, a training loop that
trains several seeds at once (:func:`train_seeds`), the model of chapter 9's training-loop
exercise (:func:`model_from_weights`), and the measurements taken
on a trained :class:`attnlib.models.gpt.GPT` (head scores, ablation, gradient statistics).
Its live loss curve is drawn by :class:`attnlib.ui.plots.LivePlot` (a figure: the ``ui`` layer).

Kept apart from :mod:`attnlib.models.gpt`, which only defines the network (the measuring
instruments live in their own layer, :mod:`attnlib.instruments`, as ``attnlib/__init__.py``
describes). Import it as ``from attnlib.instruments import train``.

Tasks (all seeded through a ``torch.Generator``; ids are long tensors):

* :func:`repeated_blocks` - a random block of ``period`` tokens repeated: the second copy
  is predictable only by looking back one period (an induction head's job).
* :func:`previous_token_task` - random tokens whose target at position ``i`` is the token
  at position ``i - 1``: the answer depends on *where* a token stands, so a model without
  position information cannot learn it.

What a head does is measured at two grains: per query (:func:`prev_token_weight`,
:func:`induction_weight`, where :func:`seen_before` says a query has something to copy) and
as one score per head, their mean (:func:`prev_token_score`, :func:`induction_score`,
:func:`head_scores`).

Shapes: ``N`` sequences, ``L`` positions, ``h`` heads, ``V`` vocabulary, ``S`` seeds.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from typing import Callable

import array_api_compat
import numpy as np
import torch
from torch.nn import functional as F

from ..models.gpt import GPT, GPTConfig
from ..models.gpt import next_token_loss  # GPT.loss's own: train_seeds' default loss (documented there)

__all__ = ["repeated_blocks", "lm_pair", "previous_token_task", "seeded_batches",
           "model_from_weights", "train_seeds", "SeedRun", "prev_token_weight", "induction_weight", "seen_before",
           "prev_token_score", "induction_score", "head_scores", "position_losses", "seen_token_mass",
           "copy_stats", "copy_losses", "ablation_losses", "attention_stats", "grad_norms", "grad_agreement",
           "layer_grad_norms", "phase_change_step", "span"]


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
    """Inputs and next-token targets of a language model: ``seq[..., :-1]``, ``seq[..., 1:]``
    (``seq`` is ``(..., L)``: ``(N, L)``, or ``(S, N, L)`` with a seed dimension)."""
    return seq[..., :-1], seq[..., 1:]


def previous_token_task(n: int, length: int, *, vocab_size: int = 32,
                        generator: torch.Generator | None = None, device="cpu"):
    """Random ids ``x (n, length)`` and targets ``y`` with ``y[:, i] = x[:, i - 1]``
    (``y[:, 0] = -100``, ignored by the loss)."""
    x = torch.randint(0, vocab_size, (n, length), generator=generator)
    y = torch.full_like(x, -100)
    y[:, 1:] = x[:, :-1]
    return x.to(device), y.to(device)


# --------------------------------------------------------------------------- training

def seeded_batches(make: Callable, seeds, *, offset: int = 1000) -> Callable[[int], tuple]:
    """One data stream per seed, stacked on a leading seed dimension.

    Args:
        make: ``make(generator) -> (x, y)``, one seed's batch drawn with ``generator``
            (e.g. ``lambda g: lm_pair(repeated_blocks(64, 8, generator=g))``).
        seeds: the seeds, one stream each (a list of ints, length ``S``).
        offset: seed ``s`` draws its data from ``torch.Generator().manual_seed(offset + s)``,
            so that the data stream is not the stream ``torch.manual_seed(s)`` drew the
            initial weights from. Default: ``1000``.

    Returns:
        ``batch(step) -> (x, y)``, each ``(S, ...)``: row ``i`` is seed ``seeds[i]``'s batch.
    """
    gens = [torch.Generator().manual_seed(offset + int(s)) for s in seeds]

    def batch(step):
        pairs = [make(g) for g in gens]
        return torch.stack([x for x, _ in pairs]), torch.stack([y for _, y in pairs])  # (S, ...)

    return batch


def model_from_weights(weights: dict, *, num_heads: int = 2, dtype=torch.float64):
    """A :class:`attnlib.models.gpt.GPT` holding a copy of ``weights``, ready to train.

    The model of chapter 9's training-loop exercise: its sizes are read from the shapes of
    ``weights`` (``tok_emb`` ``(V, d_model)``, ``pos_emb`` ``(context_length, d_model)``, one
    ``blocks.<i>`` group per layer, an FFN where ``mlp`` weights are present); learned
    positions and pre-LN, as the chapter's model.

    Args:
        weights: ``{name: array}``, as ``GPT.state_dict()`` names them (NumPy arrays or tensors).
            They are copied: training the model never changes them. Torch's global random
            generator is left as it was.
        num_heads: heads per layer. Default: ``2``.
        dtype: the model's float dtype. Default: ``torch.float64``.

    Returns:
        the model (in training mode), on the CPU.

    Example::

        >>> model = model_from_weights({k: v.numpy() for k, v in GPT(GPTConfig()).state_dict().items()}, num_heads=4)
    """
    if not isinstance(weights, dict) or "tok_emb" not in weights or "pos_emb" not in weights:
        raise ValueError("weights must be a dict {name: array} as GPT.state_dict() names them, with "
                         "'tok_emb' and 'pos_emb' among them")
    V, d_model = np.shape(weights["tok_emb"])
    layers = len({name.split(".")[1] for name in weights if name.startswith("blocks.")})
    cfg = GPTConfig(vocab_size=int(V), context_length=int(np.shape(weights["pos_emb"])[0]),
                    num_layers=layers, num_heads=num_heads, d_model=int(d_model),
                    mlp=any(".mlp." in name for name in weights))
    with torch.random.fork_rng(devices=[]):  # the initial draw is overwritten: leave the caller's generator alone
        model = GPT(cfg).to(dtype)
    model.load_state_dict({k: torch.as_tensor(np.array(v), dtype=dtype) for k, v in weights.items()})
    return model.train()


@dataclass
class SeedRun:
    """What :func:`train_seeds` recorded, seed by seed (``S`` seeds, ``T`` steps).

    Attributes:
        seeds: the seeds, in the order of every seed axis below.
        models: one trained model per seed (plain modules: evaluate, ablate, score them).
        loss: ``(T, S)`` training loss of every step.
        grad_norm: ``(T, S)`` norm of the whole gradient of every step (before the update).
        group_grad_norm: ``{group: (T, S)}``, the gradient norm of each parameter group
            named by ``grad_groups`` (see :func:`train_seeds`).
        evals: ``{step: {key: (S,)}}``, what ``evaluate`` returned for each seed.
        snapshots: ``{step: [one per seed]}``, what ``snapshot`` returned.
        wall_seconds, cpu_seconds: wall-clock and CPU time (``time.process_time``) of the run.
    """

    seeds: list
    models: list
    loss: np.ndarray
    grad_norm: np.ndarray
    group_grad_norm: dict
    evals: dict
    snapshots: dict
    wall_seconds: float = 0.0
    cpu_seconds: float = 0.0

    @property
    def steps(self) -> int:
        """Number of optimiser steps."""
        return len(self.loss)

    def eval_series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps (E,), values (E, S))`` of one evaluated quantity, ``E`` evaluations."""
        steps = np.array(sorted(self.evals))
        return steps, np.stack([self.evals[s][key] for s in steps])

    def final(self, key: str) -> np.ndarray:
        """``(S,)``: the last evaluation of ``key``, one value per seed."""
        return self.evals[max(self.evals)][key]


def train_seeds(make_model: Callable[[], torch.nn.Module], seeds, batch: Callable[[int], tuple], *,
                steps: int, lr: float = 3e-3, warmup: int = 0, weight_decay: float = 0.0,
                loss: Callable = next_token_loss, evaluate: Callable | None = None, eval_every: int = 10,
                snapshot: Callable | None = None, snapshot_at=(), grad_groups: Callable | None = None,
                live=None, on_step: Callable | None = None, device="cpu") -> SeedRun:
    """Train one model per seed, all seeds together, with AdamW.

    The seeds are not trained one after another: their parameters are stacked on a leading
    seed dimension (``torch.func.stack_module_state``) and one ``torch.func.vmap`` of
    ``torch.func.functional_call`` runs every seed's forward pass on its own batch in one
    call. The loss that is differentiated is the *sum* of the seeds' losses, so each seed's
    gradient is its own, and AdamW updates every entry on its own: each seed trains exactly
    as it would alone (up to the rounding of batched kernels).

    Args:
        make_model: ``make_model() -> module``, called once per seed right after
            ``torch.manual_seed(seed)`` (e.g. ``lambda: GPT(cfg)``). Its forward maps ``x`` to
            logits and must run under ``vmap`` (no Python control flow on tensor values).
        seeds: the seeds (ints), ``S`` of them.
        batch: ``batch(step) -> (x, y)``, each ``(S, ...)``, seed ``i``'s batch in row ``i``
            (:func:`seeded_batches` builds one).
        steps: number of optimiser steps.
        lr: peak learning rate. Default: ``3e-3``.
        warmup: steps of linear warm-up: step ``t`` (from 0) uses ``lr * min(1, (t + 1) / warmup)``.
            Default: ``0`` (the peak rate from the first step).
        weight_decay: AdamW's decoupled weight decay. Default: ``0.0``.
        loss: ``loss(logits, y) -> scalar`` for one seed. Default: :func:`attnlib.models.gpt.next_token_loss`.
        evaluate: ``evaluate(model) -> dict`` of numbers, run on each seed's model without
            gradients at step 0, every ``eval_every`` steps and after the last. Default: ``None``.
        eval_every: steps between evaluations. Default: ``10``.
        snapshot: ``snapshot(model) -> anything``, stored for each seed at the steps in
            ``snapshot_at`` (step ``s`` = after ``s`` updates). Default: ``None``.
        snapshot_at: the steps to snapshot. Default: ``()``.
        grad_groups: ``grad_groups(name) -> group or None``: the gradient norm of the
            parameters whose name maps to a group is recorded at every step, per seed
            (e.g. ``lambda n: n.split(".")[1] if n.startswith("blocks.") else None`` gives one
            norm per block). Default: ``None``.
        live: an :class:`attnlib.ui.plots.LivePlot`, redrawn from the evaluations while training (progress).
            Default: ``None``.
        on_step: ``on_step(step, losses)``, called after every optimiser step with the step
            number (``1 ... steps``) and that step's training losses, an ``(S,)`` NumPy array
            (e.g. to print progress without a figure). Default: ``None``.
        device: where the models and the batches live. Default: ``"cpu"``.

    Returns:
        a :class:`SeedRun`.

    Raises:
        ValueError: no seeds, ``steps`` not a positive int, ``make_model`` building models of
            different architectures, or ``batch(0)`` without one row per seed.
        FloatingPointError: a seed's loss is NaN or infinite (the step and seed are named).

    Example::

        >>> run = train_seeds(lambda: GPT(GPTConfig()), range(5), seeded_batches(make, range(5)), steps=100)
        >>> run.loss.shape                                              # (steps, seeds)
        (100, 5)
    """
    seeds = [int(s) for s in seeds]
    if not seeds:
        raise ValueError("seeds is empty: pass the seeds to train, e.g. range(5)")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int (optimiser steps), got {steps!r}")
    models = []
    for s in seeds:
        torch.manual_seed(s)
        models.append(make_model().to(device))

    def architecture(m):                                        # what stacking the seeds needs to agree
        return type(m), {name: tuple(p.shape) for name, p in m.named_parameters()}

    for s, m in zip(seeds, models):
        if architecture(m) != architecture(models[0]):
            raise ValueError(f"make_model built seed {s}'s model with other parameters than seed {seeds[0]}'s: "
                             "the seeds must share one architecture (the same parameter names and shapes), so "
                             "build every seed from the same config")
    params, buffers = torch.func.stack_module_state(models)   # {name: (S, ...)}: the seed dim comes first
    base = copy.deepcopy(models[0]).to("meta")                 # the model's code, without weights

    def seed_loss(p, b, x, y):                                  # one seed: its weights, its batch
        return loss(torch.func.functional_call(base, (p, b), (x,)), y)

    seed_losses = torch.func.vmap(seed_loss)                    # every seed in one call: (S,) losses

    for i, m in enumerate(models):  # each seed's module views its slice of the stacked weights
        for name, p in m.named_parameters():
            p.data = params[name].detach()[i]
    opt = torch.optim.AdamW(params.values(), lr=lr, weight_decay=weight_decay)
    groups = {}
    if grad_groups is not None:
        for name in params:
            g = grad_groups(name)
            if g is not None:
                groups.setdefault(g, []).append(name)
    run = SeedRun(seeds, models, np.zeros((steps, len(seeds))), np.zeros((steps, len(seeds))),
                  {g: np.zeros((steps, len(seeds))) for g in groups}, {}, {})
    snapshot_at = set(snapshot_at)

    def observe(step):
        with torch.no_grad():
            if snapshot is not None and step in snapshot_at:
                run.snapshots[step] = [snapshot(m) for m in models]
            if evaluate is not None and (step % eval_every == 0 or step == steps):
                per_seed = [evaluate(m) for m in models]
                run.evals[step] = {k: np.array([float(d[k]) for d in per_seed]) for k in per_seed[0]}
                if live is not None:
                    live.update(run, step, steps)

    t0, c0 = time.perf_counter(), time.process_time()
    observe(0)
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / warmup) if warmup else lr
        x, y = batch(step)
        if step == 0 and not (x.ndim >= 1 and y.ndim >= 1 and x.shape[0] == y.shape[0] == len(seeds)):
            raise ValueError(f"batch(0) returned x {tuple(x.shape)} and y {tuple(y.shape)}; with {len(seeds)} seeds "
                             f"both must be ({len(seeds)}, ...): one batch per seed in the first dimension "
                             "(seeded_batches builds such a batch)")
        losses = seed_losses(params, buffers, x.to(device), y.to(device))  # (S,)
        run.loss[step] = losses.detach().cpu().numpy()
        if not np.all(np.isfinite(run.loss[step])):
            bad = int(np.flatnonzero(~np.isfinite(run.loss[step]))[0])
            raise FloatingPointError(f"seed {seeds[bad]}: the loss is {run.loss[step, bad]} at step {step}; "
                                     f"lower the learning rate (lr={lr})")
        opt.zero_grad(set_to_none=True)
        losses.sum().backward()   # the sum: each seed's gradient is that of its own loss
        with torch.no_grad():
            sq = {name: p.grad.flatten(1).pow(2).sum(1) for name, p in params.items()}  # (S,) each
            run.grad_norm[step] = torch.stack(list(sq.values())).sum(0).sqrt().cpu().numpy()
            for g, names in groups.items():
                run.group_grad_norm[g][step] = torch.stack([sq[n] for n in names]).sum(0).sqrt().cpu().numpy()
        opt.step()
        observe(step + 1)
        if on_step is not None:
            on_step(step + 1, run.loss[step].copy())
    run.wall_seconds, run.cpu_seconds = time.perf_counter() - t0, time.process_time() - c0
    for m in models:
        m.eval()
    if live is not None:
        live.close(run)
    return run


# --------------------------------------------------------------------------- head scores

def prev_token_weight(weights):
    """Per query ``i``, the weight on the previous token: ``weights[..., i, i - 1]``.

    Args:
        weights: ``(..., L, S)`` attention weights, rows are queries (NumPy or torch).

    Returns:
        ``(..., L)``, of the type of ``weights``; NaN at query 0, which has no previous token.

    Example::

        >>> prev_token_weight(np.eye(3, k=-1))          # a perfect previous-token head
        array([nan,  1.,  1.])
    """
    return _diagonal(weights, offset=-1, first=1)


def prev_token_score(weights):
    """Mean weight from query ``i`` to key ``i - 1`` over ``i = 1 ... L - 1``: the mean of
    :func:`prev_token_weight` over the queries that have a previous token.

    Args:
        weights: ``(..., L, L)`` attention weights, rows are queries (NumPy or torch).

    Returns:
        ``(...)``: 1 for a perfect previous-token head, about ``1/(i+1)`` averaged for a
        uniform causal head.
    """
    return prev_token_weight(weights)[..., 1:].mean(-1)


def induction_score(weights, period: int):
    """On a sequence whose block of ``period`` tokens repeats, the mean weight from query
    ``i`` to key ``i - period + 1`` (the token *after* the previous occurrence of the current
    token) over ``i = period ... L - 1``.

    The key is found from ``period``, so one score needs one period for the whole batch.
    :func:`induction_weight` finds the keys from the tokens instead (any period, every
    earlier occurrence); on two copies of a block of distinct tokens the two agree: this
    score is the mean of :func:`induction_weight` over the queries of the repeat.

    Args:
        weights: ``(..., L, L)`` attention weights, rows are queries (NumPy or torch).
        period: the length of the repeated block.

    Returns:
        ``(...)``.
    """
    return _diagonal(weights, offset=1 - period, first=period)[..., period:].mean(-1)


def _diagonal(weights, offset: int, first: int):
    """``(..., L, S) -> (..., L)``: ``weights[..., i, i + offset]`` for the queries
    ``i = first ... L - 1``, NaN for the queries before ``first`` (nothing to measure)."""
    xp = array_api_compat.array_namespace(weights)
    L = weights.shape[-2]
    i = np.arange(first, L)                                            # the queries measured
    out = xp.full(weights.shape[:-1], math.nan, dtype=weights.dtype,
                  device=array_api_compat.device(weights))             # (..., L)
    out[..., first:] = weights[..., i, i + offset]                     # (..., L - first)
    return out


def seen_before(idx: torch.Tensor) -> torch.Tensor:
    """``(N, L)`` bool: True where ``idx[:, t]`` already occurred in ``idx[:, :t]``.

    There an induction head has something to copy: the token that followed the earlier
    occurrence, which in the sequences of :func:`repeated_blocks` (blocks of distinct
    tokens) is the next token.

    Args:
        idx: token ids ``(N, L)``, a long tensor.

    Example::

        >>> seen_before(torch.tensor([[3, 1, 3, 2, 1]]))
        tensor([[False, False,  True, False,  True]])
    """
    count = _occurrences(idx).gather(-1, idx[..., None])[..., 0]     # (N, L): token t in idx[:, :t + 1]
    return count > 1                                                   # counted before t as well


def induction_weight(weights: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Per query ``i``, the weight on the tokens that followed earlier occurrences of the
    current token: the keys ``j <= i`` whose *previous* token ``idx[:, j - 1]`` equals
    ``idx[:, i]``, however far back. An induction head puts its weight there and copies the
    token it finds.

    The keys are found from the tokens, so every sequence may have its own period (compare
    :func:`induction_score`, which is given the period).

    Args:
        weights: attention weights ``(N, h, L, L)`` (or ``(N, L, L)``) on the sequences ``idx``
            (torch).
        idx: token ids ``(N, L)``.

    Returns:
        ``(N, h, L)`` (or ``(N, L)``); NaN where token ``i`` had not occurred before
        (:func:`seen_before`: nothing to copy).
    """
    N, L = idx.shape
    if weights.ndim not in (3, 4) or weights.shape[0] != N or tuple(weights.shape[-2:]) != (L, L):
        raise ValueError(f"weights has shape {tuple(weights.shape)} but idx is {tuple(idx.shape)}: weights must "
                         f"be (N, h, L, L) or (N, L, L) = ({N}, [h,] {L}, {L}), the attention on those tokens")
    same = idx[:, :, None] == idx[:, None, :]                          # (N, L, L): idx[i] == idx[j]
    target = torch.zeros_like(same)
    target[:, :, 1:] = same[:, :, :-1]                                 # key j: idx[j - 1] == idx[i]
    target &= torch.ones(L, L, dtype=torch.bool, device=idx.device).tril()  # and j <= i
    if weights.ndim == 4:
        target = target[:, None]                                       # (N, 1, L, L): every head
    out = (weights * target).sum(-1)                                   # (N, [h,] L)
    copyable = target.any(-1)                                          # (N, [1,] L): seen_before(idx)
    return torch.where(copyable, out, torch.full_like(out, math.nan))


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


def _occurrences(x: torch.Tensor, V: int = -1) -> torch.Tensor:
    """``(N, L, V)``: how often token ``v`` occurs in ``x[:, :t + 1]`` (``V = -1``: ``max(x) + 1``)."""
    return F.one_hot(x, V).cumsum(dim=-2)


def _mass_on_read(logits: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``(L,)``: the probability that ``logits (N, L, V)`` give at position ``t`` to the tokens
    read so far, ``x[:, :t + 1]``, averaged over the ``N`` sequences."""
    read = _occurrences(x, logits.shape[-1]) > 0                        # (N, L, V): token v among x[:, :t + 1]
    return (logits.softmax(-1) * read).sum(-1).float().mean(0)         # (N, L, V) -> (L,)


@torch.no_grad()
def seen_token_mass(model, x: torch.Tensor) -> np.ndarray:
    """Probability the model gives, at each position ``t``, to the tokens it has already
    read (``x[:, :t + 1]``), averaged over the batch: ``(L,)`` NumPy.

    On a sequence of distinct tokens this is the probability spent on tokens that cannot
    come next (it costs ``-ln(1 - mass)`` nats at ``t``); on a repeat it is the probability
    of "one of the tokens seen so far".
    """
    return _mass_on_read(model(x), x).cpu().numpy()                    # (L,)


@torch.no_grad()
def copy_stats(model, seq: torch.Tensor, period: int) -> dict:
    """:func:`copy_losses` and :func:`seen_token_mass` of a :func:`repeated_blocks` batch from
    one forward pass: ``first`` and ``repeat`` (losses), ``seen_first`` and ``seen_repeat``
    (mean probability given to already-read tokens at the same positions)."""
    x, y = lm_pair(seq)                                                 # (N, L - 1) each
    logits = model(x)                                                   # (N, L - 1, V)
    loss = F.cross_entropy(logits.transpose(1, 2), y, reduction="none").float().mean(0)   # (L - 1,)
    seen = _mass_on_read(logits, x)                                     # (L - 1,)
    k = period - 1                                                      # first copy: targets 1 ... period - 1
    return {"first": float(loss[:k].mean()), "repeat": float(loss[k:].mean()),
            "seen_first": float(seen[:k].mean()), "seen_repeat": float(seen[k:].mean())}


def copy_losses(model, seq: torch.Tensor, period: int) -> dict:
    """Next-token loss on the first copy and on the repeats of a :func:`repeated_blocks` batch.

    The first copy has the targets at positions ``1 ... period - 1``: the block's tokens are
    distinct, so after ``t`` of them the best guess is uniform over the ``V - t`` unseen ids,
    and the best loss is the mean of ``ln(V - t)`` over ``t = 1 ... period - 1`` (not ``ln V``).
    Targets from position ``period`` on ("repeat") repeat what was seen one period earlier.
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


def span(values, step: float = 0.1) -> str:
    """The range of ``values`` (e.g. one number per seed) rounded *outward* to multiples of
    ``step``, as text: ``span([0.34, 0.47]) == "0.3–0.5"``; one number when both ends agree.

    The printed range contains every value, and it stays the same when the values move by
    rounding-level amounts (another CPU's kernels), unless one crosses a multiple of ``step``.

    Args:
        values: the numbers (any shape; NaN is refused).
        step: the grid the ends are rounded to. Default: ``0.1``.
    """
    v = np.asarray(values, dtype=float)
    if v.size == 0 or np.isnan(v).any():
        raise ValueError(f"span needs numbers, got {values!r}")
    # (a tolerance of 1e-9 steps: 0.3 / 0.1 is 2.9999999999999996 in binary floating point)
    lo, hi = math.floor(v.min() / step + 1e-9) * step, math.ceil(v.max() / step - 1e-9) * step
    digits = max(0, -math.floor(math.log10(step) + 1e-9)) if step < 1 else 0
    text = [f"{x:.{digits}f}" for x in (lo, hi)]
    return text[0] if text[0] == text[1] else f"{text[0]}–{text[1]}"


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


def grad_agreement(model, batches, names=("w_q", "w_k")) -> float:
    """How much the gradient's direction agrees from one batch to the next: the mean cosine
    similarity, over every pair of ``batches`` (a list of ``(x, y)``), between the gradients
    of the loss w.r.t. the named attention matrices of every layer (flattened into one vector).
    1: every batch pushes the same way; about 0: the directions are unrelated. Leaves the
    model's ``.grad`` cleared."""
    grads = []
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        model.loss(x, y).backward()
        grads.append(torch.cat([getattr(b.attn, n).grad.flatten() for b in model.blocks for n in names]))
    model.zero_grad(set_to_none=True)
    cos = [float(F.cosine_similarity(grads[i], grads[j], dim=0))
           for i in range(len(grads)) for j in range(i + 1, len(grads))]
    return float(np.mean(cos))


def layer_grad_norms(model, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Gradient norm of the loss w.r.t. all parameters of each block: ``(num_layers,)`` NumPy."""
    model.zero_grad(set_to_none=True)
    model.loss(x, y).backward()
    norms = [math.sqrt(sum(float((p.grad ** 2).sum()) for p in b.parameters() if p.grad is not None))
             for b in model.blocks]
    model.zero_grad(set_to_none=True)
    return np.array(norms)
