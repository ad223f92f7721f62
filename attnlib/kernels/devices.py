"""Where computations run: pick a device and move arrays there.

``default_device()`` is ``"cuda"`` when PyTorch sees a CUDA GPU and ``"cpu"`` otherwise.
Set the environment variable ``ATTNLIB_DEVICE`` (``cpu``, ``cuda`` or ``cuda:N``) to
override it, e.g. ``ATTNLIB_DEVICE=cpu`` to run a notebook on the CPU of a GPU machine.

``to_device(x, device)`` moves data between NumPy and torch: a NumPy array becomes a
torch tensor on ``device``, a torch tensor is moved there, and the pseudo-device
``"numpy"`` turns either into a NumPy array. Dtypes are kept (NumPy has no bfloat16,
so a bfloat16 tensor becomes float32 NumPy).
"""
from __future__ import annotations

import os
import re

import numpy as np

__all__ = ["default_device", "to_device"]

_ENV = "ATTNLIB_DEVICE"
_VALID = re.compile(r"^(cpu|cuda(:\d+)?)$")


def _torch():
    """The torch module, or None when PyTorch is not installed."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is installed in the course venv
        return None
    return torch


def _cuda_count() -> int:
    torch = _torch()
    return torch.cuda.device_count() if torch is not None and torch.cuda.is_available() else 0


def default_device() -> str:
    r"""The device the course computes on.

    Returns:
        ``os.environ["ATTNLIB_DEVICE"]`` when set (one of ``"cpu"``, ``"cuda"``,
        ``"cuda:N"``), else ``"cuda"`` when PyTorch sees a CUDA GPU, else ``"cpu"``.

    Raises:
        ValueError: ``ATTNLIB_DEVICE`` is not a valid device, or names a CUDA device
            this machine does not have.

    Example::

        >>> device = al.default_device()   # "cuda" on a GPU machine, "cpu" otherwise
    """
    env = os.environ.get(_ENV, "").strip()
    if not env:
        return "cuda" if _cuda_count() else "cpu"
    if not _VALID.match(env):
        raise ValueError(f"{_ENV}={env!r} is not a device; use 'cpu', 'cuda' or 'cuda:N' "
                         f"(or unset it to pick CUDA when available)")
    if env.startswith("cuda"):
        n, index = _cuda_count(), int(env.partition(":")[2] or 0)
        if index >= n:
            have = f"only {n} CUDA device(s)" if n else "no CUDA device (or a CPU-only PyTorch)"
            raise ValueError(f"{_ENV}={env!r} but this machine has {have}; "
                             f"set {_ENV}=cpu or unset it")
    return env


def to_device(x, device=None):
    r"""Move ``x`` to ``device``, converting between NumPy and torch as needed.

    Args:
        x: a NumPy array, a torch tensor, or anything ``np.asarray`` accepts (list, scalar).
        device: ``"numpy"`` for a NumPy array; otherwise a torch device (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, a ``torch.device``) for a torch tensor there.
            Default: ``None`` (:func:`default_device`).

    Returns:
        ``x`` on ``device``, as follows.

        * ``device="numpy"``: a NumPy array (a torch tensor is detached and copied to the
          host; bfloat16 becomes float32, the closest NumPy dtype).
        * otherwise: a torch tensor on ``device`` with ``x``'s dtype (a tensor already
          there is returned as is; a NumPy array on the CPU shares its memory).

    Example::

        >>> q = al.to_device(np.ones((2, 3)))        # torch tensor on al.default_device()
        >>> al.to_device(q, "numpy").shape
        (2, 3)
    """
    if device is None:
        device = default_device()
    torch = _torch()
    is_tensor = torch is not None and isinstance(x, torch.Tensor)
    if isinstance(device, str) and device == "numpy":
        if not is_tensor:
            return np.asarray(x)
        x = x.detach()
        if x.dtype == torch.bfloat16:
            x = x.float()
        return x.cpu().numpy()
    if torch is None:  # pragma: no cover
        raise ValueError(f"device={device!r} needs PyTorch, which is not installed; "
                         f"use device='numpy'")
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device={device!r} is not a device: use 'numpy', 'cpu', 'cuda' or "
                         f"'cuda:N' ({err})") from None
    if device.type == "cuda" and (device.index or 0) >= _cuda_count():
        n = _cuda_count()
        have = f"only {n} CUDA device(s)" if n else "no CUDA device (or a CPU-only PyTorch)"
        raise ValueError(f"device={str(device)!r} but this machine has {have}; use "
                         f"device=al.default_device(), which falls back to 'cpu'")
    if is_tensor:
        return x.to(device)
    x = np.asarray(x)
    if x.dtype.hasobject:
        raise TypeError(f"x holds Python objects (dtype {x.dtype}); pass numbers")
    return torch.as_tensor(np.ascontiguousarray(x), device=device)
