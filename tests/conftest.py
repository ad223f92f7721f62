"""Shared test fixtures and helpers for attnlib's core tests.

The outside reference for attention is PyTorch's own ``F.scaled_dot_product_attention``
(and ``torch.softmax`` for the weights), run in float64 on the CPU.

Under pytest-xdist (``make check``, ``make unit``: one worker per core) each worker computes
on one thread: torch's and OpenBLAS's threads wait for each other by spinning, and two
workers with two threads each on two cores made some tests 10 to 100 times slower.
"""
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

# The course's own tests check its references and catalogued mistakes through the checker,
# which refuses them as the answer key otherwise (tests of that refusal unset this).
os.environ.setdefault("ATTNLIB_CHECK_ALLOW_ANSWER_KEY", "1")

if os.environ.get("PYTEST_XDIST_WORKER"):
    import threadpoolctl

    torch.set_num_threads(1)
    threadpoolctl.threadpool_limits(1)

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# Devices the torch tests run on: CPU always, CUDA when this machine has it.
DEVICES = ["cpu", pytest.param("cuda", marks=[CUDA, pytest.mark.cuda])]


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def t64(x):
    """A float64 (or bool) CPU torch copy of a NumPy array / torch tensor."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x if x.dtype == torch.bool else x.double()
    x = torch.from_numpy(np.asarray(x))
    return x if x.dtype == torch.bool else x.double()


def ref_sdpa(q, k, v, attn_mask=None, is_causal=False, scale=None):
    """torch SDPA in float64 on the CPU: the outside reference for the output."""
    m = None if attn_mask is None else t64(attn_mask)
    return F.scaled_dot_product_attention(t64(q), t64(k), t64(v), attn_mask=m,
                                          is_causal=is_causal, scale=scale)


def ref_weights(q, k, attn_mask=None, is_causal=False, scale=None):
    """Attention weights by torch.softmax in float64, zeros for rows with nothing to attend."""
    q, k = t64(q), t64(k)
    L, S = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.mT * scale
    if is_causal:
        attn_mask = torch.ones(L, S, dtype=torch.bool).tril()
    if attn_mask is not None:
        m = t64(attn_mask)
        scores = scores.masked_fill(~m, -torch.inf) if m.dtype == torch.bool else scores + m
    w = torch.softmax(scores, dim=-1)
    return torch.nan_to_num(w, nan=0.0)  # torch.softmax gives NaN on all -inf rows


def to_np(x):
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return (x.float() if x.dtype == torch.bfloat16 else x).numpy()
    return np.asarray(x)


def start_methods() -> list:
    """The ways a checker child starts here, for ``parametrize``: ``"spawn"`` everywhere,
    ``"fork"`` where forking is safe. Where fork is the default the spawn variant is marked
    slow (a new Python per child): make check runs the forked worker, make unit both."""
    from attnlib.runtime import processes

    if processes.fork_unsafe_reason() is None:
        return [pytest.param("spawn", marks=pytest.mark.slow), "fork"]
    return ["spawn"]


def pytest_collection_modifyitems(config, items):
    """In each test file, the tests of a spawned checker child run after the others.

    After a spawned child ends, the runtime starts the next one ahead (a new Python that
    imports numpy and torch: about 1.7 s of CPU), and a forked check ends it unused. In
    collection order ``test_x[fork]`` and ``test_x[spawn]`` alternate; grouped, the child
    started ahead is the next test's. The files keep their order: moved to the end of the
    whole run, these tests ran after tests/test_ring.py had started multiprocessing's fork
    server in the same worker, which their checks for leftover processes then found."""
    files: dict = {}
    for item in items:
        files.setdefault(item.path, len(files))
    items[:] = sorted(items, key=lambda item: (files[item.path], "spawn" in item.name))  # (sorted is stable)
