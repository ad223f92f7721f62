"""Exercises of chapter 06 (the Transformer block): ``layer_norm``.

Conventions (those of the chapter and of :func:`attnlib.models.transformer.layer_norm`,
which follows ``torch.nn.LayerNorm``): ``x`` is ``(..., n, d_model)``; each token's
``d_model`` features are normalised to mean 0 and variance 1, the variance divided by
``d_model`` (not ``d_model - 1``) and ``eps`` added inside the square root, then
multiplied by ``gain`` and shifted by ``shift`` (each ``(d_model,)``). The reference is
plain NumPy, independent of :mod:`attnlib.models.transformer`.
"""
from __future__ import annotations

import numpy as np

from .._model import Case, Exercise, Mistake, register
from ._ref import f64 as _np

__all__ = []  # exercises register themselves; nothing to import from here


def layer_norm_reference(x, gain, shift, eps=1e-5):
    """Layer normalisation over the last axis (each token's features).

    Args:
        x: ``(..., n, d_model)``.
        gain, shift: ``(d_model,)``.
        eps: added to the variance inside the square root. Default: ``1e-5``.

    Returns:
        ``(..., n, d_model)``: ``(x - mean) / sqrt(var + eps) * gain + shift``, the mean and
        the (biased) variance taken over the last axis.
    """
    x = _np(x)
    mean = x.mean(axis=-1, keepdims=True)                   # (..., n, 1)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)    # (..., n, 1): divided by d_model
    return (x - mean) / np.sqrt(var + eps) * _np(gain) + _np(shift)


def _ln_over_tokens(x, gain, shift, eps=1e-5):
    x = _np(x)
    mean = x.mean(axis=-2, keepdims=True)                   # across the tokens: mixes them
    var = x.var(axis=-2, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * _np(gain) + _np(shift)


def _ln_unbiased(x, gain, shift, eps=1e-5):
    x = _np(x)
    var = x.var(axis=-1, keepdims=True, ddof=1)             # / (d_model - 1)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(var + eps) * _np(gain) + _np(shift)


def _ln_eps_outside(x, gain, shift, eps=1e-5):
    x = _np(x)
    std = x.std(axis=-1, keepdims=True)
    return (x - x.mean(-1, keepdims=True)) / (std + eps) * _np(gain) + _np(shift)


def _ln_no_eps(x, gain, shift, eps=1e-5):
    x = _np(x)
    with np.errstate(all="ignore"):
        return (x - x.mean(-1, keepdims=True)) / x.std(axis=-1, keepdims=True) * _np(gain) + _np(shift)


def _ln_rms(x, gain, shift, eps=1e-5):
    x = _np(x)
    rms = np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + eps)  # no mean subtracted: RMSNorm
    return x / rms * _np(gain) + _np(shift)


def _ln_no_sqrt(x, gain, shift, eps=1e-5):
    x = _np(x)
    var = x.var(axis=-1, keepdims=True)
    return (x - x.mean(-1, keepdims=True)) / (var + eps) * _np(gain) + _np(shift)


def _ln_shift_first(x, gain, shift, eps=1e-5):
    x = _np(x)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    return (y + _np(shift)) * _np(gain)


def _ln_affine_ignored(x, gain, shift, eps=1e-5):
    x = _np(x)
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(axis=-1, keepdims=True) + eps)


def _ln_cases(rng):
    n = rng.standard_normal

    def affine(d):
        return 1.0 + 0.5 * n(d), 0.5 * n(d)      # gain near 1, shift near 0: both matter

    near_constant = 1e-3 * n((3, 8))              # spread 1e-3: variance 1e-6, well below eps
    near_constant[1] = 2.0                        # one token whose features are all equal
    return [
        Case((3.0 * n((5, 8)) + 1.0, *affine(8)), label="5 tokens, d_model = 8, mean 1, spread 3"),
        Case((n((2, 4, 6)), *affine(6)), label="a batch of 2 sequences of 4 tokens, d_model = 6"),
        Case((n((1, 16)), *affine(16)), label="one token, d_model = 16"),
        Case((n((3, 4)), *affine(4)), label="d_model = 4 (small: d_model - 1 and d_model differ)"),
        Case((near_constant, *affine(8)),
             label="tokens whose features barely vary (variance 1e-6 < eps), one exactly constant"),
        Case((n((4, 8)), *affine(8)), {"eps": 0.5}, label="a large eps, 0.5"),
        Case((10.0 + n((3, 32)), *affine(32)), label="d_model = 32, features near 10 (a large mean)"),
    ]


register(Exercise(
    name="layer_norm",
    chapter="06_transformer_block",
    prompt="Normalise each token of x (..., n, d_model) over its d_model features to mean 0 and variance 1 "
           "(variance divided by d_model, eps inside the square root), then multiply by gain and add shift.",
    stub='''def layer_norm(x, gain, shift, eps=1e-5):
    """Layer normalisation of every token of x.

    Args:
        x: (..., n, d_model) array: n tokens of d_model features each.
        gain, shift: (d_model,) arrays: the learned scale and offset.
        eps: a small number added to the variance inside the square root.

    Returns:
        (..., n, d_model) array: each token's features normalised to mean 0
        and variance 1, then multiplied by gain and shifted by shift.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=layer_norm_reference,
    cases=_ln_cases,
    mistakes=[
        Mistake("over_tokens", "Normalised across the tokens instead of within each token",
                "You took the mean and the variance over the token axis (-2): each feature is normalised "
                "across the sequence, so every output depends on every token. Changing one word would "
                "then move all the outputs, which in a block is attention's job alone (and in a decoder "
                "it lets the future leak into the past). LayerNorm normalises each token's own d_model "
                "features.",
                _ln_over_tokens,
                fix="Take the mean and the variance over the last axis, with keepdims=True: "
                    "x.mean(axis=-1, keepdims=True)."),
        Mistake("unbiased_variance", "The variance divided by d_model - 1",
                "You used the sample variance that divides by d_model - 1 (np.var with ddof=1, or torch.var "
                "and torch.std, whose default is the unbiased estimate). LayerNorm normalises this "
                "token's own d_model numbers; it does not estimate the variance of a population, and it "
                "divides by d_model, as nn.LayerNorm does.",
                _ln_unbiased,
                fix="np.var(x, axis=-1, keepdims=True) (ddof=0), or torch.var(x, dim=-1, keepdim=True, "
                    "correction=0)."),
        Mistake("eps_outside_root", "eps added to the standard deviation, not to the variance",
                "You divided by sqrt(var) + eps. For a token whose features barely vary the two differ "
                "a lot: eps belongs inside the square root, added to the variance, as in nn.LayerNorm.",
                _ln_eps_outside,
                fix="(x - mean) / np.sqrt(var + eps)."),
        Mistake("no_eps", "eps is left out",
                "Without eps, a token whose features are all equal has variance 0 and the division gives "
                "0 / 0 = NaN; a token whose features barely vary is blown up to unit variance, noise "
                "included. eps keeps the denominator away from 0.",
                _ln_no_eps,
                fix="Divide by np.sqrt(var + eps), with the eps argument."),
        Mistake("rms_norm", "The mean is not subtracted (that is RMSNorm)",
                "You divided x by the root of its mean square without subtracting the mean first. That "
                "is RMSNorm, a different normalisation (Llama uses it); LayerNorm centres each token's "
                "features on their mean before scaling them, so its output has mean 0 before the shift.",
                _ln_rms,
                fix="Subtract x.mean(axis=-1, keepdims=True) first, and use the variance of the centred "
                    "features."),
        Mistake("no_sqrt", "Divided by the variance instead of the standard deviation",
                "Dividing by the variance gives the features variance 1 / var, not 1: the square root "
                "turns the variance back into the scale of the features.",
                _ln_no_sqrt,
                fix="(x - mean) / np.sqrt(var + eps)."),
        Mistake("shift_before_gain", "The shift is added before the gain multiplies",
                "The learned scale and offset act in that order: normalise, multiply by gain, then add "
                "shift. Adding shift first multiplies it by gain as well.",
                _ln_shift_first,
                fix="y = (x - mean) / np.sqrt(var + eps); return y * gain + shift."),
        Mistake("affine_ignored", "gain and shift are not applied",
                "Your output has mean 0 and variance 1 for every token, but LayerNorm ends with its learned "
                "scale and offset: multiply by gain and add shift.",
                _ln_affine_ignored,
                fix="Return y * gain + shift."),
    ],
    borrowed=("attnlib.models.transformer.layer_norm", "torch.nn.functional.layer_norm", "torch.layer_norm",
              "torch.nn.LayerNorm.forward", "aten::layer_norm", "aten::native_layer_norm"),
    hint="LayerNorm works on one token at a time: over which axis do you take the mean and the variance? "
         "Then: which variance (divided by what), where does eps go, and in which order do gain and shift "
         "act?",
    hints=("Over the last axis, keeping it for broadcasting: the mean, then the variance of x - mean divided "
           "by d_model; divide x - mean by the square root of (variance + eps); then gain times that, plus "
           "shift.",
           "mean = x.mean(-1, keepdims=True); var = ((x - mean) ** 2).mean(-1, keepdims=True); "
           "return (x - mean) / np.sqrt(var + eps) * gain + shift."),
))
