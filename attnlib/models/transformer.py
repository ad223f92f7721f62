"""A small Transformer block around :func:`attnlib.multi_head_attention` (chapter 5).

What is here, each a few lines:

* :func:`layer_norm` - normalise each token's features to mean 0, variance 1, then scale
  and shift (``torch.nn.LayerNorm`` semantics: biased variance, ``eps`` inside the root).
* :func:`feed_forward` - the position-wise FFN ``relu(x @ w1 + b1) @ w2 + b2``; it works on
  each token separately (attention is the only place where tokens meet).
* :func:`sinusoidal_positional_encoding` - the sin/cos table of Vaswani et al. (2017).
* :class:`BlockParams`, :func:`init_block_params` and :func:`transformer_block` - one
  encoder-style block, either **post-LN** (``norm="post"``, the original paper and
  the diagram in the course's source articles: ``x = LN(x + Attn(x)); x = LN(x + FFN(x))``) or **pre-LN**
  (``norm="pre"``, used by GPT-2 and most current models:
  ``x = x + Attn(LN(x)); x = x + FFN(LN(x))``).
* :func:`torch_multihead_attention` and :func:`torch_encoder_layer` - the same weights
  loaded into ``torch.nn.MultiheadAttention`` / ``torch.nn.TransformerEncoderLayer``, the
  outside references the chapters compare with (torch computes ``x @ W.T``, so they hold
  the transposed matrices).

Like the rest of attnlib it runs on NumPy arrays and PyTorch tensors (CPU or CUDA)
through ``array_api_compat``: parameters are stored as NumPy float64 arrays and converted
to the caller's array type, dtype and device on use. It has no dropout and no training
code; it exists to make the block's structure concrete and testable. With the same
weights it matches ``torch.nn.TransformerEncoderLayer(..., dropout=0.0)`` whose attention
has zero in-projection and out-projection biases (see ``tests/test_transformer.py``).

Shapes use the symbols of the package docstring: ``n`` tokens, width ``d_model``, FFN
hidden width ``d_ff``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from numbers import Real

import numpy as np
from array_api_compat import array_namespace
from array_api_compat import device as _device

from ..kernels._array import (all_finite, check_finite, check_float, check_positive_int, check_size,
                              fmt_shape, namespace)
from ..kernels.multihead import multi_head_attention

__all__ = ["layer_norm", "feed_forward", "sinusoidal_positional_encoding", "BlockParams",
           "self_attention", "init_block_params", "transformer_block",
           "torch_multihead_attention", "torch_encoder_layer"]


def _numpy64(a) -> np.ndarray:
    """A NumPy float64 copy of ``a`` (a NumPy array, or a torch tensor on any device)."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    return np.asarray(a, dtype=np.float64)


def _like(a, x):
    """``a`` (NumPy or the caller's type) as an array of ``x``'s namespace, dtype and device."""
    xp = array_namespace(x)
    if isinstance(x, np.ndarray):
        return np.asarray(a, dtype=x.dtype)
    return xp.asarray(a, dtype=x.dtype, device=_device(x))


def layer_norm(x, weight=None, bias=None, *, eps: float = 1e-5):
    """Layer normalisation over the last axis (``torch.nn.LayerNorm`` semantics).

    Args:
        x: ``(..., d)``.
        weight: the gain, ``(d,)``. Default: ``None`` (ones).
        bias: the shift, ``(d,)``. Default: ``None`` (zeros).
        eps: added to the variance before the square root. Default: ``1e-5``.

    Returns:
        ``(..., d)``: each row has mean ``bias`` and (before the gain) variance close to 1.

    Example::

        >>> layer_norm(np.array([[1.0, 2.0, 3.0]])).round(4)
        array([[-1.2247,  0.    ,  1.2247]])
    """
    xp = namespace(x=x)
    check_float(xp, "x", x)
    if isinstance(eps, bool) or not isinstance(eps, Real) or not (eps > 0 and math.isfinite(eps)):
        raise ValueError(f"eps must be a small positive number (1e-5 in torch.nn.LayerNorm), got {eps!r}")
    weight, bias = (None if a is None else _like(a, x) for a in (weight, bias))
    for name, a in (("weight", weight), ("bias", bias)):
        if a is not None and tuple(a.shape) != (x.shape[-1],):
            raise ValueError(f"{name} has shape {fmt_shape(a.shape)} but x has shape {fmt_shape(x.shape)}: "
                             f"{name} must be (d,) = ({x.shape[-1]},), one number per feature")
    mean = xp.mean(x, axis=-1, keepdims=True)  # (..., 1)
    var = xp.var(x, axis=-1, keepdims=True)    # (..., 1), biased as in torch
    y = (x - mean) / xp.sqrt(var + eps)        # (..., d)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    if not all_finite(xp, y):  # NaN and inf are refused, naming the input
        check_finite(xp, who="layer_norm", x=x, weight=weight, bias=bias)
        raise ValueError(f"layer_norm: x (shape {fmt_shape(x.shape)}) is finite but its spread overflowed "
                         f"{x.dtype}; scale x down or compute in a wider dtype")
    return y


def feed_forward(x, w1, b1, w2, b2):
    """The position-wise feed-forward network ``relu(x @ w1 + b1) @ w2 + b2``.

    Args:
        x: ``(..., n, d_model)``.
        w1: ``(d_model, d_ff)``; b1: ``(d_ff,)``; w2: ``(d_ff, d_model)``; b2: ``(d_model,)``.

    Returns:
        ``(..., n, d_model)``. Row ``i`` of the output depends on row ``i`` of ``x`` only.

    Example::

        >>> feed_forward(np.ones((3, 2)), np.eye(2), np.zeros(2), np.eye(2), np.zeros(2)).shape
        (3, 2)
    """
    d_model, d_ff = x.shape[-1], w1.shape[-1]
    if tuple(w1.shape) != (d_model, d_ff) or tuple(w2.shape) != (d_ff, d_model):
        raise ValueError(f"x has shape {tuple(x.shape)}, w1 {tuple(w1.shape)} and w2 "
                         f"{tuple(w2.shape)}: w1 must be (d_model, d_ff) and w2 (d_ff, d_model) "
                         f"with d_model = x.shape[-1] = {d_model}")
    xp = namespace(x=x)
    check_float(xp, "x", x)
    w1, b1, w2, b2 = (_like(a, x) for a in (w1, b1, w2, b2))
    if not all_finite(xp, x, w1, b1, w2, b2):  # checked directly: the ReLU turns a NaN into 0
        check_finite(xp, who="feed_forward", x=x, w1=w1, b1=b1, w2=w2, b2=b2)
    hidden = x @ w1 + b1  # (..., n, d_model) @ (d_model, d_ff) -> (..., n, d_ff)
    hidden = xp.where(hidden > 0, hidden, xp.zeros_like(hidden))  # ReLU, (..., n, d_ff)
    return hidden @ w2 + b2  # (..., n, d_ff) @ (d_ff, d_model) -> (..., n, d_model)


def sinusoidal_positional_encoding(n: int, d_model: int, *, base: float = 10000.0, like=None):
    """The sinusoidal positional encodings of Vaswani et al. (2017).

    ``PE[p, 2i] = sin(p / base**(2i / d_model))`` and ``PE[p, 2i+1] = cos(...)``: each pair of
    features is a clock turning at its own speed, so every position gets a distinct code
    and ``PE[p + k]`` is a fixed rotation of ``PE[p]``.

    Args:
        n: number of positions.
        d_model: width of the code; must be even.
        base: the longest wavelength is ``2π * base``. Default: ``10000.0``.
        like: an array whose type, dtype and device the result takes. Default: ``None``
            (a NumPy float64 array).

    Returns:
        ``(n, d_model)``; add it to the token embeddings.

    Example::

        >>> sinusoidal_positional_encoding(4, 6).shape
        (4, 6)
    """
    n, d_model = check_size("n", n), check_size("d_model", d_model)
    if d_model % 2:
        raise ValueError(f"d_model must be even to pair sin and cos features, got d_model = "
                         f"{d_model}; use an even width such as {d_model + 1}")
    if isinstance(base, bool) or not isinstance(base, Real) or not (base > 0 and math.isfinite(base)):
        raise ValueError(f"base must be a positive number, and finite (10000.0 in the paper), got {base!r}")
    pos = np.arange(n, dtype=np.float64)[:, None]                           # (n, 1)
    freq = base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # (d_model / 2,)
    angle = pos * freq                                 # (n, 1) * (d_model / 2,) -> (n, d_model / 2)
    pe = np.empty((n, d_model))
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle)
    return pe if like is None else _like(pe, like)


@dataclass
class BlockParams:
    """The weights of one block (NumPy arrays; matrices used as ``x @ w``).

    Attributes:
        num_heads: number of attention heads.
        w_q, w_k, w_v, w_o: ``(d_model, d_model)`` attention projections (no biases).
        ln1_weight, ln1_bias, ln2_weight, ln2_bias: ``(d_model,)`` LayerNorm gains and shifts.
        w1: ``(d_model, d_ff)``, b1: ``(d_ff,)``, w2: ``(d_ff, d_model)``, b2: ``(d_model,)``:
            the FFN.
    """

    num_heads: int
    w_q: np.ndarray
    w_k: np.ndarray
    w_v: np.ndarray
    w_o: np.ndarray
    ln1_weight: np.ndarray
    ln1_bias: np.ndarray
    w1: np.ndarray
    b1: np.ndarray
    w2: np.ndarray
    b2: np.ndarray
    ln2_weight: np.ndarray
    ln2_bias: np.ndarray

    @property
    def d_model(self) -> int:
        """The model width (rows of ``w_q``)."""
        return self.w_q.shape[0]

    def num_parameters(self) -> dict:
        """Parameter counts per part: ``{"attention", "layer_norms", "ffn", "total"}``."""
        size = {f.name: int(np.size(getattr(self, f.name)))
                for f in fields(self) if f.name != "num_heads"}
        out = {"attention": sum(size[k] for k in ("w_q", "w_k", "w_v", "w_o")),
               "layer_norms": sum(size[k] for k in ("ln1_weight", "ln1_bias",
                                                    "ln2_weight", "ln2_bias")),
               "ffn": sum(size[k] for k in ("w1", "b1", "w2", "b2"))}
        out["total"] = sum(out.values())
        return out


def init_block_params(d_model: int, num_heads: int, d_ff: int | None = None, *,
                      seed: int = 0) -> BlockParams:
    """Random weights for :func:`transformer_block` (a fixed seed, so results are reproducible).

    Matrices are drawn from N(0, 1/fan_in), biases and LayerNorm shifts from N(0, 0.1²),
    LayerNorm gains from 1 + N(0, 0.1²).

    Args:
        d_model: model width; must be divisible by ``num_heads``.
        num_heads: number of heads.
        d_ff: hidden width of the FFN. Default: ``None`` (``4 * d_model``, as in the paper).
        seed: seed of the NumPy generator. Default: ``0``.

    Returns:
        a :class:`BlockParams` of NumPy float64 arrays.

    Example::

        >>> init_block_params(16, 4).w1.shape
        (16, 64)
    """
    d_model, num_heads = check_positive_int(d_model, "d_model"), check_positive_int(num_heads, "num_heads")
    if d_model % num_heads:
        raise ValueError(f"d_model = {d_model} is not divisible by num_heads = {num_heads}; "
                         "choose num_heads among the divisors of d_model")
    d_ff = 4 * d_model if d_ff is None else check_positive_int(d_ff, "d_ff")
    rng = np.random.default_rng(seed)

    def mat(fan_in, fan_out):
        return rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)

    def small(*shape):
        return 0.1 * rng.standard_normal(shape)

    return BlockParams(num_heads=num_heads,
                       w_q=mat(d_model, d_model), w_k=mat(d_model, d_model),
                       w_v=mat(d_model, d_model), w_o=mat(d_model, d_model),
                       ln1_weight=1 + small(d_model), ln1_bias=small(d_model),
                       w1=mat(d_model, d_ff), b1=small(d_ff),
                       w2=mat(d_ff, d_model), b2=small(d_model),
                       ln2_weight=1 + small(d_model), ln2_bias=small(d_model))


def self_attention(x, p: BlockParams, *, attn_mask=None, is_causal=False):
    """Multi-head self-attention of ``x`` with the block's weights (no residual, no LayerNorm).

    Args:
        x: ``(..., n, d_model)``, NumPy or torch (CPU or CUDA).
        p: the block's weights; uses ``w_q, w_k, w_v, w_o`` and ``num_heads``.
        attn_mask: bool mask (True = may attend) or float mask (added to the scores),
            broadcastable to ``(..., n, n)``. Default: ``None``.
        is_causal: apply a causal mask. Default: ``False``.

    Returns:
        ``(..., n, d_model)``, in ``x``'s array type, dtype and device.

    Example::

        >>> self_attention(np.zeros((5, 16)), init_block_params(16, 4)).shape
        (5, 16)
    """
    w = [_like(a, x) for a in (p.w_q, p.w_k, p.w_v, p.w_o)]  # each (d_model, d_model)
    return multi_head_attention(x, x, x, p.num_heads, *w, attn_mask=attn_mask, is_causal=is_causal)


_NORMS = ("post", "pre")


def _check_norm(norm) -> bool:
    """``norm`` checked; True for pre-LN."""
    if norm not in _NORMS:
        raise ValueError(f"norm={norm!r}; use norm='post' (LN after each residual addition, the "
                         f"original Transformer) or norm='pre' (LN inside each branch, GPT-2)")
    return norm == "pre"


def transformer_block(x, params: BlockParams, *, norm: str = "post", attn_mask=None,
                      is_causal: bool = False):
    """One Transformer block: self-attention and FFN, each with a residual and a LayerNorm.

    Args:
        x: ``(..., n, d_model)``, NumPy or torch (CPU or CUDA).
        params: the weights, e.g. from :func:`init_block_params`.
        norm: ``"post"`` for post-LN, ``x = LN(x + Attn(x)); x = LN(x + FFN(x))`` (the
            original paper and the diagram of the course's source articles); ``"pre"`` for
            pre-LN, ``x = x + Attn(LN(x)); x = x + FFN(LN(x))`` (the same word as
            :class:`attnlib.models.gpt.GPTConfig`'s ``norm``). Default: ``"post"``.
        attn_mask, is_causal: the attention's mask and causal flag, passed to
            :func:`self_attention`. Default: ``None`` and ``False``.

    Returns:
        the block's output, the same shape, array type, dtype and device as ``x``.

    Example::

        >>> transformer_block(np.zeros((5, 16)), init_block_params(16, 4)).shape
        (5, 16)
    """
    pre = _check_norm(norm)
    if x.shape[-1] != params.d_model:
        raise ValueError(f"x has shape {tuple(x.shape)} but the block has d_model = "
                         f"{params.d_model}: the last axis of x must be d_model (or build the "
                         f"params with init_block_params({x.shape[-1]}, num_heads))")
    p = params

    def attn(a):
        return self_attention(a, p, attn_mask=attn_mask, is_causal=is_causal)

    def ffn(a):
        return feed_forward(a, p.w1, p.b1, p.w2, p.b2)

    if pre:  # pre-LN: the residual stream x is never normalised
        x = x + attn(layer_norm(x, p.ln1_weight, p.ln1_bias))
        x = x + ffn(layer_norm(x, p.ln2_weight, p.ln2_bias))
    else:           # post-LN: normalise after each residual addition
        x = layer_norm(x + attn(x), p.ln1_weight, p.ln1_bias)
        x = layer_norm(x + ffn(x), p.ln2_weight, p.ln2_bias)
    return x


def torch_multihead_attention(w_q, w_k, w_v, w_o, num_heads: int, *, device="cpu"):
    """A ``torch.nn.MultiheadAttention`` that computes what
    ``al.multi_head_attention(x, x, x, num_heads, w_q, w_k, w_v, w_o)`` computes.

    torch's layer computes ``x @ W.T`` and stacks the three input projections in
    ``in_proj_weight``, so it is given ``cat([w_q.T, w_k.T, w_v.T])`` and ``w_o.T``. It has
    no biases, float64 weights and ``batch_first=True``. Remember that its bool masks mean
    True = *blocked*: pass ``~mask`` where attnlib takes ``mask``.

    Args:
        w_q, w_k, w_v, w_o: ``(d_model, d_model)`` NumPy arrays or tensors, used as ``x @ w``.
        num_heads: number of heads; must divide ``d_model``.
        device: where the layer lives. Default: ``"cpu"``.

    Returns:
        the layer, in eval mode; call it on float64 ``(N, n, d_model)`` tensors.

    Example::

        >>> mha = torch_multihead_attention(*[np.eye(8)] * 4, num_heads=2)
        >>> mha.in_proj_weight.shape
        torch.Size([24, 8])
    """
    import torch

    ws = [torch.as_tensor(_numpy64(w)) for w in (w_q, w_k, w_v, w_o)]  # each (d_model, d_model)
    d_model = ws[0].shape[0]
    if any(tuple(w.shape) != (d_model, d_model) for w in ws):
        raise ValueError(f"w_q, w_k, w_v, w_o have shapes {[tuple(w.shape) for w in ws]}; "
                         f"all four must be (d_model, d_model) = ({d_model}, {d_model})")
    mha = torch.nn.MultiheadAttention(d_model, num_heads, bias=False, batch_first=True,
                                      dtype=torch.float64, device=device)
    with torch.no_grad():  # torch computes x @ W.T, so it holds W.T
        mha.in_proj_weight.copy_(torch.cat([w.T for w in ws[:3]]))  # (3 d_model, d_model)
        mha.out_proj.weight.copy_(ws[3].T)                          # (d_model, d_model)
    return mha.eval()


def torch_encoder_layer(params: BlockParams, *, norm: str = "post", device="cpu"):
    """A ``torch.nn.TransformerEncoderLayer`` holding the weights of ``params``.

    Equal to :func:`transformer_block` with the same ``norm`` (torch calls it
    ``norm_first``: ``norm="pre"`` is ``norm_first=True``): ReLU FFN of width
    ``d_ff``, no dropout, the attention's in- and out-projection biases set to zero
    (:func:`transformer_block` has none), matrices transposed (torch computes ``x @ W.T``).

    Args:
        params: the block's weights, e.g. from :func:`init_block_params`.
        norm: ``"post"`` for post-LN, ``"pre"`` for pre-LN. Default: ``"post"``.
        device: where the layer lives. Default: ``"cpu"``.

    Returns:
        the layer (float64, ``batch_first=True``, eval mode).

    Example::

        >>> layer = torch_encoder_layer(init_block_params(16, 4), norm="pre")
    """
    import torch

    pre = _check_norm(norm)
    p = params
    d_ff = p.w1.shape[1]
    layer = torch.nn.TransformerEncoderLayer(p.d_model, p.num_heads, dim_feedforward=d_ff,
                                             dropout=0.0, batch_first=True,
                                             norm_first=pre, dtype=torch.float64,
                                             device=device)

    def t(a):
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.float64)

    attn = layer.self_attn
    copies = [(attn.in_proj_weight, np.concatenate([p.w_q.T, p.w_k.T, p.w_v.T])),
              (attn.in_proj_bias, np.zeros(3 * p.d_model)),
              (attn.out_proj.weight, p.w_o.T), (attn.out_proj.bias, np.zeros(p.d_model)),
              (layer.linear1.weight, p.w1.T), (layer.linear1.bias, p.b1),   # (d_ff, d_model)
              (layer.linear2.weight, p.w2.T), (layer.linear2.bias, p.b2),   # (d_model, d_ff)
              (layer.norm1.weight, p.ln1_weight), (layer.norm1.bias, p.ln1_bias),
              (layer.norm2.weight, p.ln2_weight), (layer.norm2.bias, p.ln2_bias)]
    with torch.no_grad():
        for param, value in copies:
            param.copy_(t(value))
    return layer.eval()
