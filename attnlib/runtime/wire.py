"""Messages between a trusted process and an untrusted one: plain data, nothing unpickled.

One framing for every channel of the course (the notebook checker's worker, the grader's
sandbox and the sandbox's own workers). A message is a JSON object, its **header**, and a
list of NumPy **arrays**. It travels as one record of :mod:`multiprocessing.connection`
(which prefixes each record with its length, on every platform)::

    u32 header bytes | u32 number of arrays | header (UTF-8 JSON) | (u64 bytes | .npy bytes)...

Each array is NumPy's own ``.npy`` format. Reading one never unpickles anything and never
allocates more than was received: the ``.npy`` header is read first (NumPy's parser), its
dtype must be one of :data:`DTYPES` and its shape must account for exactly the bytes that
follow; then the data are copied into a fresh, writable array in native byte order.

Values inside a header (:func:`encode_value`, :func:`decode_value`) are nodes::

    {"t": "none"}                  {"t": "bool", "v": true}
    {"t": "int", "v": "-12"}       (decimal text: any size)
    {"t": "float", "v": "0x1.8p+1"} (float.hex: exact, also nan and inf)
    {"t": "complex", "re": "0x0p+0", "im": "0x1p+0"}
    {"t": "str", "v": "text"}
    {"t": "array", "i": 0}         the message's array number 0; "precision": "bfloat16"
                                   marks a torch bfloat16 answer sent as float32 values
    {"t": "scalar", "i": 1}        a NumPy scalar, sent as a 0-d array
    {"t": "tuple", "items": [...]}   {"t": "list", "items": [...]}
    {"t": "dict", "items": [["key", value], ...]}                 (string keys)
    {"t": "masked", "shape": [...]}  a NumPy masked array (refused by the checker)
    {"t": "opaque", "type": "generator", "why": "..."}            anything else: its type only

A reader that gets anything else raises :class:`WireError`; a closed channel raises
:class:`Closed`.
"""
from __future__ import annotations

import io
import json
import math
import re
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

__all__ = ["WireError", "Closed", "Message", "Channel", "Opaque", "BFloat16Values", "DTYPES", "pack", "unpack",
           "encode_value", "decode_value", "text_field"]

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
MAX_DEPTH = 24               # nesting of tuples / lists / dicts
MAX_NODES = 200_000          # value nodes in one message
MAX_TEXT = 1_000_000         # characters of one string
MAX_NDIM = 32
MAX_ARRAYS = 10_000          # arrays in one message
MAX_FRAME = 512 * 2**20      # bytes of one message
_HEAD = struct.Struct(">II")
_SIZE = struct.Struct(">Q")
_NPY_HEADER = 10_000         # bytes of one .npy header


class WireError(ValueError):
    """A message that is not what the protocol allows (the reason is in the text)."""


class Closed(EOFError):
    """The other end of the channel is gone."""


class Message(NamedTuple):
    """A header (a JSON object) and the arrays its value nodes refer to."""

    header: dict
    arrays: tuple = ()


# --------------------------------------------------------------------------- bytes

def pack(header: dict, arrays=()) -> bytes:
    """The bytes of a message (see the module docstring)."""
    head = json.dumps(header, separators=(",", ":"), allow_nan=False).encode("utf-8")
    parts = [_HEAD.pack(len(head), len(arrays)), head]
    for a in arrays:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.asarray(a), allow_pickle=False)
        data = buf.getvalue()
        parts += [_SIZE.pack(len(data)), data]
    return b"".join(parts)


def unpack(data: bytes) -> Message:
    """Read a message, checking every part (raises :class:`WireError`)."""
    view = memoryview(data)
    if len(view) < _HEAD.size:
        raise WireError("a message shorter than its header")
    n_head, n_arrays = _HEAD.unpack_from(view)
    if n_arrays > MAX_ARRAYS or _HEAD.size + n_head > len(view):
        raise WireError("a message whose header announces more than it holds")
    header = _loads(bytes(view[_HEAD.size:_HEAD.size + n_head]))
    at, arrays = _HEAD.size + n_head, []
    for _ in range(n_arrays):
        if at + _SIZE.size > len(view):
            raise WireError("a message cut short")
        (n,) = _SIZE.unpack_from(view, at)
        at += _SIZE.size
        if at + n > len(view):
            raise WireError("a message cut short")
        arrays.append(_read_npy(view[at:at + n]))
        at += n
    if at != len(view):
        raise WireError("bytes after the end of a message")
    return Message(header, tuple(arrays))


def _loads(raw: bytes) -> dict:
    def no_constants(c):
        raise WireError(f"{c} is not allowed in a message")

    try:
        msg = json.loads(raw.decode("utf-8"), parse_constant=no_constants)
    except UnicodeDecodeError:
        raise WireError("a message header that is not UTF-8 text") from None
    except RecursionError:
        raise WireError("a message header nested too deeply") from None
    except json.JSONDecodeError as exc:
        raise WireError(f"a message header that is not JSON: {exc.msg} at character {exc.pos}") from None
    if not isinstance(msg, dict):
        raise WireError("a message header must be a JSON object")
    return msg


def _read_npy(blob: memoryview) -> np.ndarray:
    f = io.BytesIO(blob)
    try:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read_header:
            raise ValueError(f"version {version}")
        shape, fortran, dtype = read_header[version](f, max_header_size=_NPY_HEADER)
    except (ValueError, SyntaxError, TypeError, KeyError, struct.error) as exc:
        raise WireError(f"an array whose .npy header cannot be read ({str(exc)[:80]})") from None
    if dtype.name not in DTYPES or dtype.hasobject:
        raise WireError(f"an array of dtype {dtype.name[:40]!r}; allowed: {', '.join(DTYPES)}")
    if len(shape) > MAX_NDIM or not all(type(n) is int and 0 <= n for n in shape):
        raise WireError(f"an array shape must be at most {MAX_NDIM} non-negative ints")
    start = f.tell()
    if math.prod(shape) * dtype.itemsize != len(blob) - start:
        raise WireError(f"an array of shape {tuple(shape)} and dtype {dtype.name} needs "
                        f"{math.prod(shape) * dtype.itemsize} bytes, got {len(blob) - start}")
    flat = np.frombuffer(blob, dtype=dtype, offset=start, count=math.prod(shape))
    arr = flat.reshape(shape, order="F" if fortran else "C")
    return np.array(arr, dtype=dtype.newbyteorder("="), order="C", copy=True)


class Channel:
    """One end of a two-way channel of messages, over :mod:`multiprocessing.connection`
    objects (a ``Pipe()`` end, or two file descriptors with :meth:`from_fds`).

    :meth:`recv` blocks until a whole message is there: to bound the wait, :meth:`poll`
    first, and let a watchdog end the other side if a message can stall half-way (see
    :class:`attnlib.runtime.processes.Child`)."""

    def __init__(self, conn, out=None, *, max_bytes: int = MAX_FRAME):
        self.conn, self.out = conn, out if out is not None else conn
        self.max_bytes = max_bytes

    @classmethod
    def from_fds(cls, read_fd: int, write_fd: int, **kw) -> "Channel":
        """A channel over two pipe descriptors (POSIX)."""
        from multiprocessing.connection import Connection
        return cls(Connection(read_fd, writable=False), Connection(write_fd, readable=False), **kw)

    def send(self, header: dict, arrays=()) -> None:
        """Send a message; raises :class:`Closed` when the other end is gone."""
        try:
            self.out.send_bytes(pack(header, arrays))
        except (BrokenPipeError, ConnectionError, EOFError) as exc:
            raise Closed(str(exc)) from None
        except OSError as exc:
            raise Closed(str(exc)) from None

    def poll(self, timeout: float | None = 0.0) -> bool:
        """Whether a message (or the end of the channel) can be read now, waiting up to
        ``timeout`` seconds."""
        try:
            return self.conn.poll(timeout)
        except (OSError, EOFError):
            return True  # (the next recv says it is closed)

    def recv(self) -> Message:
        """The next message (blocks); :class:`Closed` at the end, :class:`WireError` for
        one that breaks the protocol."""
        try:
            data = self.conn.recv_bytes(self.max_bytes)
        except EOFError:
            raise Closed("the other end closed the channel") from None
        except OSError as exc:
            if "bad message length" in str(exc):
                raise WireError(f"a message longer than {self.max_bytes} bytes") from None
            raise Closed(str(exc)) from None
        return unpack(data)

    def close(self) -> None:
        for c in {id(self.conn): self.conn, id(self.out): self.out}.values():
            try:
                c.close()
            except OSError:
                pass


# --------------------------------------------------------------------------- values

@dataclass(frozen=True)
class Opaque:
    """A value that is not plain data (a generator, an object, a too large array): only its
    type's name, and why it could not be sent."""

    type_name: str
    why: str = ""

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


class BFloat16Values(np.ndarray):
    """The values of a torch bfloat16 answer, held as float32 (NumPy has no bfloat16);
    the class records the dtype so that the verdict can name it."""


class _Budget:
    def __init__(self, nodes: int = MAX_NODES):
        self.nodes = nodes

    def node(self) -> None:
        self.nodes -= 1
        if self.nodes < 0:
            raise WireError(f"more than {MAX_NODES} values in one message")


def _type_name(obj: Any) -> str:
    try:
        name = type(obj).__name__
    except BaseException:  # noqa: BLE001
        return "object"
    return name[:100] if isinstance(name, str) else "object"


def _is_tensor(obj: Any) -> bool:
    t = type(obj)
    return (getattr(t, "__module__", "") or "").startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "cpu")


def _array_node(arr: np.ndarray, arrays: list, room: list, precision: str | None = None) -> dict:
    base = np.ndarray.view(arr, np.ndarray) if type(arr) is not np.ndarray else arr
    name = base.dtype.name
    if name not in DTYPES:
        return {"t": "opaque", "type": "ndarray", "why": f"an array of dtype {name}"}
    if base.ndim > MAX_NDIM:
        return {"t": "opaque", "type": "ndarray", "why": f"an array with {base.ndim} axes"}
    if base.nbytes > room[0]:
        return {"t": "opaque", "type": "ndarray",
                "why": f"an array of {base.nbytes} bytes, more than the checker reads back"}
    room[0] -= base.nbytes
    arrays.append(np.asarray(base, order="C"))  # (ascontiguousarray would make a 0-d array 1-d)
    node = {"t": "array", "i": len(arrays) - 1}
    if precision:
        node["precision"] = precision
    return node


def _tensor_node(obj: Any, arrays: list, room: list) -> dict:
    t = obj.detach().cpu()
    if getattr(t, "is_sparse", False):
        t = t.to_dense()
    if str(t.dtype) == "torch.bfloat16":
        return _array_node(np.asarray(t.float().numpy()), arrays, room, precision="bfloat16")
    if t.is_complex():
        t = t.resolve_conj()
    t = t.resolve_neg()
    return _array_node(np.asarray(t.numpy()), arrays, room)


def encode_value(obj: Any, arrays: list, *, room: list | None = None, budget: _Budget | None = None,
                 depth: int = 0) -> dict:
    """``obj`` as a value node; its arrays are appended to ``arrays`` (the message's).

    Torch tensors (any device; bfloat16 as float32 values marked ``precision``), NumPy
    arrays of a dtype in :data:`DTYPES` (an ndarray subclass is sent as a plain array of its
    data), NumPy scalars, Python scalars, strings, tuples, lists and string-keyed dicts
    become data; a masked array a ``masked`` node; anything else, or a value this function
    cannot read, an ``opaque`` node with its type's name and the reason. ``room``: a
    one-item list, the bytes of arrays still allowed (default: 256 MiB)."""
    room = room if room is not None else [256 * 2**20]
    budget = budget or _Budget()
    budget.node()
    if depth > MAX_DEPTH:
        return {"t": "opaque", "type": _type_name(obj), "why": f"nested deeper than {MAX_DEPTH} levels"}
    deeper = dict(room=room, budget=budget, depth=depth + 1)
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
            return _array_node(obj, arrays, room)
        if isinstance(obj, np.generic):
            arr = np.asarray(obj)
            if arr.dtype.name not in DTYPES:
                return {"t": "opaque", "type": type(obj).__name__, "why": f"a scalar of dtype {arr.dtype.name}"}
            arrays.append(arr)
            return {"t": "scalar", "i": len(arrays) - 1}
        if _is_tensor(obj):
            return _tensor_node(obj, arrays, room)
        if type(obj) in (tuple, list):
            return {"t": type(obj).__name__, "items": [encode_value(o, arrays, **deeper) for o in obj]}
        if type(obj) is dict:
            if not all(type(k) is str for k in obj):
                return {"t": "opaque", "type": "dict", "why": "a dict with keys that are not strings"}
            return {"t": "dict", "items": [[k, encode_value(v, arrays, **deeper)] for k, v in obj.items()]}
        if isinstance(obj, (tuple, list)):  # a namedtuple or a list subclass: its items
            return {"t": "tuple" if isinstance(obj, tuple) else "list",
                    "items": [encode_value(o, arrays, **deeper) for o in obj]}
        if hasattr(obj, "__array__") and not isinstance(obj, (str, bytes, type)):
            arr = np.asarray(obj)
            if type(arr) is np.ndarray:
                return _array_node(arr, arrays, room)
    except WireError as exc:
        return {"t": "opaque", "type": _type_name(obj), "why": str(exc)}
    except BaseException as exc:  # noqa: BLE001 - a broken __array__, tensor or __eq__ of the learner's
        return {"t": "opaque", "type": _type_name(obj), "why": f"reading it raised {_type_name(exc)}"}
    return {"t": "opaque", "type": _type_name(obj), "why": ""}


def text_field(node: dict, key: str, limit: int = MAX_TEXT) -> str:
    """``node[key]``, which must be text of at most ``limit`` characters."""
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


def _array(node: dict, arrays) -> np.ndarray:
    i = node.get("i")
    if type(i) is not int or not 0 <= i < len(arrays):
        raise WireError("an array node must name one of the message's arrays")
    return np.array(arrays[i], copy=True)  # (a fresh copy each time it is read)


def decode_value(node: Any, arrays=(), *, budget: _Budget | None = None, depth: int = 0) -> Any:
    """The value of a node, checked: NumPy arrays (fresh writable copies, native byte
    order) of a dtype in :data:`DTYPES`, NumPy and Python scalars, strings, tuples, lists,
    dicts, :class:`Opaque` records; ``np.ma.masked_array`` for a ``masked`` node. Raises
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
        text = text_field(node, "v", 5000)
        if not re.fullmatch(r"-?[0-9]+", text):
            raise WireError("int value must be decimal text")
        return int(text)
    if t == "float":
        return _float(node.get("v"))
    if t == "complex":
        return complex(_float(node.get("re")), _float(node.get("im")))
    if t == "str":
        return text_field(node, "v")
    if t == "scalar":
        arr = _array(node, arrays)
        if arr.ndim != 0:
            raise WireError("a scalar must be a 0-d array")
        return arr[()]
    if t == "array":
        arr = _array(node, arrays)
        precision = node.get("precision")
        if precision is not None:
            if precision != "bfloat16" or arr.dtype != np.float32:
                raise WireError("precision may only mark float32 values as bfloat16")
            arr = arr.view(BFloat16Values)
        return arr
    if t == "masked":
        shape = node.get("shape")
        if (not isinstance(shape, list) or len(shape) > MAX_NDIM
                or not all(type(n) is int and 0 <= n <= 2**48 for n in shape)):
            raise WireError("shape must be a list of at most 32 non-negative ints")
        return np.ma.masked_array(np.broadcast_to(np.float64(0.0), tuple(shape)), mask=False)
    if t in ("tuple", "list"):
        items = node.get("items")
        if not isinstance(items, list):
            raise WireError(f"{t} items must be a list")
        out = [decode_value(o, arrays, budget=budget, depth=depth + 1) for o in items]
        return tuple(out) if t == "tuple" else out
    if t == "dict":
        items = node.get("items")
        if not isinstance(items, list) or not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str)
                                                  for p in items):
            raise WireError("dict items must be [key, value] pairs with text keys")
        return {k: decode_value(v, arrays, budget=budget, depth=depth + 1) for k, v in items}
    if t == "opaque":
        return Opaque(text_field(node, "type", 200), text_field(node, "why", 500) if "why" in node else "")
    raise WireError(f"unknown value type {str(t)[:40]!r}")
