"""The measuring tools of chapter 6 (attnlib.complexity): timing, peak memory, fits."""
import time

import numpy as np
import pytest

from attnlib import complexity as cx


def test_best_times_interleaves_and_returns_the_minimum_of_each():
    calls = []
    fast = lambda: calls.append("fast")  # noqa: E731
    slow = lambda: (calls.append("slow"), time.sleep(0.01))  # noqa: E731
    t_fast, t_slow = cx.best_times([fast, slow], repeats=3)
    assert calls == ["fast", "slow"] * 4  # one warm-up round, then interleaved
    assert t_fast < 0.005 <= 0.01 <= t_slow < 0.5


def test_best_time_is_best_times_of_one_and_rejects_a_bad_clock():
    assert cx.best_time(lambda: None, repeats=2, clock="cpu") >= 0
    with pytest.raises(ValueError, match="clock"):
        cx.best_time(lambda: None, clock="gpu")


def test_best_times_restores_torch_threads():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    cx.best_times([lambda: torch.ones(4).sum()], threads=1)
    assert torch.get_num_threads() == before


def test_fit_exponent_recovers_a_power_law():
    ns = np.array([64, 128, 256, 512])
    assert cx.fit_exponent(ns, 3.0 * ns ** 2) == pytest.approx(2.0)
    assert cx.fit_exponent(ns, 5.0 * ns) == pytest.approx(1.0)


def test_peak_memory_sees_an_n_by_n_array():
    n = 512
    peak = cx.peak_memory(lambda: np.ones((n, n)))
    assert n * n * 8 <= peak < 2 * n * n * 8
