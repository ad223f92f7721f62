"""A tiny exercise ("return 2 x") for the checker's own tests, registered for one test."""
from __future__ import annotations

import contextlib
import signal
import threading

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


@contextlib.contextmanager
def interrupt_after(seconds: float):
    """Press the notebook's "interrupt" button after ``seconds``: SIGINT to the main thread,
    with Python's KeyboardInterrupt handler installed as in a kernel (a process started in
    the background by a shell, such as a test runner's, inherits SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(signal, "pthread_kill"):  # (POSIX: the signal interrupts a blocking call too)
        timer = threading.Timer(seconds, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
    else:  # Windows: the main thread handles it at its next step
        import _thread
        timer = threading.Timer(seconds, _thread.interrupt_main, (signal.SIGINT,))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        timer.join()
        signal.signal(signal.SIGINT, before)
