"""Array-API plumbing shared by attnlib's modules (private; not part of the public API).

Every public function starts the same way: find the one array library its arguments come
from (:func:`namespace`), check dtypes and shapes with messages that name the argument,
the shapes seen and the fix, and only then compute. Keeping these checks here means
``flash.py``, ``sparse.py`` and friends raise the same errors as ``attention.py``.
"""
from __future__ import annotations

import math
from numbers import Integral, Real

import array_api_compat
import numpy as np

__all__ = [
    "namespace", "library", "is_torch", "check_float", "is_low_precision", "compute_dtype",
    "broadcast_batch", "check_mask", "check_scale", "check_size", "check_positive_int", "check_flag",
    "fmt_shape", "in_vmap", "all_finite", "check_finite", "check_token_ids",
]


def is_torch(x) -> bool:
    """True when ``x`` is a ``torch.Tensor`` (without importing torch)."""
    return array_api_compat.is_torch_array(x)


def library(x) -> str:
    """A short human name for the library an array comes from (used in error messages)."""
    if isinstance(x, np.ndarray):
        return "NumPy"
    if isinstance(x, np.generic):
        return "NumPy scalar"
    if is_torch(x):
        return "torch"
    return type(x).__module__.split(".")[0]


def namespace(**arrays):
    """The Array-API namespace shared by the named arrays (``None`` values are skipped).

    Raises:
        TypeError: an argument is not an array, or two arguments come from different
            libraries (e.g. a NumPy mask with torch queries). The message names both.
    """
    values = [x for x in arrays.values() if x is not None]
    t = type(values[0]) if values else None
    if t in _NAMESPACES and all(type(x) is t for x in values):  # common case, ~0.3 us
        return _NAMESPACES[t]
    first_name = first = None
    for name, x in arrays.items():
        if x is None:
            continue
        if isinstance(x, np.generic):  # np.float64(1.0): a number, not an array
            raise TypeError(
                f"{name} is a NumPy scalar ({type(x).__name__}), not an array; pass an array "
                f"with the dims the function needs, e.g. {name} = np.asarray({name}).reshape(1, 1)")
        if not array_api_compat.is_array_api_obj(x):
            raise TypeError(
                f"{name} must be a NumPy array or a torch tensor, got {type(x).__name__}; "
                f"convert it first, e.g. np.asarray({name}, dtype=float)")
        if first is None:
            first_name, first = name, x
        elif library(x) != library(first):
            fix = (f"al.to_device({name}, {first_name}.device)" if is_torch(first)
                   else f"al.to_device({name}, 'numpy')")
            raise TypeError(
                f"{first_name} is a {library(first)} array but {name} is a {library(x)} array; "
                f"pass every input from the same library, e.g. {name} = {fix}")
    if first is None:
        raise TypeError("no array given")
    xp = array_api_compat.array_namespace(*values)
    if all(type(x) is t for x in values) and (t is np.ndarray or is_torch(values[0])):
        _NAMESPACES[t] = xp  # cache per array type: namespace lookup is on every call's path
    return xp


_NAMESPACES: dict = {}


def in_vmap(x) -> bool:
    """True when the torch tensor ``x`` is a slice of a ``torch.func.vmap`` batch (a functorch
    BatchedTensor): no Python number can be read from its values there (``float(x.sum())``
    raises), so checks that need one are left to the caller, outside vmap."""
    import torch

    return torch._C._functorch.is_batchedtensor(x)


def fmt_shape(shape) -> str:
    """``(2, 3)`` for a shape, ``()`` for a scalar: the form used in every message."""
    shape = tuple(shape)
    return "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"


_FLOATS: set = set()


def check_float(xp, name: str, x) -> None:
    """Raise TypeError unless ``x`` has a real floating dtype."""
    if x.dtype in _FLOATS:  # cached: this check runs on every call
        return
    if xp.isdtype(x.dtype, "real floating"):
        _FLOATS.add(x.dtype)
    else:
        fix = f"{name}.float()" if is_torch(x) else f"{name}.astype(np.float64)"
        raise TypeError(f"{name} has dtype {x.dtype}, but attention needs real floating-point "
                        f"inputs; convert it first, e.g. {fix}")


def is_low_precision(x) -> bool:
    """True for 16-bit floats (float16, bfloat16), which attnlib accumulates in float32."""
    return x.dtype.itemsize == 2


def compute_dtype(xp, x):
    """The dtype attnlib computes in for inputs of ``x``'s dtype: float32 for 16-bit floats."""
    return xp.float32 if is_low_precision(x) else x.dtype


def _broadcast(a: tuple, b: tuple):
    """Broadcast two shapes; None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def broadcast_batch(**shapes) -> tuple:
    """Broadcast the batch shapes ``N...`` of several arguments, or raise a ValueError that
    names them, e.g. ``broadcast_batch(q=(2, 3), k=(4,))``."""
    first, *rest = shapes.values()
    if all(s == first for s in rest):  # the common case: equal batch dims
        return tuple(first)
    out = ()
    for name, shape in shapes.items():
        new = _broadcast(out, tuple(shape))
        if new is None:
            seen = ", ".join(f"{n} {fmt_shape(s)}" for n, s in shapes.items())
            raise ValueError(
                f"the batch dims N... of {', '.join(shapes)} do not broadcast: {seen}; give them "
                f"equal batch dims, or size-1 dims where one input is shared (e.g. {name}[None])")
        out = new
    return out


def check_mask(xp, name: str, mask, target: tuple, dims: str, like) -> None:
    """Check that ``mask`` is bool or floating, lives with ``like`` and broadcasts to ``target``.

    Args:
        name: the argument's name in messages, e.g. ``"attn_mask"``.
        target: the shape the mask is applied to, e.g. the scores ``(N..., L, S)``.
        dims: how to name ``target`` in the message, e.g. ``"(N..., L, S)"``.
        like: an input the mask must share a device with.
    """
    if mask.dtype in _MASK_DTYPES:  # cached: this check runs on every masked call
        pass
    elif xp.isdtype(mask.dtype, "bool") or xp.isdtype(mask.dtype, "real floating"):
        _MASK_DTYPES.add(mask.dtype)
    else:
        fix = f"{name}.bool()" if is_torch(mask) else f"{name}.astype(bool)"
        raise TypeError(
            f"{name} has dtype {mask.dtype}; use a bool mask (True = may attend, e.g. {fix}) "
            f"or a float mask whose values are added to the scores (0 or -inf)")
    key = (tuple(mask.shape), tuple(target))
    if key not in _BROADCASTS_TO and _broadcast(*key) != key[1]:
        L, S = target[-2], target[-1]
        raise ValueError(
            f"{name} has shape {fmt_shape(mask.shape)} but the scores are {fmt_shape(target)} "
            f"{dims}: the mask must broadcast to them, so its last two dims must be (L, S) = "
            f"({L}, {S}) or 1, and it may not have extra or larger batch dims")
    if len(_BROADCASTS_TO) < 4096:  # remember the shapes seen (the check runs on every call)
        _BROADCASTS_TO.add(key)
    if is_torch(mask) and mask.device != like.device:
        raise ValueError(f"{name} is on {mask.device} but the inputs are on {like.device}; "
                         f"move it with {name}.to('{like.device}')")


_BROADCASTS_TO: set = set()
_MASK_DTYPES: set = set()


def check_scale(scale, E: int) -> float:
    """The softmax scale: ``1/sqrt(E)`` when ``scale`` is None, else ``scale`` as a float."""
    if scale is None:
        return 1.0 / math.sqrt(E) if E > 0 else 1.0
    if isinstance(scale, bool) or not isinstance(scale, Real) or not math.isfinite(scale):
        raise TypeError(f"scale must be a finite Python number or None (for 1/sqrt(E)), got "
                        f"{scale!r}; pass e.g. scale=float(s)")
    return float(scale)


def check_size(name: str, n) -> int:
    """``n`` as an int, or a ValueError/TypeError naming ``name``."""
    if isinstance(n, bool) or not isinstance(n, Integral):
        raise TypeError(f"{name} must be an int, got {n!r} of type {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{name} must be >= 0, got {n}")
    return int(n)


def check_positive_int(block_size, name: str = "block_size") -> int:
    """``block_size`` as a positive int (positions per tile or chunk). Any integer type is
    accepted (``int``, ``np.int64``: :class:`numbers.Integral`), bool is not. A wrong type is
    a TypeError, a value below 1 a ValueError; both name ``name``. Shared by ``flash.py``,
    ``sparse.py``, ``linear.py`` and ``multihead.py`` (``num_heads``)."""
    if isinstance(block_size, bool) or not isinstance(block_size, Integral):
        raise TypeError(f"{name} must be a positive int, got {block_size!r} of type "
                        f"{type(block_size).__name__}; pass e.g. {name}=int({name})")
    if block_size < 1:
        raise ValueError(f"{name} must be a positive int (>= 1), got {int(block_size)}")
    return int(block_size)


def check_flag(name: str, value) -> bool:
    """``value`` as a bool when it is ``True``/``False`` (or a NumPy bool), else a TypeError
    naming ``name``: one check for every ``is_causal``-like switch of attnlib, so NumPy and
    torch inputs get the same answer (torch's SDPA refuses non-bools in its own words)."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"{name} must be True or False, got {value!r} of type {type(value).__name__}; "
                    f"pass {name}=True or {name}=False")


def all_finite(xp, *arrays) -> bool:
    """True when no entry of ``arrays`` (``None`` entries skipped) is NaN or infinite.

    Cheap first: a sum is finite only if every summand is (NaN and inf propagate, inf - inf
    is NaN), so one reduction per array usually settles it, with no temporary array (on a
    GPU the sums are added on the device: one host sync in all; a contiguous NumPy float32
    or float64 array is reduced as the dot product ``x . x``, which BLAS computes faster than
    NumPy's sum). Only when that total is not finite (a non-finite entry, or an overflow of
    finite values) is the exact ``isfinite(x).all()`` run. This runs on every call, so it is
    written for speed.
    """
    total = 0.0
    device_sum = None
    for x in arrays:
        if x is None:
            continue
        if isinstance(x, np.ndarray):
            if x.dtype.itemsize >= 4 and x.flags.c_contiguous:  # x . x by BLAS, 2x faster than a sum:
                total += float(np.dot(x.reshape(-1), x.reshape(-1)))  # NaN, inf (or |x| > 1e19) show
            else:  # (float16 summed in float32: no overflow warning)
                total += float(np.add.reduce(x, axis=None, dtype=np.float32 if x.dtype.itemsize == 2 else None))
            continue
        t = x.detach().sum() if x.requires_grad else x.sum()
        if x.is_cpu:
            total += t.item()
        else:
            device_sum = t if device_sum is None else device_sum + t
    if device_sum is not None:
        total += device_sum.item()
    if math.isfinite(total):
        return True
    arrays = [x for x in arrays if x is not None]
    xp = xp if xp is not None else array_api_compat.array_namespace(*arrays)
    return all(bool(xp.all(xp.isfinite(x))) for x in arrays)


def check_finite(xp, *, minus_inf_ok=None, who="attention", **arrays) -> None:
    """Raise a ValueError naming the first of ``arrays`` that holds NaN or inf.

    attnlib refuses NaN and inf in its inputs on every path (see
    :func:`attnlib.scaled_dot_product_attention`): they turn whole rows into NaN
    (``inf - inf``, ``0 * inf``), and whether a mask hides them differs between kernels.
    A float mask (an argument whose name ends in ``mask``) may hold ``-inf``, which blocks,
    and so may the arrays named in ``minus_inf_ok``, a dict ``{name: what -inf means}`` (e.g.
    the maxima ``m`` of softmax states: ``{"m1": "an empty state"}``). ``who`` names the
    function family in the message. Default: ``minus_inf_ok=None``, ``who="attention"``.
    """
    minus_inf_ok = minus_inf_ok or {}
    for name, x in arrays.items():
        if x is None or all_finite(xp, x):
            continue
        is_mask = name.endswith("mask")
        if is_mask and xp.isdtype(x.dtype, "bool"):
            continue
        minus_inf = is_mask or name in minus_inf_ok
        bad = xp.isnan(x) | (x == math.inf) if minus_inf else ~xp.isfinite(x)
        count = int(xp.sum(xp.astype(bad, xp.int64)))
        if count == 0:
            continue
        first = tuple(int(i) for i in np.argwhere(np.asarray(_to_numpy(bad)))[0])
        value = float(x[first])
        what = ("finite values and -inf (-inf blocks a key)" if is_mask else
                f"finite values and -inf ({minus_inf_ok[name]})" if minus_inf else "finite numbers")
        fix = ("to block a key use -inf there, or a bool mask" if is_mask else
               "fix the computation that produced it; to leave a position out, mask it instead")
        raise ValueError(
            f"{name} holds {count} non-finite value(s) ({value} at index {first}, shape "
            f"{fmt_shape(x.shape)}); {who} accepts only {what}, since NaN and inf turn "
            f"whole rows of the output into NaN; {fix}")


def check_token_ids(name: str, ids, vocab_size=None, *, min_length: int = 0) -> None:
    """Check token ids for a model: an integer torch tensor ``(N, L)`` with ``L >= min_length``
    and, when ``vocab_size`` is given, every id in ``[0, vocab_size - 1]`` (an id of -1 would
    otherwise wrap to the last row of the embedding table). The errors name ``name``.

    Inside ``torch.func.vmap`` no value can be read back to Python, so the range is not
    checked there (the shapes and dtype are).
    """
    if not is_torch(ids):
        raise TypeError(f"{name} must be a torch tensor of token ids (N, L), got {type(ids).__name__}; "
                        f"convert it with torch.as_tensor({name}, dtype=torch.long)")
    if ids.ndim != 2:
        raise ValueError(f"{name} has shape {fmt_shape(ids.shape)}; it must be (N, L) token ids, e.g. "
                         f"{name}[None, :] for one sequence or {name}[:, None] for one token per sequence")
    if ids.shape[1] < min_length:
        raise ValueError(f"{name} is empty: it has shape {fmt_shape(ids.shape)}, no token in any sequence; "
                         f"pass at least {min_length} token id(s) per sequence (e.g. a start token)")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == _torch().bool:
        raise TypeError(f"{name} has dtype {ids.dtype}; token ids must be integers: pass {name}.long()")
    if vocab_size is None or ids.numel() == 0 or in_vmap(ids):  # (vmap: no value can be read back)
        return
    lo, hi = (int(x) for x in ids.aminmax())
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        where = tuple((ids == bad).nonzero()[0].tolist())
        raise ValueError(f"{name} holds the token id {bad} at index {where} (shape {fmt_shape(ids.shape)}); "
                         f"token ids must lie in [0, vocab_size - 1] = [0, {vocab_size - 1}]: map unknown "
                         f"tokens to a valid id, or build the model with a larger vocab_size")


def _torch():
    import torch

    return torch


def _to_numpy(x):
    """A host NumPy copy of a bool array (for locating the first bad entry in a message)."""
    if isinstance(x, np.ndarray):
        return x
    return x.detach().cpu().numpy()
