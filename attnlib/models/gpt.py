"""A small decoder-only Transformer (a GPT) built on attnlib's attention (chapter 9).

After nanoGPT's ``model.py``: a config dataclass, three modules and a forward pass that
fits on a screen. Every attention layer calls :func:`attnlib.scaled_dot_product_attention`
(torch's fused kernel when the weights are not needed, attnlib's plain path when they
are), so what the course taught in chapters 2-6 is what trains here.

* :class:`GPTConfig` - sizes and the three switches the chapter trains with: positions
  (``"learned"``, ``"sinusoidal"`` or ``"none"``), LayerNorm placement (``"pre"``,
  ``"post"`` or ``"none"``) and ``scaled`` (``1/sqrt(d_head)`` or unscaled scores).
* :class:`CausalSelfAttention` - ``h`` heads with ``(d_model, d_model)`` matrices used as
  ``x @ w`` (the course's convention, so :func:`attnlib.multi_head_attention` with the
  same matrices gives the same result). ``project`` returns the per-head ``q, k, v``;
  ``attend`` attends queries to *given* keys and values. A key/value cache (chapter 11)
  therefore needs no change to the model: ``forward(x, past_kv=(k, v), attn_mask=...)``
  prepends the cached keys and values and returns the new ones.
* :class:`Block` - attention and an optional feed-forward network (chapter 6's FFN, the
  class :class:`MLP`), each on a residual path, with post-LN, pre-LN or no LayerNorm.
* :class:`GPT` - token and position embeddings, ``num_layers`` blocks, the unembedding.
  ``forward(idx, return_weights=True)`` also returns every layer's attention weights;
  ``ablated({(layer, head), ...})`` zeroes chosen heads' outputs while it is active.

Shapes use the package's symbols: ``N`` batch, ``L`` tokens (queries), ``S`` keys (``S = L``
without a cache), ``h`` heads, ``d_head = d_model / h``, ``V`` the vocabulary size.
No dropout and no biases in attention, so a seeded run is deterministic on the CPU.

The forward pass also runs under ``torch.func.vmap`` with one set of weights per seed
(:func:`attnlib.instruments.train.train_seeds` trains several seeds at once that way): a check in it
may look at shapes, dtypes and devices, never at the values of a tensor (vmap cannot turn
them into a Python bool).
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from ..kernels._array import check_token_ids
from ..kernels.attention import scaled_dot_product_attention
from .transformer import sinusoidal_positional_encoding  # chapter 6's table, the one sin/cos table

__all__ = ["GPTConfig", "CausalSelfAttention", "MLP", "Block", "GPT", "next_token_loss"]

_POS = ("learned", "sinusoidal", "none")
_NORM = ("pre", "post", "none")


@dataclass
class GPTConfig:
    """Sizes and switches of a :class:`GPT`.

    Attributes:
        vocab_size: number of token ids ``V``. Default: ``32``.
        context_length: the longest sequence (number of position embeddings). Default: ``64``.
        num_layers: number of blocks. Default: ``2``.
        num_heads: heads per attention layer; must divide ``d_model``. Default: ``4``.
        d_model: width of the residual stream. Default: ``64``.
        mlp: add a ``d_model -> 4 d_model -> d_model`` GELU feed-forward network (chapter 6's
            FFN) to every block.
            Default: ``False`` (an attention-only model).
        pos: ``"learned"`` (a trained table), ``"sinusoidal"`` (the fixed table of
            Vaswani et al.) or ``"none"``. Default: ``"learned"``.
        norm: ``"pre"`` (``x + f(LN(x))``, GPT-2), ``"post"`` (``LN(x + f(x))``, the original
            Transformer) or ``"none"``. Default: ``"pre"``.
        scaled: multiply the scores by ``1/sqrt(d_head)``; ``False`` leaves them unscaled.
            Default: ``True``.
    """

    vocab_size: int = 32
    context_length: int = 64
    num_layers: int = 2
    num_heads: int = 4
    d_model: int = 64
    mlp: bool = False
    pos: str = "learned"
    norm: str = "pre"
    scaled: bool = True

    def __post_init__(self):
        if self.pos not in _POS:
            raise ValueError(f"pos={self.pos!r}; use one of {_POS}")
        if self.norm not in _NORM:
            raise ValueError(f"norm={self.norm!r}; use one of {_NORM}")
        if self.d_model % self.num_heads:
            raise ValueError(f"num_heads={self.num_heads} does not divide d_model={self.d_model}: every "
                             f"head gets d_model / num_heads features")
        if self.pos == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"pos='sinusoidal' pairs sin and cos features: d_model={self.d_model} "
                             f"must be even")

    @property
    def d_head(self) -> int:
        """Width of one head (its ``d_k``): ``d_model // num_heads``."""
        return self.d_model // self.num_heads


def _matrix(fan_in: int, fan_out: int) -> nn.Parameter:
    """A ``(fan_in, fan_out)`` weight used as ``x @ w``, drawn from N(0, 1/fan_in): with
    unit-variance inputs every output feature has unit variance (chapter 3's assumption)."""
    return nn.Parameter(torch.randn(fan_in, fan_out) / math.sqrt(fan_in))


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention; weights ``w_q, w_k, w_v, w_o`` are ``(d_model, d_model)``.

    ``ablated`` is a set of head indices whose outputs are zeroed before ``W_O``.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d = cfg.d_model
        self.num_heads, self.d_head = cfg.num_heads, cfg.d_head
        self.scale = 1.0 / math.sqrt(cfg.d_head) if cfg.scaled else 1.0
        self.w_q, self.w_k, self.w_v, self.w_o = (_matrix(d, d) for _ in range(4))
        self.ablated: set[int] = set()

    def project(self, x):
        """``x (N, L, d_model)`` -> per-head ``q, k, v``, each ``(N, h, L, d_head)``."""
        N, L, _ = x.shape
        q, k, v = (x @ w for w in (self.w_q, self.w_k, self.w_v))  # 3 x (N, L, d_model)
        # split the heads: (N, L, d_model) -> (N, L, h, d_head) -> (N, h, L, d_head)
        return tuple(t.view(N, L, self.num_heads, self.d_head).transpose(1, 2) for t in (q, k, v))

    def attend(self, q, k, v, *, attn_mask=None, is_causal=False, return_weights=False):
        """Attend queries ``(N, h, L, d_head)`` to keys and values ``(N, h, S, d_head)``.

        Returns ``out (N, L, d_model)`` (after ``W_O``), or ``(out, weights (N, h, L, S))``.
        """
        res = scaled_dot_product_attention(q, k, v, attn_mask, is_causal=is_causal,
                                           scale=self.scale, return_weights=return_weights)
        heads, weights = res if return_weights else (res, None)      # (N, h, L, d_head)
        if self.ablated:  # zero the chosen heads' outputs
            keep = torch.ones(self.num_heads, 1, 1, device=heads.device, dtype=heads.dtype)
            keep[sorted(self.ablated)] = 0.0
            heads = heads * keep                                      # (N, h, L, d_head) * (h, 1, 1)
        N, h, L, dh = heads.shape
        out = heads.transpose(1, 2).reshape(N, L, h * dh) @ self.w_o  # (N, L, d_model) @ (d_model, d_model)
        return (out, weights) if return_weights else out

    def forward(self, x, past_kv=None, *, attn_mask=None, return_weights=False):
        """Causal self-attention of ``x (N, L, d_model)``.

        Args:
            x: the (new) tokens, ``(N, L, d_model)``.
            past_kv: ``(k, v)``, each ``(N, h, S0, d_head)``, of earlier tokens, prepended to
                this call's keys and values (a KV cache). Default: ``None``.
            attn_mask: bool mask ``(L, S)`` (True = may attend) with ``S = S0 + L``. Needed
                with ``past_kv`` when ``L > 1``: the causal mask must then be aligned to the
                *lower right* (query ``i`` sees keys ``j <= i + S0``). Without ``past_kv``
                and without a mask the causal mask is used. Default: ``None``.
            return_weights: also return the attention weights. Default: ``False``.

        Returns:
            ``(out, (k, v))``: ``out (N, L, d_model)``, or ``(out, weights)`` with
            ``return_weights=True``; ``k, v`` are ``(N, h, S, d_head)``, all keys and values
            so far (pass them back as ``past_kv`` with the next token).
        """
        q, k, v = self.project(x)                                     # (N, h, L, d_head)
        if past_kv is not None:
            k = torch.cat([past_kv[0], k], dim=-2)                    # (N, h, S0 + L, d_head)
            v = torch.cat([past_kv[1], v], dim=-2)
            if attn_mask is None and q.shape[-2] > 1:
                raise ValueError(f"{q.shape[-2]} new queries against {k.shape[-2]} keys with a cache: "
                                 "pass attn_mask, a causal mask aligned to the lower right "
                                 "(query i sees key j <= i + S - L); is_causal=True would align "
                                 "it to the upper left and hide most of the cache")
        causal = past_kv is None and attn_mask is None
        out = self.attend(q, k, v, attn_mask=attn_mask, is_causal=causal, return_weights=return_weights)
        return out, (k, v)


class MLP(nn.Module):
    """The position-wise feed-forward network (chapter 6's FFN) ``gelu(x @ w1 + b1) @ w2 + b2``,
    width ``4 d_model``."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        d = cfg.d_model
        self.w1, self.w2 = _matrix(d, 4 * d), _matrix(4 * d, d)
        self.b1, self.b2 = nn.Parameter(torch.zeros(4 * d)), nn.Parameter(torch.zeros(d))

    def forward(self, x):
        """``x (N, L, d_model)`` -> ``(N, L, d_model)``, each position on its own."""
        return F.gelu(x @ self.w1 + self.b1) @ self.w2 + self.b2  # (N, L, d) -> (N, L, 4d) -> (N, L, d)


class Block(nn.Module):
    """Attention, then the MLP (if any), each added to the residual stream.

    pre-LN: ``x = x + Attn(LN(x)); x = x + MLP(LN(x))``. post-LN: ``x = LN(x + Attn(x));
    x = LN(x + MLP(x))``. none: ``x = x + Attn(x); x = x + MLP(x)``.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.norm = cfg.norm
        self.attn = CausalSelfAttention(cfg)
        self.mlp = MLP(cfg) if cfg.mlp else None
        self.ln1 = nn.LayerNorm(cfg.d_model) if cfg.norm != "none" else nn.Identity()
        self.ln2 = nn.LayerNorm(cfg.d_model) if cfg.norm != "none" and cfg.mlp else nn.Identity()

    def forward(self, x, past_kv=None, *, attn_mask=None, return_weights=False):
        """``x (N, L, d_model)`` -> ``(x, weights or None, (k, v))``."""
        pre, post = (self.ln1, nn.Identity()) if self.norm == "pre" else (nn.Identity(), self.ln1)
        a, kv = self.attn(pre(x), past_kv, attn_mask=attn_mask, return_weights=return_weights)
        a, weights = a if return_weights else (a, None)
        x = post(x + a)                                              # the residual, (N, L, d_model)
        if self.mlp is not None:
            pre, post = (self.ln2, nn.Identity()) if self.norm == "pre" else (nn.Identity(), self.ln2)
            x = post(x + self.mlp(pre(x)))
        return x, weights, kv


def next_token_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of next-token ``logits`` ``(N, L, V)`` against ``targets`` ``(N, L)``
    (token ids); targets of ``-100`` are left out (a padded or masked position)."""
    return F.cross_entropy(logits.flatten(0, -2), targets.flatten(), ignore_index=-100)  # (N*L, V), (N*L,)


class GPT(nn.Module):
    """A decoder-only Transformer: embeddings, ``num_layers`` blocks, unembedding.

    Example::

        >>> model = GPT(GPTConfig(vocab_size=32, num_layers=2, num_heads=4, d_model=64))
        >>> logits = model(torch.randint(32, (8, 24)))           # (8, 24, 32)
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok_emb = nn.Parameter(torch.randn(cfg.vocab_size, cfg.d_model))  # (V, d_model)
        if cfg.pos == "learned":
            self.pos_emb = nn.Parameter(torch.randn(cfg.context_length, cfg.d_model))
        else:  # a fixed table (zeros for "none"), stored with the model, not trained
            table = (sinusoidal_positional_encoding(cfg.context_length, cfg.d_model, like=torch.zeros(0))
                     if cfg.pos == "sinusoidal"
                     else torch.zeros(cfg.context_length, cfg.d_model))
            self.register_buffer("pos_emb", table)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model) if cfg.norm == "pre" else nn.Identity()
        self.unembed = _matrix(cfg.d_model, cfg.vocab_size)                      # (d_model, V)

    def forward(self, idx, *, past_kv=None, attn_mask=None, return_weights=False, return_kv=False):
        """Logits of the next token at every position.

        Args:
            idx: token ids ``(N, L)`` (a long tensor).
            past_kv: one ``(k, v)`` per layer from an earlier call with ``return_kv=True``;
                the new tokens then take positions ``S0 ... S0 + L - 1``. Default: ``None``.
            attn_mask: bool ``(L, S)``, used by every layer (see
                :meth:`CausalSelfAttention.forward`). Default: ``None`` (causal).
            return_weights: also return each layer's weights ``(N, h, L, S)``. Default: ``False``.
            return_kv: also return each layer's keys and values. Default: ``False``.

        Returns:
            ``logits (N, L, V)``, followed, when asked for, by the list of weights and then
            the list of ``(k, v)``: ``logits``, ``(logits, weights)``, ``(logits, kv)`` or
            ``(logits, weights, kv)``.
        """
        check_token_ids("idx", idx, self.cfg.vocab_size)
        N, L = idx.shape
        start = 0 if past_kv is None else past_kv[0][0].shape[-2]
        if start + L > self.cfg.context_length:
            raise ValueError(f"{start + L} positions but context_length = {self.cfg.context_length}")
        x = self.tok_emb[idx] + self.pos_emb[start:start + L]       # (N, L, d_model) + (L, d_model)
        weights, kvs = [], []
        for i, block in enumerate(self.blocks):
            x, w, kv = block(x, None if past_kv is None else past_kv[i], attn_mask=attn_mask,
                             return_weights=return_weights)        # (N, L, d_model)
            weights.append(w)
            kvs.append(kv)
        logits = self.ln_f(x) @ self.unembed                         # (N, L, d_model) @ (d_model, V)
        extra = ([weights] if return_weights else []) + ([kvs] if return_kv else [])
        return (logits, *extra) if extra else logits

    def loss(self, idx, targets):
        """Mean cross-entropy of the next-token logits, ``(N, L)`` ids against ``(N, L)`` targets.
        Targets of ``-100`` are ignored."""
        return next_token_loss(self(idx), targets)                   # (N, L, V) logits

    @contextlib.contextmanager
    def ablated(self, heads):
        """Zero the outputs of ``heads``, an iterable of ``(layer, head)``, inside a ``with``."""
        heads = [(int(layer), int(head)) for layer, head in heads]
        for layer, head in heads:
            if not (0 <= layer < self.cfg.num_layers and 0 <= head < self.cfg.num_heads):
                raise ValueError(f"no head ({layer}, {head}): layers 0..{self.cfg.num_layers - 1}, "
                                 f"heads 0..{self.cfg.num_heads - 1}")
        saved = [set(b.attn.ablated) for b in self.blocks]
        try:
            for layer, head in heads:
                self.blocks[layer].attn.ablated.add(head)
            yield self
        finally:
            for b, s in zip(self.blocks, saved):
                b.attn.ablated = s

    def num_parameters(self) -> int:
        """Number of trained parameters."""
        return sum(p.numel() for p in self.parameters())
