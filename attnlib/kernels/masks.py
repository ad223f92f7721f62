"""Boolean attention masks, in PyTorch SDPA's convention: True = this query MAY attend to
this key, False = blocked.

Shapes, chosen to compose with scores of shape ``(N..., L, S)``:

* ``causal_mask(L, S)`` is ``(L, S)``: it broadcasts over any batch and head dims.
* ``padding_mask(lengths, S)`` is ``(N, 1, S)``: the size-1 axis broadcasts over the L
  queries, so it applies directly to scores ``(N, L, S)``. With heads, scores are
  ``(N, h, L, S)``: add a head axis with ``mask[:, None]`` -> ``(N, 1, 1, S)``
  (:func:`attnlib.multi_head_attention` does this for you).
* Combine masks with ``&`` (a key is visible only if every mask allows it):
  ``causal_mask(L, S) & padding_mask(lengths, S)`` -> ``(N, L, S)``.

``nn.MultiheadAttention`` uses the opposite convention (True = blocked): pass it ``~mask``.
"""
from __future__ import annotations

import numpy as np

from ._array import check_size, fmt_shape, is_torch, namespace

__all__ = ["causal_mask", "padding_mask"]


def causal_mask(L, S=None, *, align="upper_left", like=None):
    r"""Causal (look-ahead) mask: query ``i`` may attend to key ``j`` unless ``j`` lies in
    its future.

    Where the queries sit among the keys when ``L != S`` is a convention, chosen by
    ``align``:

    * ``"upper_left"`` (the default; ``torch.tril(torch.ones(L, S))`` and SDPA's
      ``is_causal=True``): query ``i`` sees keys ``j <= i``. With ``L < S`` the last keys
      stay hidden from every query, which is *wrong* for decoding against a cache.
    * ``"lower_right"`` (``torch.nn.attention.bias.causal_lower_right``): query ``i`` sees
      keys ``j <= i + S - L``. The ``L`` queries are the *last* ``L`` positions of the
      ``S`` keys, as when ``L`` new tokens attend to a cache of ``S - L`` old ones plus
      themselves; the last query sees every key. With ``L > S`` the first ``L - S`` rows
      are empty (attention gives zeros there).

    Both agree when ``L == S``.

    Args:
        L: number of queries (target length).
        S: number of keys (source length). Default: ``None`` (``S = L``).
        align: ``"upper_left"`` or ``"lower_right"``, the corner the diagonal starts
            from. Default: ``"upper_left"``.
        like: an array whose library and device the mask should match (e.g. your ``q``).
            Default: ``None`` (a NumPy array).

    Returns:
        a bool array of shape ``(L, S)``, True where query ``i`` may attend to key ``j``.

    Raises:
        ValueError: ``align`` is neither ``"upper_left"`` nor ``"lower_right"``, or a
            size is negative.

    Example::

        >>> al.causal_mask(3).astype(int)
        array([[1, 0, 0],
               [1, 1, 0],
               [1, 1, 1]])
        >>> al.causal_mask(1, 4, align="lower_right").astype(int)  # one new token, 3 cached
        array([[1, 1, 1, 1]])
    """
    L = check_size("L", L)
    S = L if S is None else check_size("S", S)
    if align not in ("upper_left", "lower_right"):
        raise ValueError(f"align must be 'upper_left' (query i sees keys j <= i, like is_causal=True) "
                         f"or 'lower_right' (query i sees keys j <= i + S - L, for new tokens "
                         f"against a cache), got {align!r}")
    offset = S - L if align == "lower_right" else 0  # diagonal shift: key j <= i + offset
    if like is None:
        return np.tril(np.ones((L, S), dtype=bool), k=offset)
    xp = namespace(like=like)
    dev = getattr(like, "device", None)
    i = xp.arange(L, device=dev)[:, None]  # (L, 1) query positions
    j = xp.arange(S, device=dev)[None, :]  # (1, S) key positions
    return j <= i + offset  # (L, S)


def padding_mask(lengths, S):
    r"""Key padding mask: in batch element ``n`` only the first ``lengths[n]`` keys are real.

    Args:
        lengths: the number of real (non-padding) keys of each batch element, shape
            ``(N,)``, integers in ``[0, S]``; a NumPy array, a torch tensor (the mask
            follows its library and device) or a Python list (read as NumPy). Integer
            dtypes only: float lengths such as 1.9 are refused, never truncated.
        S: the padded key length.

    Returns:
        a bool array of shape ``(N, 1, S)``: True where key ``j < lengths[n]``. The middle
        axis broadcasts over the ``L`` queries of scores ``(N, L, S)``; for scores
        ``(N, h, L, S)`` use ``mask[:, None]`` -> ``(N, 1, 1, S)``. A length of 0 leaves
        nothing to attend to: attention then returns zeros for that element.

    Example::

        >>> al.padding_mask([2, 3], 4).astype(int)
        array([[[1, 1, 0, 0]],
        <BLANKLINE>
               [[1, 1, 1, 0]]])
    """
    if isinstance(lengths, (list, tuple)):  # read as NumPy without casting: 1.9 must not become 1
        lengths = np.asarray(lengths) if len(lengths) else np.zeros(0, dtype=np.int64)
    S = check_size("S", S)
    xp = namespace(lengths=lengths)
    if not xp.isdtype(lengths.dtype, "integral"):
        seen = ""
        if xp.isdtype(lengths.dtype, "real floating") and lengths.ndim == 1:
            frac = [float(x) for x in lengths if float(x) != int(float(x))] if lengths.shape[0] < 10**6 else []
            seen = f" (e.g. {frac[0]} is not a whole number)" if frac else ""
        fix = "lengths.long()" if is_torch(lengths) else "np.asarray(lengths).astype(int)"
        raise TypeError(f"lengths has dtype {lengths.dtype}{seen}; it must hold integer key counts "
                        f"(whole numbers, not rounded silently): pass ints, e.g. {fix} once you "
                        f"have checked the values")
    if lengths.ndim != 1:
        raise ValueError(f"lengths has shape {fmt_shape(lengths.shape)}; it must be 1-D (N,), "
                         f"one key count per batch element (flatten it with lengths.reshape(-1))")
    if lengths.shape[0] and (bool(xp.any(lengths < 0)) or bool(xp.any(lengths > S))):
        raise ValueError(f"lengths must lie in [0, S] = [0, {S}], got min {int(xp.min(lengths))} "
                         f"and max {int(xp.max(lengths))}; pass S >= max(lengths)")
    j = xp.arange(S, device=getattr(lengths, "device", None))  # (S,) key positions
    return j[None, None, :] < lengths[:, None, None]  # (1, 1, S) < (N, 1, 1) -> (N, 1, S)
