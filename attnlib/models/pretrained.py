"""Trained weights shipped with attnlib, in a format Python and a web page both read.

A model is two files in ``attnlib/models/weights/``: ``<name>.json`` (the
:class:`~attnlib.models.GPTConfig`, the tokenizer's alphabet, where each tensor lies in the
binary file, and the record of the run that trained it: seed, steps, time, loss curve) and
``<name>.bin`` (every tensor, float32, little-endian, one after the other in the order the
JSON lists them). The website's sentence explorer fetches the same two files and runs the
same forward pass in JavaScript (``site_assets/attnlib-text-model.js``).

``tools/train_text_model.py`` (``make model``) writes them; :func:`load` reads them::

    >>> from attnlib.models import pretrained
    >>> model, tok, record = pretrained.load("shakespeare")
"""
from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import torch

from ..data.chars import CharTokenizer
from .gpt import GPT, GPTConfig

__all__ = ["WEIGHTS", "save", "load", "read_record"]

WEIGHTS = pathlib.Path(__file__).parent / "weights"


def _paths(name: str, folder) -> tuple[pathlib.Path, pathlib.Path]:
    folder = pathlib.Path(folder) if folder is not None else WEIGHTS
    return folder / f"{name}.json", folder / f"{name}.bin"


def save(model: GPT, tokenizer: CharTokenizer, name: str, record: dict, *, folder=None) -> pathlib.Path:
    """Write ``model``'s weights, its config, ``tokenizer``'s alphabet and ``record`` (a JSON-able
    dict: how it was trained) as ``<name>.json`` and ``<name>.bin`` in ``folder`` (default:
    :data:`WEIGHTS`). Returns the JSON file's path."""
    meta_path, bin_path = _paths(name, folder)
    meta_path.parent.mkdir(parents=True, exist_ok=True)
    tensors, offset, blobs = [], 0, []
    for key, value in model.state_dict().items():
        a = value.detach().to("cpu", torch.float32).contiguous().numpy().astype("<f4")
        tensors.append({"name": key, "shape": list(a.shape), "offset": offset})
        offset += a.size
        blobs.append(a.ravel())
    cfg = model.cfg
    meta = {"format": "attnlib-gpt/1", "config": dict(vars(cfg)), "alphabet": tokenizer.alphabet,
            "dtype": "float32", "numbers": offset, "tensors": tensors, "record": record}
    bin_path.write_bytes(np.concatenate(blobs).tobytes())
    meta_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return meta_path


def read_record(name: str = "shakespeare", *, folder=None) -> dict:
    """The JSON half of a shipped model: ``config``, ``alphabet``, ``tensors`` and ``record``."""
    meta_path, _ = _paths(name, folder)
    if not meta_path.exists():
        raise FileNotFoundError(f"no model {name!r}: {meta_path} does not exist (make model writes it)")
    return json.loads(meta_path.read_text(encoding="utf-8"))


def load(name: str = "shakespeare", *, folder=None, device=None, dtype=torch.float32):
    """Load a shipped model.

    Args:
        name: the model's file name without extension. Default: ``"shakespeare"``.
        folder: where its two files are. Default: :data:`WEIGHTS`.
        device: torch device. Default: ``None`` (the CPU).
        dtype: the weights' dtype. Default: ``torch.float32`` (as stored).

    Returns:
        ``(model, tokenizer, record)``: a :class:`GPT` in eval mode, a :class:`CharTokenizer`
        and the training record (a dict).
    """
    meta = read_record(name, folder=folder)
    _, bin_path = _paths(name, folder)
    flat = np.fromfile(bin_path, dtype="<f4")
    if flat.size != meta["numbers"]:
        raise ValueError(f"{bin_path} holds {flat.size} numbers but {name}.json lists {meta['numbers']}: "
                         f"the two files are from different runs (make model writes both)")
    model = GPT(GPTConfig(**meta["config"]))
    state = {}
    for t in meta["tensors"]:
        n = int(np.prod(t["shape"], dtype=np.int64))
        state[t["name"]] = torch.from_numpy(flat[t["offset"]:t["offset"] + n].copy()).reshape(t["shape"])
    model.load_state_dict(state)
    model = model.to(device=device or "cpu", dtype=dtype).eval()
    return model, CharTokenizer(meta["alphabet"]), meta["record"]


def size_bytes(name: str = "shakespeare", *, folder=None) -> int:
    """Bytes of the two files a page downloads."""
    return sum(os.path.getsize(p) for p in _paths(name, folder))
