"""A tiny exercise ("return 2 x") for the checker's own tests, registered for one test."""
from __future__ import annotations

import numpy as np

from attnlib.exercises import EXERCISES, Exercise, register

STUB = 'def double(x):\n    """Return 2 * x."""\n    # YOUR CODE HERE\n    raise NotImplementedError\n'


def double(x):
    return 2.0 * np.asarray(x, dtype=float)


def toys(default_name: str, **defaults):
    """A fixture body: yields ``make(name=default_name, **overrides) -> Exercise`` and
    unregisters what it made afterwards."""
    made = []

    def make(name=default_name, **kw):
        args = dict(name=name, chapter="02_qkv", prompt="Return 2 x.", stub=STUB, reference=double)
        args.update(defaults)
        args.update(kw)
        ex = register(Exercise(**args))
        made.append(ex.name)
        return ex

    yield make
    for name in made:
        EXERCISES.pop(name, None)
