"""Plain data across the sandbox's boundary: JSON with arrays of known dtypes.

What a submission returns crosses back to the grader as numbers, strings, lists, tuples,
dicts with string keys, ``None`` and NumPy arrays of a numeric or bool dtype (bytes in
base64 with their dtype and shape). Nothing else: an object of any other type arrives as
``Opaque(type name)``. Decoding runs no code of the sender (no pickle, no ``__reduce__``,
no ``__array__``): it checks the dtype against a fixed list, the byte count against the
shape, and the nesting depth.

Example::

    >>> decode(json.loads(json.dumps(encode((np.eye(2), 3.0)))))
    (array([[1., 0.], [0., 1.]]), 3.0)
"""
from __future__ import annotations

import base64
from typing import Any

import numpy as np

__all__ = ["encode", "decode", "Opaque", "WireError"]

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
MAX_DEPTH = 32


class WireError(ValueError):
    """Data that does not follow the format (sent by a broken or hostile sandbox)."""


class Opaque:
    """A value that was not plain data: only its type's name came back."""

    def __init__(self, type_name: str):
        self.type_name = str(type_name)[:100]

    def __repr__(self) -> str:
        return f"<{self.type_name}>"

    def __eq__(self, other) -> bool:
        return isinstance(other, Opaque) and other.type_name == self.type_name

    __hash__ = None


def _bfloat16_class():
    try:
        from ..exercises._compare import BFloat16Values
        return BFloat16Values
    except ImportError:  # pragma: no cover - the checker's module moved
        return None


def encode(obj: Any, depth: int = 0) -> Any:
    """``obj`` as JSON-ready plain data (the sender's side; may call the object's methods)."""
    if depth > MAX_DEPTH:
        return {"$opaque": "nested too deeply"}
    if obj is None or isinstance(obj, (bool, str)):
        return obj
    if isinstance(obj, (int, float)) and type(obj) in (int, float):
        return obj
    if isinstance(obj, np.ma.MaskedArray):
        return {"$opaque": "numpy.ma.MaskedArray"}
    if isinstance(obj, np.generic) and obj.dtype.name in DTYPES:
        obj = np.asarray(obj)
    if isinstance(obj, np.ndarray) and type(obj) is not np.ndarray:
        bf16 = _bfloat16_class()
        if bf16 is not None and isinstance(obj, bf16):
            return {"$nd": ["bfloat16", list(obj.shape),
                            base64.b64encode(np.ascontiguousarray(obj, np.float32).tobytes()).decode()]}
        obj = np.asarray(obj).view(np.ndarray)
    if type(obj) is np.ndarray:
        if obj.dtype.name not in DTYPES:
            return {"$opaque": f"numpy.ndarray of dtype {obj.dtype}"}
        data = np.ascontiguousarray(obj).astype(obj.dtype.newbyteorder("<"), copy=False).tobytes()
        return {"$nd": [obj.dtype.name, list(obj.shape), base64.b64encode(data).decode()]}
    if type(obj) is tuple:
        return {"$tuple": [encode(o, depth + 1) for o in obj]}
    if type(obj) is list:
        return [encode(o, depth + 1) for o in obj]
    if type(obj) is dict and all(type(k) is str for k in obj):
        return {"$dict": {k: encode(v, depth + 1) for k, v in obj.items()}}
    return {"$opaque": f"{type(obj).__module__}.{type(obj).__qualname__}"}


def _array(spec) -> np.ndarray:
    if not (isinstance(spec, list) and len(spec) == 3):
        raise WireError("an array must be [dtype, shape, data]")
    name, shape, data = spec
    bf16 = name == "bfloat16"
    if not (bf16 or name in DTYPES):
        raise WireError(f"dtype {name!r} is not allowed")
    if not (isinstance(shape, list) and len(shape) <= 32 and all(type(n) is int and n >= 0 for n in shape)):
        raise WireError("a shape must be a list of non-negative ints")
    if not isinstance(data, str):
        raise WireError("array data must be base64 text")
    raw = base64.b64decode(data.encode(), validate=True)
    dtype = np.dtype(np.float32 if bf16 else name).newbyteorder("<")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if count * dtype.itemsize != len(raw):
        raise WireError(f"{len(raw)} bytes do not make an array of shape {tuple(shape)} and dtype {name}")
    arr = np.frombuffer(raw, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))
    if bf16:
        cls = _bfloat16_class()
        if cls is not None:
            arr = arr.view(cls)
    return arr


def decode(obj: Any, depth: int = 0) -> Any:
    """Plain data (as ``json.loads`` gave it) back into Python and NumPy values; raises
    :class:`WireError` on anything that does not follow the format."""
    if depth > MAX_DEPTH + 2:
        raise WireError("nested too deeply")
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, list):
        return [decode(o, depth + 1) for o in obj]
    if isinstance(obj, dict) and len(obj) == 1:
        (key, value), = obj.items()
        if key == "$nd":
            return _array(value)
        if key == "$tuple" and isinstance(value, list):
            return tuple(decode(o, depth + 1) for o in value)
        if key == "$dict" and isinstance(value, dict):
            return {str(k): decode(v, depth + 1) for k, v in value.items()}
        if key == "$opaque":
            return Opaque(str(value))
    raise WireError(f"not plain data: {str(obj)[:80]}")
