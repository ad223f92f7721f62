"""Plain data across the trust boundary of the checker: what goes to the code that runs a
learner's function, and what comes back.

The checker has two sides (see :mod:`attnlib.exercises._judge` and
:mod:`attnlib.exercises._worker`):

- the **trusted** side (the notebook's kernel, or a grader's own process) makes the
  cases, computes the reference, compares and names the mistake;
- the **untrusted** side (a process the checker forks or spawns, or a grader's sandboxed
  kernel that ran a student's notebook) only calls the function on the inputs it
  receives and reports what happened.

Everything that crosses is JSON text built from the nodes below; nothing is pickled from
the untrusted side to the trusted one, and no code of the learner's runs when the trusted
side reads a reply: :func:`read_reply` checks every field it reads (types, sizes, dtypes,
shapes against byte counts, nesting depth) and raises :class:`WireError` on anything else.

Values (``encode_value`` on either side, ``decode_value`` on the receiving side)::

    {"t": "none"}                  {"t": "bool", "v": true}
    {"t": "int", "v": "-12"}       (decimal text: any size)
    {"t": "float", "v": "0x1.8p+1"} (float.hex: exact, also nan and inf)
    {"t": "complex", "re": "0x0p+0", "im": "0x1p+0"}
    {"t": "str", "v": "text"}
    {"t": "scalar", "dtype": "float32", "data": BASE64}          a NumPy scalar
    {"t": "array", "dtype": "float64", "shape": [2, 3], "data": BASE64}
        C-order little-endian bytes of a dtype in DTYPES; "precision": "bfloat16" marks a
        torch bfloat16 answer sent as float32 values
    {"t": "tuple", "items": [...]}   {"t": "list", "items": [...]}
    {"t": "dict", "items": [["key", value], ...]}                 (string keys)
    {"t": "masked", "shape": [...]}  a NumPy masked array (refused by the comparison)
    {"t": "opaque", "type": "generator", "why": "..."}            anything else: its type only

A request (trusted -> untrusted, :func:`request`)::

    {"attnlib": "request", "version": 1, "id": "r1-…",
     "calls": [{"kind": "case", "args": [VALUE...], "kwargs": [["mask", VALUE]]},
               {"kind": "timed", "args": [...], "kwargs": [...]},    # only the time counts
               {"kind": "extra", "exercise": "tiled_attention"}],   # Exercise.extra_check(fn)
     "watch": [RULE...], "print_limit": 2000}

``RULE`` is one borrowed-answer rule (see :mod:`attnlib.exercises._watch`):
``{"name": "attnlib.softmax"}``, ``{"module": "attnlib.kernels.masks", "qualname": "causal_mask",
"when": {"align": "lower_right"}}`` or ``{"aten": "aten::_softmax"}``.

A reply (untrusted -> trusted, :func:`reply` / :func:`read_reply`)::

    {"attnlib": "reply", "version": 1, "id": "r1-…", "pid": 1234, "outcomes": [OUTCOME...]}

with one ``OUTCOME`` per call, in order::

    {"status": "value" | "raised" | "signature",
     "value": VALUE,                      # status "value" (for "timed": none)
     "raised": {"type": "ValueError", "text": "...", "kinds": ["recursion", ...]},
     "signature": "text of the TypeError",   # the function cannot take these arguments
     "function": "softmax",              # the function's __name__, for messages
     "printed": "...", "printed_bytes": 123,
     "mutated": false,
     "borrowed": [{"rule": 0, "name": "torch.softmax"}],  # library answers it called
     "tampered": null | "sys.setprofile",                  # it switched the watch off
     "seconds": 0.01, "cpu": 0.01,
     "extra": null | "text"}              # kind "extra": what extra_check returned

The reply's ``pid`` and ``id`` let a reader ignore stray output: only the process it
started may answer, and only to the request it sent. The untrusted side cannot be made
honest by validation (it could claim anything about itself); what validation guarantees is
that reading a reply never runs its code and never breaks the trusted side. The values it
claims are judged against the reference on cases it has not seen before.
"""
from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import secrets
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["WireError", "Raised", "Opaque", "Evidence", "Outcome", "DTYPES", "encode_value", "decode_value",
           "request", "read_request", "reply", "read_reply", "new_id", "write_frame", "read_frame"]

VERSION = 1
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
MAX_DEPTH = 24               # nesting of tuples / lists / dicts
MAX_NODES = 200_000          # nodes in one message
MAX_BYTES = 256 * 2**20      # array bytes in one message
MAX_TEXT = 1_000_000         # characters of one string
MAX_NDIM = 32
MAX_FRAME = 512 * 2**20      # bytes of one frame
_KINDS = ("recursion", "not_implemented", "memory", "attribute", "type", "keyboard")
_STATUSES = ("value", "raised", "signature")


class WireError(ValueError):
    """A message that is not what the protocol allows (the reason is in the text)."""


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Raised:
    """An exception raised by the learner's code, as plain data: its type's name, the
    first part of its text and what kind of error it is (``kinds``: "recursion",
    "not_implemented", "memory", "attribute", "type", "keyboard")."""

    type_name: str
    text: str = ""
    kinds: frozenset = frozenset()

    @classmethod
    def of(cls, exc: BaseException) -> "Raised":
        """Record ``exc`` (untrusted side). Its ``__str__`` is called once; one that
        raises is noted, not propagated."""
        try:
            text = str(exc)
        except BaseException as inner:  # noqa: BLE001 - the learner's __str__ may raise anything
            text = f"<its message could not be shown: __str__ raised {type(inner).__name__}>"
        if not isinstance(text, str):
            text = "<its message is not text>"
        kinds = {k for k, t in (("recursion", RecursionError), ("not_implemented", NotImplementedError),
                                ("memory", MemoryError), ("attribute", AttributeError), ("type", TypeError),
                                ("keyboard", KeyboardInterrupt)) if isinstance(exc, t)}
        name = type(exc).__name__
        return cls(name if isinstance(name, str) else "Exception", text[:4000], frozenset(kinds))


@dataclass(frozen=True)
class Opaque:
    """A returned value that is not plain data (a generator, an object, a too large
    array): only its type's name, and why it could not be sent."""

    type_name: str
    why: str = ""

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


@dataclass(frozen=True)
class Evidence:
    """A borrowed answer seen while the function ran: the index of the rule it matched
    (in the request's ``watch`` list) and the name it was called by."""

    rule: int
    name: str


@dataclass
class Outcome:
    """What one call did. ``status``:

    - ``"value"``: it returned ``value`` (decoded plain data);
    - ``"raised"``: it raised (``raised``);
    - ``"signature"``: it cannot be called with these arguments (``text``);
    - set by the trusted side's transport, never read from a reply: ``"timeout"`` (past
      the wall-clock limit), ``"cpu"`` (past the CPU-time limit), ``"crashed"`` (the
      process died; ``how`` is ``("signal", n)`` or ``("exit", n)``), ``"garbled"`` (the
      reply broke the protocol; ``text`` says how) and ``"unsendable"`` (the function could
      not be sent to a spawned process; ``text`` says why).

    ``printed`` is the start of what it wrote to stdout / stderr (``printed_bytes`` in all),
    ``mutated`` whether it changed its inputs, ``borrowed`` the library answers it called,
    ``tampered`` what it did to switch the watch off, ``extra`` what ``extra_check``
    returned, ``seconds`` / ``cpu`` its wall-clock and CPU time (``cpu`` measured by the
    trusted side where it can).
    """

    status: str
    value: Any = None
    raised: Raised | None = None
    text: str = ""
    function: str = ""
    printed: str = ""
    printed_bytes: int = 0
    mutated: bool = False
    borrowed: tuple = ()
    tampered: str | None = None
    extra: str | None = None
    seconds: float = 0.0
    cpu: float | None = None
    how: tuple | None = None

    @classmethod
    def failure(cls, status: str, *, text: str = "", how: tuple | None = None, seconds: float = 0.0,
                cpu: float | None = None) -> "Outcome":
        """An outcome made by the transport: timeout, cpu, crashed, garbled, unsendable."""
        if status not in ("timeout", "cpu", "crashed", "garbled", "unsendable"):
            raise ValueError(f"status={status!r} is not a transport failure")
        return cls(status, text=text, how=how, seconds=seconds, cpu=cpu)

    @property
    def ended(self) -> bool:
        """Whether the call did not complete (the process was stopped or broke)."""
        return self.status in ("timeout", "cpu", "crashed", "garbled", "unsendable")


# --------------------------------------------------------------------------- values

def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _is_tensor(obj: Any) -> bool:
    t = type(obj)
    return (getattr(t, "__module__", "") or "").startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "cpu")


class _Budget:
    def __init__(self, nodes: int = MAX_NODES, nbytes: int = MAX_BYTES):
        self.nodes, self.bytes = nodes, nbytes

    def node(self) -> None:
        self.nodes -= 1
        if self.nodes < 0:
            raise WireError(f"more than {MAX_NODES} values in one message")

    def take(self, n: int) -> None:
        self.bytes -= n
        if self.bytes < 0:
            raise WireError(f"more than {MAX_BYTES // 2**20} MiB of arrays in one message")


def _array_node(arr: np.ndarray, budget: _Budget, precision: str | None = None) -> dict:
    base = np.ndarray.view(arr, np.ndarray) if type(arr) is not np.ndarray else arr
    name = base.dtype.name
    if name not in DTYPES:
        return {"t": "opaque", "type": "ndarray", "why": f"an array of dtype {name}"}
    if base.ndim > MAX_NDIM:
        return {"t": "opaque", "type": "ndarray", "why": f"an array with {base.ndim} axes"}
    if base.nbytes > budget.bytes:
        return {"t": "opaque", "type": "ndarray",
                "why": f"an array of {base.nbytes} bytes, more than the checker reads back"}
    data = np.ascontiguousarray(base, dtype=base.dtype.newbyteorder("<")).tobytes()
    budget.take(len(data))
    node = {"t": "array", "dtype": name, "shape": [int(n) for n in base.shape], "data": _b64(data)}
    if precision:
        node["precision"] = precision
    return node


def _tensor_node(obj: Any, budget: _Budget) -> dict:
    t = obj.detach().cpu()
    if getattr(t, "is_sparse", False):
        t = t.to_dense()
    if str(t.dtype) == "torch.bfloat16":
        return _array_node(np.asarray(t.float().numpy()), budget, precision="bfloat16")
    if t.is_complex():
        t = t.resolve_conj()
    t = t.resolve_neg()
    return _array_node(np.asarray(t.numpy()), budget)


def encode_value(obj: Any, *, budget: _Budget | None = None, depth: int = 0) -> dict:
    """``obj`` as a plain-data node (see the module docstring).

    Torch tensors (any device; bfloat16 as float32 values marked ``precision``), NumPy
    arrays of a dtype in :data:`DTYPES` (an ndarray subclass is sent as a plain array of its
    data), NumPy scalars, Python scalars, strings, tuples, lists and string-keyed dicts
    become data; a masked array a ``masked`` node; anything else, or a value this function
    cannot read, an ``opaque`` node with its type's name and the reason."""
    budget = budget or _Budget()
    budget.node()
    if depth > MAX_DEPTH:
        return {"t": "opaque", "type": type(obj).__name__, "why": f"nested deeper than {MAX_DEPTH} levels"}
    try:
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, bool):
            return {"t": "bool", "v": bool(obj)}
        if isinstance(obj, int) and type(obj) is int:
            return {"t": "int", "v": str(int(obj))}
        if type(obj) is float:
            return {"t": "float", "v": float.hex(obj)}
        if type(obj) is complex:
            return {"t": "complex", "re": float.hex(obj.real), "im": float.hex(obj.imag)}
        if type(obj) is str:
            if len(obj) > MAX_TEXT:
                return {"t": "opaque", "type": "str", "why": f"a string of {len(obj)} characters"}
            return {"t": "str", "v": obj}
        if isinstance(obj, np.ma.MaskedArray):
            return {"t": "masked", "shape": [int(n) for n in np.shape(obj)][:MAX_NDIM]}
        if isinstance(obj, np.ndarray):
            return _array_node(obj, budget)
        if isinstance(obj, np.generic):
            arr = np.asarray(obj)
            if arr.dtype.name not in DTYPES:
                return {"t": "opaque", "type": type(obj).__name__, "why": f"a scalar of dtype {arr.dtype.name}"}
            data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
            return {"t": "scalar", "dtype": arr.dtype.name, "data": _b64(data)}
        if _is_tensor(obj):
            return _tensor_node(obj, budget)
        if type(obj) in (tuple, list):
            return {"t": type(obj).__name__,
                    "items": [encode_value(o, budget=budget, depth=depth + 1) for o in obj]}
        if type(obj) is dict:
            if not all(type(k) is str for k in obj):
                return {"t": "opaque", "type": "dict", "why": "a dict with keys that are not strings"}
            return {"t": "dict", "items": [[k, encode_value(v, budget=budget, depth=depth + 1)]
                                           for k, v in obj.items()]}
        if isinstance(obj, (tuple, list)):  # a namedtuple or a list subclass: its items
            return {"t": "tuple" if isinstance(obj, tuple) else "list",
                    "items": [encode_value(o, budget=budget, depth=depth + 1) for o in obj]}
        if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes, type)):
            arr = np.asarray(obj)
            if type(arr) is np.ndarray:
                return _array_node(arr, budget)
    except WireError as exc:
        return {"t": "opaque", "type": _type_name(obj), "why": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - a broken __array__, tensor or __eq__ of the learner's
        return {"t": "opaque", "type": _type_name(obj),
                "why": f"reading it raised {_type_name(exc)}"}
    return {"t": "opaque", "type": _type_name(obj), "why": ""}


def _type_name(obj: Any) -> str:
    try:
        name = type(obj).__name__
    except BaseException:  # noqa: BLE001
        return "object"
    return name[:100] if isinstance(name, str) else "object"


class BFloat16Values(np.ndarray):
    """The values of a torch bfloat16 answer, held as float32 (NumPy has no bfloat16);
    the class records the dtype so that the verdict can name it."""


def _text(node: dict, key: str, limit: int = MAX_TEXT) -> str:
    v = node.get(key)
    if not isinstance(v, str) or len(v) > limit:
        raise WireError(f"field {key!r} must be text of at most {limit} characters")
    return v


def _float(text: Any) -> float:
    if not isinstance(text, str) or len(text) > 64:
        raise WireError("a float must be float.hex text")
    try:
        return float.fromhex(text)
    except (ValueError, OverflowError):
        low = text.strip().lower()
        if low in ("nan", "-nan", "inf", "-inf", "+inf"):
            return float(low)
        raise WireError(f"not a float: {text[:40]!r}") from None


def _bytes(node: dict, budget: _Budget) -> bytes:
    data = node.get("data")
    if not isinstance(data, str) or len(data) > (MAX_BYTES * 4) // 3 + 8:
        raise WireError("array data must be base64 text")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise WireError("array data is not valid base64") from None
    budget.take(len(raw))
    return raw


def _dtype(node: dict) -> np.dtype:
    name = node.get("dtype")
    if name not in DTYPES:
        raise WireError(f"dtype {str(name)[:40]!r} is not one of {', '.join(DTYPES)}")
    return np.dtype(name).newbyteorder("<")


def decode_value(node: Any, *, budget: _Budget | None = None, depth: int = 0) -> Any:
    """The value of a node, checked: NumPy arrays (writable copies, native byte order) of a
    dtype in :data:`DTYPES`, NumPy and Python scalars, strings, tuples, lists, dicts,
    :class:`Opaque` records; ``np.ma.masked_array`` for a ``masked`` node. Raises
    :class:`WireError` on anything the protocol does not allow."""
    budget = budget or _Budget()
    budget.node()
    if depth > MAX_DEPTH + 1:
        raise WireError(f"values nested deeper than {MAX_DEPTH} levels")
    if not isinstance(node, dict):
        raise WireError("a value must be an object with a 't' field")
    t = node.get("t")
    if t == "none":
        return None
    if t == "bool":
        if not isinstance(node.get("v"), bool):
            raise WireError("bool value must be true or false")
        return node["v"]
    if t == "int":
        text = _text(node, "v", 5000)
        if not re.fullmatch(r"-?[0-9]+", text):
            raise WireError("int value must be decimal text")
        return int(text)
    if t == "float":
        return _float(node.get("v"))
    if t == "complex":
        return complex(_float(node.get("re")), _float(node.get("im")))
    if t == "str":
        return _text(node, "v")
    if t == "scalar":
        dtype = _dtype(node)
        raw = _bytes(node, budget)
        if len(raw) != dtype.itemsize:
            raise WireError("scalar data has the wrong size")
        return np.frombuffer(raw, dtype=dtype)[0].astype(dtype.newbyteorder("="))
    if t in ("array", "masked"):
        shape = node.get("shape")
        if (not isinstance(shape, list) or len(shape) > MAX_NDIM
                or not all(type(n) is int and 0 <= n <= 2**48 for n in shape)):
            raise WireError("shape must be a list of at most 32 non-negative ints")
        if t == "masked":
            return np.ma.masked_array(np.broadcast_to(np.float64(0.0), tuple(shape)), mask=False)
        dtype = _dtype(node)
        raw = _bytes(node, budget)
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise WireError(f"an array of shape {tuple(shape)} and dtype {dtype.name} needs "
                            f"{math.prod(shape) * dtype.itemsize} bytes, got {len(raw)}")
        arr = np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="), copy=True)
        precision = node.get("precision")
        if precision is not None:
            if precision != "bfloat16" or dtype != np.float32:
                raise WireError("precision may only mark float32 values as bfloat16")
            arr = arr.view(BFloat16Values)
        return arr
    if t in ("tuple", "list"):
        items = node.get("items")
        if not isinstance(items, list):
            raise WireError(f"{t} items must be a list")
        out = [decode_value(o, budget=budget, depth=depth + 1) for o in items]
        return tuple(out) if t == "tuple" else out
    if t == "dict":
        items = node.get("items")
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                                  for p in items):
            raise WireError("dict items must be [key, value] pairs with text keys")
        return {k: decode_value(v, budget=budget, depth=depth + 1) for k, v in items}
    if t == "opaque":
        return Opaque(_text(node, "type", 200), _text(node, "why", 500) if "why" in node else "")
    raise WireError(f"unknown value type {str(t)[:40]!r}")


# --------------------------------------------------------------------------- messages

def new_id() -> str:
    """A fresh request id (random: a reply to an earlier request cannot match)."""
    return "r" + secrets.token_hex(8)


def _loads(text: Any, what: str) -> dict:
    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise WireError(f"the {what} is not UTF-8 text") from None
    if not isinstance(text, str):
        raise WireError(f"the {what} must be text, got {_type_name(text)}")
    if len(text) > MAX_FRAME:
        raise WireError(f"the {what} is longer than {MAX_FRAME} characters")

    def no_constants(c):
        raise WireError(f"{c} is not allowed in a {what}")

    try:
        msg = json.loads(text, parse_constant=no_constants)
    except RecursionError:
        raise WireError(f"the {what} is nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise WireError(f"the {what} is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(msg, dict) or msg.get("attnlib") != what or msg.get("version") != VERSION:
        raise WireError(f"not an attnlib {what} of version {VERSION}")
    return msg


def request(request_id: str, calls: list[dict], watch: list[dict] = (), *, print_limit: int = 2000) -> str:
    """The text of a request (trusted side). ``calls`` are dicts with ``kind`` ("case",
    "timed" or "extra"), ``args`` (a list of values) and ``kwargs`` (a dict), or
    ``exercise`` (the name whose ``extra_check`` to run) for kind "extra"."""
    budget = _Budget()
    out = []
    for c in calls:
        kind = c["kind"]
        if kind == "extra":
            out.append({"kind": kind, "exercise": str(c["exercise"])})
            continue
        out.append({"kind": kind, "args": [encode_value(a, budget=budget) for a in c.get("args", ())],
                    "kwargs": [[str(k), encode_value(v, budget=budget)] for k, v in dict(c.get("kwargs", {})).items()]})
    return json.dumps({"attnlib": "request", "version": VERSION, "id": str(request_id), "calls": out,
                       "watch": list(watch), "print_limit": int(print_limit)}, separators=(",", ":"))


@dataclass
class Request:
    """A request as the untrusted side reads it: ``calls`` hold decoded ``args`` /
    ``kwargs`` (fresh arrays each time :meth:`inputs` is called)."""

    id: str
    calls: list
    watch: list
    print_limit: int = 2000

    @staticmethod
    def inputs(call: dict) -> tuple[tuple, dict]:
        args = tuple(decode_value(a) for a in call.get("args", ()))
        kwargs = {k: decode_value(v) for k, v in call.get("kwargs", ())}
        return args, kwargs


def read_request(text: str) -> Request:
    """Read a request (untrusted side), checking its form."""
    msg = _loads(text, "request")
    calls = msg.get("calls")
    if not isinstance(calls, list):
        raise WireError("calls must be a list")
    for c in calls:
        if not isinstance(c, dict) or c.get("kind") not in ("case", "timed", "extra"):
            raise WireError("each call needs a kind: case, timed or extra")
        if c["kind"] == "extra" and not isinstance(c.get("exercise"), str):
            raise WireError("an extra call names its exercise")
        kw = c.get("kwargs", [])
        if not isinstance(c.get("args", []), list) or not isinstance(kw, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in kw):
            raise WireError("args must be a list and kwargs a list of [name, value] pairs")
    watch = msg.get("watch", [])
    if not isinstance(watch, list) or not all(isinstance(r, dict) for r in watch):
        raise WireError("watch must be a list of rules")
    limit = msg.get("print_limit", 2000)
    if type(limit) is not int or not 0 <= limit <= 10**6:
        raise WireError("print_limit must be an int")
    return Request(_text(msg, "id", 200), calls, watch, limit)


def outcome_node(out: Outcome, value_node: dict | None = None) -> dict:
    """An :class:`Outcome` as a reply node (untrusted side); ``value_node`` is the
    already encoded value."""
    node = {"status": out.status, "function": out.function[:200], "printed": out.printed,
            "printed_bytes": int(out.printed_bytes), "mutated": bool(out.mutated),
            "borrowed": [{"rule": int(e.rule), "name": str(e.name)[:200]} for e in out.borrowed[:8]],
            "tampered": None if out.tampered is None else str(out.tampered)[:200],
            "seconds": float(out.seconds), "cpu": None if out.cpu is None else float(out.cpu),
            "extra": out.extra}
    if out.status == "value":
        node["value"] = value_node if value_node is not None else {"t": "none"}
    elif out.status == "raised" and out.raised is not None:
        node["raised"] = {"type": out.raised.type_name, "text": out.raised.text, "kinds": sorted(out.raised.kinds)}
    elif out.status == "signature":
        node["signature"] = out.text[:2000]
    return node


def reply(request_id: str, nodes: list[dict], pid: int | None = None) -> str:
    """The text of a reply (untrusted side): ``nodes`` from :func:`outcome_node`."""
    return json.dumps({"attnlib": "reply", "version": VERSION, "id": str(request_id),
                       "pid": os.getpid() if pid is None else int(pid), "outcomes": nodes},
                      separators=(",", ":"), allow_nan=False)


def _number(node: dict, key: str, default=None, *, optional: bool = False):
    v = node.get(key, default)
    if v is None and optional:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise WireError(f"{key} must be a non-negative number")
    return float(v)


def _outcome(node: Any, n_rules: int, budget: _Budget) -> Outcome:
    if not isinstance(node, dict) or node.get("status") not in _STATUSES:
        raise WireError(f"each outcome needs a status: {', '.join(_STATUSES)}")
    status = node["status"]
    printed = _text(node, "printed", 100_000) if "printed" in node else ""
    pb = node.get("printed_bytes", len(printed))
    if type(pb) is not int or pb < 0:
        raise WireError("printed_bytes must be a non-negative int")
    if type(node.get("mutated", False)) is not bool:
        raise WireError("mutated must be true or false")
    borrowed = node.get("borrowed", [])
    if not isinstance(borrowed, list) or len(borrowed) > 64:
        raise WireError("borrowed must be a short list")
    evidence = []
    for e in borrowed:
        if not isinstance(e, dict) or type(e.get("rule")) is not int or not 0 <= e["rule"] < n_rules:
            raise WireError("each borrowed entry names a rule of the request")
        evidence.append(Evidence(e["rule"], _text(e, "name", 200)))
    tampered = node.get("tampered")
    if tampered is not None and (not isinstance(tampered, str) or len(tampered) > 200):
        raise WireError("tampered must be null or short text")
    extra = node.get("extra")
    if extra is not None and (not isinstance(extra, str) or len(extra) > 10_000):
        raise WireError("extra must be null or text")
    out = Outcome(status, printed=printed, printed_bytes=pb, mutated=node.get("mutated", False),
                  borrowed=tuple(evidence), tampered=tampered, extra=extra,
                  function=_text(node, "function", 200) if "function" in node else "",
                  seconds=_number(node, "seconds", 0.0), cpu=_number(node, "cpu", None, optional=True))
    if status == "value":
        out.value = decode_value(node.get("value"), budget=budget)
    elif status == "raised":
        r = node.get("raised")
        if not isinstance(r, dict):
            raise WireError("a raised outcome needs its exception")
        kinds = r.get("kinds", [])
        if not isinstance(kinds, list) or not all(k in _KINDS for k in kinds):
            raise WireError(f"exception kinds must be among {', '.join(_KINDS)}")
        out.raised = Raised(_text(r, "type", 200), _text(r, "text", 10_000), frozenset(kinds))
    else:
        out.text = _text(node, "signature", 2000)
    return out


def read_reply(text: str | bytes, request_id: str, n_calls: int, n_rules: int, *,
               pid: int | None = None) -> list[Outcome]:
    """Read and check a reply (trusted side): it must answer request ``request_id`` with
    ``n_calls`` outcomes whose evidence names rules ``0 .. n_rules - 1`` (and come from
    process ``pid`` when given). Raises :class:`WireError` otherwise."""
    msg = _loads(text, "reply")
    if msg.get("id") != request_id:
        raise WireError("the reply answers another request")
    if pid is not None and msg.get("pid") != pid:
        raise WireError("the reply comes from another process")
    outcomes = msg.get("outcomes")
    if not isinstance(outcomes, list) or len(outcomes) != n_calls:
        raise WireError(f"the reply must hold {n_calls} outcomes")
    budget = _Budget()
    return [_outcome(o, n_rules, budget) for o in outcomes]


# --------------------------------------------------------------------------- frames

_HEADER = struct.Struct(">4sI")
_MAGIC = b"ATL1"


def write_frame(fd: int, payload: bytes) -> None:
    """Write one frame (magic, length, payload) to file descriptor ``fd``."""
    data = _HEADER.pack(_MAGIC, len(payload)) + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def read_frame(fd: int) -> bytes | None:
    """Read one frame from ``fd`` (blocking); ``None`` at end of file. Raises
    :class:`WireError` on a broken header."""
    head = _read_exactly(fd, _HEADER.size)
    if head is None:
        return None
    magic, n = _HEADER.unpack(head)
    if magic != _MAGIC or n > MAX_FRAME:
        raise WireError("a frame with a broken header")
    body = _read_exactly(fd, n)
    if body is None:
        raise WireError("a frame cut short")
    return body


def _read_exactly(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


class FrameReader:
    """Reads frames from a non-blocking fd as bytes arrive (trusted side: it never blocks
    on a learner's process). :meth:`feed` returns the complete frames read so far."""

    def __init__(self, fd: int):
        self.fd, self.buf = fd, bytearray()
        self.eof = False

    def feed(self) -> list[bytes]:
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            except OSError:
                self.eof = True
                break
            if not chunk:
                self.eof = True
                break
            self.buf += chunk
            if len(self.buf) > MAX_FRAME + _HEADER.size:
                break
        frames = []
        while len(self.buf) >= _HEADER.size:
            magic, n = _HEADER.unpack(bytes(self.buf[:_HEADER.size]))
            if magic != _MAGIC or n > MAX_FRAME:
                raise WireError("a frame with a broken header")
            if len(self.buf) < _HEADER.size + n:
                break
            frames.append(bytes(self.buf[_HEADER.size:_HEADER.size + n]))
            del self.buf[:_HEADER.size + n]
        return frames

