"""Attention at inference (chapters 11 and 12): a key/value cache, greedy generation with and
without it, chunked prefill, grouped-query decoding and the cache's memory.

A decoder generates one token at a time. Without a cache, step ``t`` runs the model on all
``t`` tokens again, although the keys and values of the first ``t - 1`` have not changed
(the causal mask guarantees it). A **KV cache** keeps, per layer, the keys and values of
every token processed so far; a step then projects only the new token and attends its one
query to all cached keys. The model needs no change for that: :class:`attnlib.models.gpt.GPT`
takes ``past_kv`` and an ``attn_mask`` and returns the extended keys and values.

The mask is where people slip. New queries that come *after* ``S0`` cached keys sit at
the bottom of the ``(L, S)`` score matrix, so their causal mask is aligned to the lower
right (:func:`attnlib.causal_mask` with ``align="lower_right"``); the default
``is_causal=True`` is aligned to the upper left and would hide most of the cache.

* :class:`KVCache` - per-layer keys and values, their length and bytes.
* :func:`extend` - run new tokens against a cache and append their keys and values.
* :func:`prefill` - the prompt, in chunks of ``chunk_size`` tokens (lower-right masks).
* :func:`generate` - greedy decoding, with or without the cache.
* :func:`grouped_attention` - grouped-query attention without copying key/value heads.
* :func:`kv_cache_bytes` - the cache's size for a model configuration.
* :func:`rope_gpt` - chapter 9's model with rotary position embeddings
  (:class:`RotarySelfAttention`) instead of a position table.
"""
from __future__ import annotations

import dataclasses
import math
from numbers import Real

import torch

from ..kernels._array import check_size, check_token_ids
from ..kernels.attention import scaled_dot_product_attention
from ..kernels.masks import causal_mask
from ..models.gpt import GPT, CausalSelfAttention, GPTConfig
from ..kernels.rope import apply_rope

__all__ = ["KVCache", "extend", "prefill", "generate", "grouped_attention", "kv_cache_bytes",
           "DTYPE_BYTES", "RotarySelfAttention", "rope_gpt"]

DTYPE_BYTES = {"float32": 4, "fp32": 4, "float16": 2, "fp16": 2, "bfloat16": 2, "bf16": 2,
               "float8": 1, "fp8": 1, "int8": 1, "int4": 0.5}
"""Bytes per stored number for the dtypes :func:`kv_cache_bytes` accepts by name."""


class KVCache:
    """The keys and values of every layer for the tokens processed so far.

    ``layers[i]`` is ``(k, v)`` of layer ``i``, each ``(N, h_kv, S, d_head)``, or the cache
    is empty (``layers == []``). :func:`extend` replaces them with the extended tensors the
    model returns.

    Example::

        >>> cache = KVCache()
        >>> logits = extend(model, prompt, cache)   # (N, L, V); cache.length == L
    """

    def __init__(self):
        self.layers: list = []

    @property
    def length(self) -> int:
        """Number of cached positions ``S`` (0 when empty)."""
        return int(self.layers[0][0].shape[-2]) if self.layers else 0

    def __len__(self) -> int:
        return self.length

    @property
    def nbytes(self) -> int:
        """Bytes held by all cached keys and values."""
        return sum(t.numel() * t.element_size() for kv in self.layers for t in kv)

    def past(self):
        """The cache in the form the model's ``past_kv`` takes (``None`` when empty)."""
        return self.layers or None

    def __repr__(self) -> str:
        return f"KVCache({len(self.layers)} layers, {self.length} positions, {self.nbytes} bytes)"


@torch.no_grad()
def extend(model, tokens, cache: KVCache):
    """Run ``tokens`` through ``model`` after the cached ones and append their keys and values.

    The ``L`` new queries attend to the ``S = S0 + L`` keys (``S0`` cached) through a causal
    mask aligned to the lower right: new token ``i`` sees keys ``j <= S0 + i``.

    Args:
        model: a :class:`attnlib.models.gpt.GPT` (anything whose call accepts ``past_kv``,
            ``attn_mask`` and ``return_kv=True`` and returns ``(logits, kv)``).
        tokens: token ids ``(N, L)``, a long tensor, ``L >= 1``.
        cache: the :class:`KVCache` to read and extend (updated in place).

    Returns:
        logits ``(N, L, V)`` of the token after each new one.
    """
    _check_tokens("tokens", tokens, model)
    _check_batch(tokens, cache)
    L, S0 = tokens.shape[1], cache.length                 # new tokens, cached positions
    _check_length(model, S0 + L, f"{S0} cached + {L} new tokens")
    # new token i sits at position S0 + i: it may see keys j <= S0 + i (lower-right aligned)
    mask = None if S0 == 0 else causal_mask(L, S0 + L, align="lower_right", like=tokens)  # (L, S)
    # every layer prepends its cached keys and values to the new ones and returns them all
    logits, cache.layers = model(tokens, past_kv=cache.past(), attn_mask=mask, return_kv=True)
    return logits                                         # (N, L, V)


def _check_batch(tokens, cache):
    """The new tokens must continue every sequence the cache holds."""
    if cache.length and tokens.shape[0] != cache.layers[0][0].shape[0]:
        raise ValueError(f"tokens has shape {tuple(tokens.shape)} (N = {tokens.shape[0]} sequences) but "
                         f"the cache holds N = {cache.layers[0][0].shape[0]}: extend every sequence of "
                         f"the cache at once, or start a new KVCache() for a different batch")


def _check_tokens(name, tokens, model):
    """Token ids must be an integer (N, L) tensor with L >= 1, each id below the model's vocab_size."""
    check_token_ids(name, tokens, getattr(getattr(model, "cfg", None), "vocab_size", None), min_length=1)


def _check_length(model, total, what):
    """Refuse, with the fix, a sequence longer than the model's ``context_length``."""
    context_length = getattr(getattr(model, "cfg", None), "context_length", None)
    if context_length is not None and total > context_length:
        raise ValueError(f"{what} = {total} positions, but the model takes at most "
                         f"context_length = {context_length}: generate fewer tokens, shorten the prompt, or "
                         f"build the model with a larger context_length")


@torch.no_grad()
def prefill(model, prompt, cache: KVCache, *, chunk_size=None):
    """Fill ``cache`` with ``prompt`` (N, L0), ``chunk_size`` tokens per model call.

    ``chunk_size=None`` runs the whole prompt in one call (the upper-left and lower-right
    masks agree there, since the cache is empty). Smaller chunks bound the size of the
    ``(L, S)`` score matrix of one call; each chunk attends to the cache with a
    lower-right mask, so the result is the same.

    Args:
        model: a :class:`attnlib.models.gpt.GPT` (as in :func:`extend`).
        prompt: token ids ``(N, L0)``, a long tensor, ``L0 >= 1``, each id below the model's
            ``vocab_size``.
        cache: the :class:`KVCache` to fill (usually empty; updated in place).
        chunk_size: prompt tokens per model call, a positive int. Default: ``None`` (all
            ``L0`` in one call).

    Returns:
        the logits ``(N, L0, V)`` of the whole prompt.
    """
    _check_tokens("prompt", prompt, model)
    L0 = prompt.shape[1]
    chunk = L0 if chunk_size is None else check_size("chunk_size", chunk_size)
    if chunk < 1:
        raise ValueError(f"chunk_size must be >= 1 (tokens per call), got {chunk_size}")
    parts = [extend(model, prompt[:, s:s + chunk], cache) for s in range(0, L0, chunk)]
    return torch.cat(parts, dim=1)  # (N, L0, V)


@torch.no_grad()
def generate(model, prompt, n_new, *, use_cache=True, chunk_size=None):
    """Greedy decoding: append the most likely next token ``n_new`` times.

    Args:
        model: a :class:`attnlib.models.gpt.GPT`.
        prompt: token ids ``(N, L0)``, ``L0 >= 1``.
        n_new: number of tokens to generate.
        use_cache: keep a :class:`KVCache` and run only the newest token through the model
            at each step. ``False`` runs the whole sequence again at each step.
            Default: ``True``.
        chunk_size: prefill the prompt this many tokens at a time (with the cache only).
            Default: ``None`` (one call).

    Returns:
        token ids ``(N, L0 + n_new)``: the prompt followed by the generated tokens.

    Example::

        >>> out = generate(model, prompt, 20)                      # (N, L0 + 20)
        >>> torch.equal(out, generate(model, prompt, 20, use_cache=False))
        True
    """
    n_new = check_size("n_new", n_new)
    _check_tokens("prompt", prompt, model)
    # the last model call sees the prompt and all generated tokens but the last one
    _check_length(model, prompt.shape[1] + max(n_new - 1, 0),
                  f"a prompt of {prompt.shape[1]} tokens + {n_new} new ones - 1")
    idx = prompt
    if not use_cache:
        for _ in range(n_new):
            logits = model(idx)  # (N, S, V): every position again
            idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)  # (N, S + 1)
        return idx
    if n_new == 0:
        return idx
    cache = KVCache()
    logits = prefill(model, prompt, cache, chunk_size=chunk_size)  # (N, L0, V)
    for step in range(n_new):
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # (N, 1)
        idx = torch.cat([idx, nxt], dim=1)
        if step + 1 < n_new:
            logits = extend(model, nxt, cache)  # (N, 1, V): one query against S cached keys
    return idx


def grouped_attention(q, k, v, attn_mask=None, *, scale=None):
    """Grouped-query attention that never copies a key/value head.

    The ``h / g`` query heads that share key/value head ``m`` are stacked as extra query
    rows: ``q (N, h, L, E) -> (N, g, (h/g) L, E)``, attended against ``k, v (N, g, S, E)``
    once, and unstacked. Each cached key is read once per *group*, not once per query
    head, which is what makes decoding with few key/value heads cheaper. Equal to
    ``scaled_dot_product_attention(q, repeat_kv(k, h/g), repeat_kv(v, h/g), attn_mask)``.

    Args:
        q: queries ``(N, h, L, E)`` (torch).
        k: keys ``(N, g, S, E)``, ``g`` dividing ``h``.
        v: values ``(N, g, S, Ev)``.
        attn_mask: a mask ``(L, S)`` shared by every head, bool (True = may attend) or
            float. Default: ``None``.
        scale: the score scale. Default: ``None`` (``1/sqrt(E)``).

    Returns:
        ``(N, h, L, Ev)``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} is a {type(t).__name__}; grouped_attention takes torch tensors: "
                            f"convert with torch.as_tensor({name})")
        if t.ndim != 4:
            shape = tuple(t.shape) if hasattr(t, "shape") else type(t).__name__
            raise ValueError(f"{name} is {shape}; grouped_attention takes torch tensors of shape "
                             f"(N, heads, length, features): q (N, h, L, E), k and v (N, g, S, E); add "
                             f"the missing axes, e.g. {name}[None] for one sequence")
    N, h, L, E = q.shape
    g = k.shape[-3]
    if k.shape[:2] != v.shape[:2] or k.shape[0] != N or k.shape[2] != v.shape[2] or k.shape[3] != E:
        raise ValueError(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: k and v must "
                         f"share N, g and S, with N = {N} as in q and k's last dim = E = {E}")
    if h % g:
        raise ValueError(f"q has {h} heads and k has {g}: the key/value heads must divide the query "
                         f"heads (q {tuple(q.shape)}, k {tuple(k.shape)}, dim -3)")
    r = h // g
    qg = q.reshape(N, g, r * L, E)  # (N, h, L, E) -> (N, g, r*L, E): a group's heads as rows
    if attn_mask is not None:
        S = k.shape[2]
        if not isinstance(attn_mask, torch.Tensor) or tuple(attn_mask.shape) != (L, S):
            shape = tuple(attn_mask.shape) if hasattr(attn_mask, "shape") else type(attn_mask).__name__
            raise ValueError(f"attn_mask is {shape} but grouped_attention takes one (L, S) = ({L}, {S}) "
                             f"mask shared by every head and sequence; for per-head or per-sequence "
                             f"masks use scaled_dot_product_attention(q, repeat_kv(k, {r}), "
                             f"repeat_kv(v, {r}), attn_mask)")
        attn_mask = attn_mask.repeat(r, 1)  # (L, S) -> (r*L, S), one copy per stacked head
    out = scaled_dot_product_attention(qg, k, v, attn_mask, scale=scale)  # (N, g, r*L, Ev)
    return out.reshape(N, h, L, v.shape[-1])  # (N, h, L, Ev)


def kv_cache_bytes(num_layers, num_kv_heads, d_head, *, dtype="float16", tokens=1, batch=1):
    """Bytes of a key/value cache: ``2 * num_layers * num_kv_heads * d_head * bytes * tokens * batch``.

    The 2 counts keys and values. For multi-head attention ``num_kv_heads`` is the number
    of heads; with grouped-query attention it is the number of key/value heads.

    Args:
        num_layers: number of attention layers.
        num_kv_heads: key/value heads per layer.
        d_head: features per head.
        dtype: the stored dtype: a name from :data:`DTYPE_BYTES` (``"float16"``,
            ``"bfloat16"``, ``"float32"``, ``"int8"``, ...), a ``torch.dtype``, a NumPy
            dtype or a number of bytes. Default: ``"float16"``.
        tokens: cached positions per sequence. Default: ``1`` (bytes per token).
        batch: sequences. Default: ``1``.

    Returns:
        the size in bytes (an int when it is whole).

    Example::

        >>> kv_cache_bytes(32, 32, 128)                 # Llama 2 7B, fp16, per token
        524288
    """
    sizes = {"num_layers": num_layers, "num_kv_heads": num_kv_heads, "d_head": d_head, "tokens": tokens,
             "batch": batch}
    n = 2
    for name, value in sizes.items():
        n *= check_size(name, value)
    b = _bytes_per_number(dtype)
    total = n * b
    return int(total) if float(total).is_integer() else total


def _bytes_per_number(dtype):
    """The bytes per stored number that ``dtype`` names (see :func:`kv_cache_bytes`)."""
    import numpy as np

    if isinstance(dtype, torch.dtype):
        return torch.empty((), dtype=dtype).element_size()
    if isinstance(dtype, str):
        if dtype not in DTYPE_BYTES:
            raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(DTYPE_BYTES)}, a torch "
                             f"dtype or a number of bytes")
        return DTYPE_BYTES[dtype]
    if isinstance(dtype, Real) and not isinstance(dtype, (bool, np.bool_)):  # a number of bytes
        if not (math.isfinite(dtype) and dtype > 0):
            raise ValueError(f"dtype={dtype!r} as a number of bytes per stored number must be positive "
                             f"and finite, e.g. dtype=2 for float16 or dtype=0.5 for int4")
        return dtype
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return np.dtype(dtype).itemsize  # a NumPy dtype or scalar type, e.g. np.float16
    raise TypeError(f"dtype must be a name, a torch dtype, a NumPy dtype or a positive number of bytes, "
                    f"got {dtype!r} of type {type(dtype).__name__}")


class RotarySelfAttention(CausalSelfAttention):
    """Chapter 9's causal self-attention with rotary position embeddings on ``q`` and ``k``.

    Each call's ``L`` tokens are rotated by their absolute positions ``S0, ..., S0 + L - 1``,
    where ``S0`` is the length of ``past_kv`` (0 without a cache), so cached keys, rotated
    once when they were computed, stay valid. Everything else (projections, attention,
    cache handling, masks) is :class:`attnlib.models.gpt.CausalSelfAttention`'s.

    Args:
        cfg: the model's :class:`attnlib.models.gpt.GPTConfig`.
        base: the RoPE base (:func:`attnlib.apply_rope`). Default: ``10000.0``.
    """

    def __init__(self, cfg: GPTConfig, base: float = 10000.0):
        super().__init__(cfg)
        self.base = base
        self._start = 0  # position of this call's first token, set by forward

    def project(self, x):
        """``x (N, L, d_model)`` -> ``q, k, v`` ``(N, h, L, d_head)``, ``q`` and ``k`` rotated."""
        q, k, v = super().project(x)
        pos = torch.arange(self._start, self._start + x.shape[1], device=x.device)  # (L,)
        return apply_rope(q, pos, base=self.base), apply_rope(k, pos, base=self.base), v

    def forward(self, x, past_kv=None, **kwargs):
        self._start = 0 if past_kv is None else int(past_kv[0].shape[-2])
        return super().forward(x, past_kv, **kwargs)


def rope_gpt(cfg: GPTConfig, *, base: float = 10000.0) -> GPT:
    """Chapter 9's :class:`attnlib.models.gpt.GPT` with RoPE in every attention layer and no
    position table (``pos="none"``): positions enter only through the rotation of ``q``
    and ``k``, so scores depend on relative positions.

    Args:
        cfg: the model's :class:`attnlib.models.gpt.GPTConfig` (its ``pos`` is replaced by ``"none"``).
        base: the RoPE base (:func:`attnlib.apply_rope`). Default: ``10000.0``.

    Returns:
        a :class:`attnlib.models.gpt.GPT` whose attention layers are :class:`RotarySelfAttention`.

    Example::

        >>> model = rope_gpt(GPTConfig(vocab_size=32, num_layers=2, num_heads=4, d_model=64))
    """
    model = GPT(dataclasses.replace(cfg, pos="none"))
    for block in model.blocks:
        block.attn = RotarySelfAttention(model.cfg, base=base)
    return model
