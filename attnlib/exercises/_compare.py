"""Convert a learner's output to NumPy and compare it with the reference (trusted side).

Torch tensors (CPU or CUDA, any float dtype), NumPy arrays, scalars and tuples are
converted; the comparison is done in float64 at **the exercise's** tolerance, whatever the
answer's dtype: ``rtol`` relative to each expected entry, ``atol`` relative to the scale of
the expected output (its largest finite magnitude, 1 when that is 0). A float16, bfloat16
(or, where the exercise asks for more, float32) answer that misses the tolerance gets a
note naming its dtype and why. It returns a sentence saying what differs. NumPy masked
arrays are refused: operations such as ``np.allclose`` skip their masked entries, so they
could pass for the wrong reason.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import numpy as np

from ..i18n import _
from ._wire import BFloat16Values, Opaque

if TYPE_CHECKING:
    from ._model import Case, Exercise

# significant decimal digits each float format keeps (its machine epsilon: float16 9.8e-4,
# bfloat16 7.8e-3, float32 1.2e-7)
_EPS = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}


def _precision(got: np.ndarray) -> str:
    """The dtype that limits the answer's precision: "bfloat16", "float16", "float32" or ""."""
    if isinstance(got, BFloat16Values):
        return "bfloat16"
    if got.dtype in (np.float16,):
        return "float16"
    if got.dtype in (np.float32, np.complex64):
        return "float32"
    return ""


def _is_tensor(obj: Any) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "cpu")


def _to_numpy(obj: Any) -> Any:
    """Torch tensors, NumPy arrays, scalars and (nested) tuples -> NumPy; lists stay
    lists (of converted items) so the checker can say "return an array, not a list"."""
    if isinstance(obj, tuple):
        return tuple(_to_numpy(o) for o in obj)
    if isinstance(obj, list):
        return [_to_numpy(o) for o in obj]
    if _is_tensor(obj):
        try:
            t = obj.detach().cpu()
            if getattr(t, "is_sparse", False):
                t = t.to_dense()
            if str(t.dtype) == "torch.bfloat16":
                return t.float().numpy().view(BFloat16Values)
            return t.resolve_conj().resolve_neg().numpy() if t.is_complex() else t.numpy()
        except Exception:  # noqa: BLE001 - e.g. an exotic tensor type: reported as a wrong type
            return obj
    if isinstance(obj, np.ndarray):  # masked arrays stay masked: _compare refuses them
        return obj
    if isinstance(obj, (bool, int, float, complex, np.generic)):
        return np.asarray(obj)
    if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes, type)):
        try:
            return np.asarray(obj)
        except Exception:  # noqa: BLE001 - a broken __array__ is the learner's object's problem
            return obj
    return obj


def _describe(obj: Any) -> str:
    if isinstance(obj, np.ma.MaskedArray):
        return _("a NumPy masked array of shape {shape}").format(shape=tuple(obj.shape))
    if isinstance(obj, np.ndarray):
        if obj.ndim == 0:
            return _("a single number (dtype {dtype})").format(dtype=obj.dtype)
        return _("an array of shape {shape} and dtype {dtype}").format(shape=tuple(obj.shape), dtype=obj.dtype)
    if isinstance(obj, tuple):
        return _("a tuple ({items})").format(items=", ".join(_describe(o) for o in obj))
    if isinstance(obj, list):
        return _("a Python list of {n} items").format(n=len(obj))
    if obj is None:
        return "None"
    if isinstance(obj, Opaque):
        if obj.why:
            return _("an object of type {name} ({why})").format(name=obj.type_name, why=obj.why)
        name_or_type_obj___name = obj.type_name
    else:
        name_or_type_obj___name = type(obj).__name__
    return _("an object of type {name_or_type_obj___name}").format(name_or_type_obj___name=name_or_type_obj___name)


def _shapes(case: Case) -> str:
    def one(a):
        a_np = _to_numpy(a)
        if isinstance(a_np, np.ndarray) and a_np.ndim:
            return str(tuple(a_np.shape))
        if isinstance(a, str):  # a text: its start, still quoted (a quote left open reads as prose)
            return repr(a if len(a) <= 30 else a[:27] + "...")
        r = repr(a)
        return r if len(r) <= 40 else r[:37] + "..."
    parts = [one(a) for a in case.args]
    parts += [f"{k}={one(v)}" for k, v in case.kwargs.items()]
    return ", ".join(parts)


def _snapshot(obj: Any) -> Any:
    if _is_tensor(obj):
        return obj.detach().clone()
    try:
        return copy.deepcopy(obj)
    except Exception:  # noqa: BLE001
        return obj


def _same_input(a: Any, b: Any) -> bool:
    a_np, b_np = _to_numpy(a), _to_numpy(b)
    if isinstance(a_np, np.ndarray) and isinstance(b_np, np.ndarray):
        return (a_np.shape == b_np.shape and a_np.dtype == b_np.dtype
                and np.array_equal(a_np, b_np, equal_nan=a_np.dtype.kind in "fc"))
    if isinstance(a_np, (tuple, list)) and isinstance(b_np, (tuple, list)):
        return len(a_np) == len(b_np) and all(_same_input(x, y) for x, y in zip(a_np, b_np))
    if isinstance(a_np, dict) and isinstance(b_np, dict):
        return a_np.keys() == b_np.keys() and all(_same_input(a_np[k], b_np[k]) for k in a_np)
    try:
        return bool(a_np == b_np)
    except Exception:  # noqa: BLE001
        return True


# --------------------------------------------------------------------------- comparing

def _kind_of(want: np.ndarray, declared: str) -> str:
    """How to compare with ``want``: the exercise's declared kind, except that a bool
    item of a float exercise is compared as bool."""
    if declared == "float":
        return "bool" if want.dtype == bool else "float"
    return declared


def _kind_of_value(value: Any) -> str:
    """The comparison kind a mistake's own output calls for (used to match mistakes)."""
    if isinstance(value, np.ndarray):
        return {"b": "bool", "i": "int", "u": "int", "f": "float"}.get(value.dtype.kind, "any")
    return "any"


def _scale(want: np.ndarray) -> float:
    """The scale ``atol`` is relative to: the largest finite magnitude of the expected output
    (1 when it is 0 or has none)."""
    finite = np.abs(want[np.isfinite(want)]) if want.size else want
    top = float(finite.max()) if finite.size else 0.0
    return top if top > 0 else 1.0


def _tolerances(want: np.ndarray, ex: Exercise) -> tuple[float, float]:
    """(rtol, atol) of the comparison with ``want``: the exercise's, ``atol`` scaled."""
    return ex.rtol, ex.atol * _scale(want)


def _precision_note(got: Any, ex: Exercise) -> str:
    """Why a low-precision answer misses the tolerance, or '' (float64 answers, or formats
    precise enough for this exercise)."""
    items = got if isinstance(got, tuple) else (got,)
    for g in items:
        if not isinstance(g, np.ndarray):
            continue
        p = _precision(g)
        if p and _EPS[p] > ex.rtol / 4:
            return _(" (your answer is {dtype}, which keeps only about {digits} significant digits, while this "
                     "exercise compares at rtol={rtol}: compute in float64, as the inputs are, or at least "
                     "float32, and convert at the end if you need {dtype})").format(
                         dtype=p, digits=max(int(-np.log10(_EPS[p])), 1), rtol=f"{ex.rtol:g}")
    return ""


def _idx(ix) -> tuple:
    return tuple(int(i) for i in ix)


def _compare(got: Any, want: Any, ex: Exercise, kind: str | None = None) -> tuple[bool, str, str]:
    """Return ``(equal, why_not, problem)`` for converted outputs; ``kind`` overrides
    the comparison kind (used when matching mistakes)."""
    if isinstance(want, tuple):
        if isinstance(got, list) and len(got) == len(want):  # a list of the right items is fine
            got = tuple(got)
        if not isinstance(got, tuple) or len(got) != len(want):
            return False, _("expected a tuple of {n} items, got {got}").format(n=len(want), got=_describe(got)), "type"
        for i, (g, w) in enumerate(zip(got, want)):
            ok, why, problem = _compare(g, w, ex, None if kind is None else _kind_of_value(w))
            if not ok:
                return False, _("element {i} of the tuple (counting from 0): {why}").format(i=i, why=why), problem
        return True, "", ""
    if isinstance(got, np.ma.MaskedArray):
        return False, _("got a NumPy masked array. Masked entries are skipped by comparisons and "
                       "reductions, so it can look right for the wrong reason: return a plain array "
                       "(e.g. np.ma.filled(result, 0.0) with the value the masked entries must have)"), "type"
    if not isinstance(want, np.ndarray):  # e.g. a string: plain equality
        try:
            ok = bool(got == want)
        except Exception:  # noqa: BLE001
            ok = False
        return (True, "", "") if ok else (False, _("expected {want}, got {got}").format(want=f"{want!r:.80}", got=f"{got!r:.80}"), "value")
    if isinstance(got, list):
        return False, _("expected {want}, got a Python list. Return an array: np.asarray(result) "
                       "(or np.stack(rows) for a list of rows)").format(want=_describe(want)), "type"
    if not isinstance(got, np.ndarray):
        return False, _("expected {want}, got {got}").format(want=_describe(want), got=_describe(got)), "type"
    kind = kind or _kind_of(want, ex.output_kind)
    if got.shape != want.shape:
        if got.ndim == 0:
            return False, _("expected {want}, got a single number").format(want=_describe(want)), "shape"
        return False, _("expected shape {want}, got shape {got}").format(want=tuple(want.shape), got=tuple(got.shape)), "shape"
    if kind == "bool":
        if got.dtype != bool:
            return False, _("expected a bool array, got dtype {dtype} (build it with comparisons such as "
                           "j <= i, or convert with .astype(bool))").format(dtype=got.dtype), "dtype"
        wrong = np.argwhere(got != want)
        if len(wrong):
            i = _idx(wrong[0])
            return False, _("{n} of {size} entries differ, first at index {index} (got {got}, expected {want})").format(
                n=len(wrong), size=want.size, index=i, got=bool(got[i]), want=bool(want[i])), "value"
        return True, "", ""
    if kind in ("int", "any"):
        try:
            ok = bool(np.array_equal(got, want, equal_nan=got.dtype.kind in "fc" and want.dtype.kind in "fc"))
        except Exception:  # noqa: BLE001
            ok = False
        if ok:
            return True, "", ""
        if want.ndim == 0:
            return False, _("expected {want}, got {got}").format(want=repr(want.item()), got=repr(got.item())), "value"
        try:
            wrong = np.argwhere(got != want)
            i = _idx(wrong[0])
            return False, _("{n} of {size} entries differ, first at index {index} (got {got}, expected {want})").format(
                n=len(wrong), size=want.size, index=i, got=repr(got[i]), want=repr(want[i])), "value"
        except Exception:  # noqa: BLE001
            return False, _("expected {want}, got {got}").format(want=f"{want.tolist()!r:.80}", got=f"{got.tolist()!r:.80}"), "value"
    if got.dtype.kind not in "biuf":
        return False, _("expected real numbers, got dtype {dtype}").format(dtype=got.dtype), "dtype"
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan_g, nan_w = np.isnan(g), np.isnan(w)
    if nan_g.any() and not nan_w.any():
        first = _idx(np.argwhere(nan_g)[0])
        return False, _("the output contains NaN at {n} of {size} entries, first at index {index} (NaN comes "
                       "from inf - inf, inf / inf or 0 / 0, e.g. when exp overflows or a whole row "
                       "underflows to 0)").format(n=int(nan_g.sum()), size=g.size, index=first), "nan"
    inf_g = np.isinf(g)
    if inf_g.any() and not np.isinf(w).any():
        first = _idx(np.argwhere(inf_g)[0])
        return False, _("the output contains inf at {n} of {size} entries, first at index {index}").format(
            n=int(inf_g.sum()), size=g.size, index=first), "inf"
    rtol, atol = _tolerances(w, ex)
    if not np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True):
        with np.errstate(invalid="ignore"):
            diff = np.abs(g - w)
        diff = np.where(np.isnan(diff) & ~(nan_g & nan_w), np.inf, np.nan_to_num(diff, nan=0.0))
        idx = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.ndim else ()
        return False, (_("largest difference {diff} at index {index} (got {got}, expected {want})").format(
                    diff=f"{float(diff[idx]):.3g}", index=_idx(idx), got=f"{float(g[idx]):.6g}",
                    want=f"{float(w[idx]):.6g}")
                       + _precision_note(got, ex)), "value"
    return True, "", ""
