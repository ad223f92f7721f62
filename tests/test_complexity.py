"""The measuring tools of chapter 6 (attnlib.instruments.complexity): timing, peak memory, fits."""
import time

import numpy as np
import pytest

from attnlib.instruments import complexity as cx


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


def test_hbm_traffic_model_ratio_tends_to_2_block_over_d():
    n, d, block = 65536, 64, 128
    ratio = cx.hbm_bytes_plain(n, d) / cx.hbm_bytes_flash(n, d, block)
    assert ratio == pytest.approx(2 * block / d, rel=0.01)
    assert cx.hbm_bytes_plain(4096, 64) == 2 * (4 * 4096 * 64 + 4 * 4096 ** 2)


@pytest.mark.parametrize("n, block", [(32, 2), (32, 8), (30, 8), (7, 7), (5, 16)])
def test_causal_tiles_computes_the_lower_triangle_and_agrees_with_the_mask(n, block):
    grid = cx.causal_tiles(n, block)
    nb = -(-n // block)
    assert grid.shape == (nb, nb)
    assert (grid > 0).sum() == nb * (nb + 1) // 2
    mask = np.tril(np.ones((n, n), dtype=bool))  # True = query i may see key j
    for i in range(nb):
        for j in range(nb):
            tile = mask[i * block:(i + 1) * block, j * block:(j + 1) * block]
            assert grid[i, j] == (0 if not tile.any() else 2 if tile.all() else 1)


def test_thread_clock_does_not_count_sleeping():
    t_wall, = cx.best_times([lambda: time.sleep(0.02)], repeats=1, clock="wall")
    t_thread, = cx.best_times([lambda: time.sleep(0.02)], repeats=1, clock="thread")
    assert t_wall >= 0.02 and t_thread < 0.01


def test_blas_threads_limits_numpy_and_restores_it():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    with cx.blas_threads(1):
        inside = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    after = [p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert set(inside) <= {1} and after == before


def test_saved_tensors_counts_each_storage_once_and_skips_excluded():
    torch = pytest.importorskip("torch")
    w = torch.randn(8, 8, requires_grad=True)
    x = torch.randn(5, 8, requires_grad=True)

    def forward():
        a = torch.softmax(x @ w, -1)  # softmax saves its output a ...
        return a @ x.mT  # ... and the matmul saves a again: one storage

    saved = cx.saved_tensors(forward, exclude=[w])
    shapes = sorted(s for s, _ in saved)
    assert shapes == [(5, 8), (5, 8)]  # x and a; w excluded, a counted once
    assert all(b == 5 * 8 * 4 for _, b in saved)
    on_meta = cx.saved_tensors(lambda: torch.softmax(torch.ones(3, 4, device="meta", requires_grad=True), -1))
    assert on_meta == [((3, 4), 48)]


def test_count_flops_counts_a_matmul():
    torch = pytest.importorskip("torch")
    q, k = torch.randn(6, 4), torch.randn(5, 4)
    assert cx.count_flops(lambda: q @ k.T) == 2 * 6 * 5 * 4


def test_tiled_loop_diagram_draws_without_error():
    import matplotlib

    matplotlib.use("Agg")
    fig = cx.tiled_loop_diagram()
    assert len(fig.axes[0].patches) >= 12  # 4 matrices, 4 blocks, 5 tiles, arrows
    import matplotlib.pyplot as plt

    plt.close(fig)
