"""Ring attention: simulated over P virtual devices and run for real over P gloo
processes on 127.0.0.1; both equal plain attention. Failures and timeouts are clear."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al


def _qkv(rng, batch, L, S, E=8, Ev=5):
    return (rng.standard_normal(batch + (L, E)), rng.standard_normal(batch + (S, E)),
            rng.standard_normal(batch + (S, Ev)))


def test_schedule_passes_every_block_to_every_device_once():
    P = 5
    sched = al.ring_schedule(P)
    assert sched[0] == list(range(P))  # each device starts with its own block
    for p in range(P):
        assert sorted(step[p] for step in sched) == list(range(P))
    for t in range(1, P):  # device p receives what device p - 1 held one step earlier
        assert all(sched[t][p] == sched[t - 1][(p - 1) % P] for p in range(P))


def test_shard_bounds_cover_the_sequence():
    assert al.shard_bounds(10, 4) == [(0, 3), (3, 6), (6, 8), (8, 10)]
    assert al.shard_bounds(4, 4) == [(0, 1), (1, 2), (2, 3), (3, 4)]


@pytest.mark.parametrize("P", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,S", [(7, 7), (97, 97), (33, 20), (20, 33)])
def test_simulated_ring_equals_plain_attention(P, causal, L, S):
    rng = np.random.default_rng(P * 100 + L + S)
    q, k, v = _qkv(rng, (2,), L, S)
    np.testing.assert_allclose(al.ring_attention_simulated(q, k, v, P, is_causal=causal),
                               al.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-12)


def test_simulated_ring_on_torch_matches_sdpa_and_skips_future_blocks():
    rng = np.random.default_rng(1)
    q, k, v = (torch.tensor(x, dtype=torch.float32) for x in _qkv(rng, (2, 3), 64, 64))
    out, trace = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert len(trace) == 16 and sum(e.computed for e in trace) == 10  # 4 * 5 / 2 blocks on or below the diagonal


@pytest.mark.parametrize("P", [1, 2, 3, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L,S", [(8, 8), (97, 97), (33, 20), (20, 33)])
def test_zigzag_layout_equals_plain_attention(P, causal, L, S):
    rng = np.random.default_rng(P * 7 + L + S)
    q, k, v = _qkv(rng, (2,), L, S)
    np.testing.assert_allclose(al.ring_attention_simulated(q, k, v, P, is_causal=causal, layout="zigzag"),
                               al.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-12)


def test_zigzag_parts_cover_the_sequence_once():
    parts = al.shard_parts(23, 3, "zigzag")
    covered = sorted(i for dev in parts for a, b in dev for i in range(a, b))
    assert covered == list(range(23)) and all(len(dev) == 2 for dev in parts)
    assert parts[0][0][0] == 0 and parts[0][1][1] == 23  # device 0: the first and the last chunk


def _work_per_device(trace, P):
    return [sum(e.pairs for e in trace if e.device == p) for p in range(P)]


def test_causal_work_is_unbalanced_contiguous_and_balanced_zigzag():
    rng = np.random.default_rng(8)
    q, k, v = _qkv(rng, (), 64, 64)
    _, contiguous = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True)
    _, zigzag = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True, layout="zigzag")
    work_c, work_z = _work_per_device(contiguous, 4), _work_per_device(zigzag, 4)
    assert work_c == sorted(work_c) and work_c[-1] == 4 * work_c[0]  # device p: p + 1 blocks of 16 x 16
    assert len(set(work_z)) == 1 and max(work_z) < 0.6 * max(work_c)
    _, full = al.ring_attention_simulated(q, k, v, 4, return_trace=True)
    assert _work_per_device(full, 4) == [64 * 64 // 4] * 4  # without a mask: every pair, evenly


def test_timeline_overlap_hides_transfers_and_zigzag_removes_idle_time():
    from attnlib.instruments import complexity as cx

    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (), 64, 64)
    _, full = al.ring_attention_simulated(q, k, v, 4, return_trace=True)
    block = 16 * 16
    hidden = cx.ring_timeline(full, transfer=0.5 * block, overlap=True)
    exposed = cx.ring_timeline(full, transfer=0.5 * block, overlap=False)
    assert hidden["total"] == 4 * block and max(hidden["idle"]) == 0  # transfer shorter than compute
    assert exposed["total"] == 4 * block + 3 * 0.5 * block
    slow = cx.ring_timeline(full, transfer=2 * block, overlap=True)  # transfer longer: it shows
    assert slow["total"] == block + 3 * 2 * block
    _, causal = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True)
    _, zz = al.ring_attention_simulated(q, k, v, 4, is_causal=True, return_trace=True, layout="zigzag")
    tc, tz = cx.ring_timeline(causal), cx.ring_timeline(zz)
    assert tc["idle"][0] > 0 and tc["idle"][-1] == 0 and max(tz["idle"]) == 0
    assert tz["total"] < 0.6 * tc["total"]


def test_zigzag_needs_two_chunks_per_device():
    q = np.zeros((5, 2))
    with pytest.raises(ValueError, match="2P = 6 chunks"):
        al.ring_attention_simulated(q, q, q, 3, layout="zigzag")
    with pytest.raises(ValueError, match="layout must be"):
        al.shard_parts(8, 2, "striped")


def test_too_many_devices_is_a_clear_error():
    q = np.zeros((3, 2))
    with pytest.raises(ValueError, match="at most 3 devices"):
        al.ring_attention_simulated(q, q, q, 4)


@settings(max_examples=30, deadline=None)
@given(L=st.integers(1, 25), S=st.integers(1, 25), P=st.integers(1, 6), causal=st.booleans(),
       seed=st.integers(0, 2**16))
def test_property_ring_equals_plain_for_any_split(L, S, P, causal, seed):
    P = min(P, L, S)
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, (), L, S, 4, 3)
    np.testing.assert_allclose(al.ring_attention_simulated(q, k, v, P, is_causal=causal),
                               al.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-12)


@pytest.mark.slow  # starts P processes each (make check keeps test_distributed_ring_returns_torch_for_torch_inputs)
@pytest.mark.parametrize("P,causal,L,S", [(2, True, 37, 37), (3, False, 30, 41), (4, True, 64, 64)])
def test_distributed_ring_over_gloo_equals_plain_attention(P, causal, L, S):
    rng = np.random.default_rng(P)
    q, k, v = _qkv(rng, (2,), L, S)
    got = al.ring_attention_distributed(q, k, v, P, is_causal=causal, timeout=60)
    assert isinstance(got, np.ndarray) and got.shape == (2, L, 5)
    np.testing.assert_allclose(got, al.scaled_dot_product_attention(q, k, v, is_causal=causal), atol=1e-12)


def test_distributed_ring_returns_torch_for_torch_inputs():
    rng = np.random.default_rng(5)
    q, k, v = (torch.tensor(x, dtype=torch.float32) for x in _qkv(rng, (), 24, 24))
    got = al.ring_attention_distributed(q, k, v, 2, timeout=60)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    torch.testing.assert_close(got, F.scaled_dot_product_attention(q, k, v))


def test_a_process_that_fails_to_start_gives_a_clear_error():
    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, (), 12, 12)
    with pytest.raises(RuntimeError, match=r"process 1 of 3 failed(.|\n)*told to fail at start-up"):
        al.ring_attention_distributed(q, k, v, 3, timeout=60, _fail_rank=1)


def test_a_run_past_its_timeout_is_stopped_with_a_clear_error():
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, (), 12, 12)
    with pytest.raises(TimeoutError, match="did not finish within timeout=0.001 s"):
        al.ring_attention_distributed(q, k, v, 2, timeout=0.001)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_simulated_ring_on_cuda_and_distributed_from_cuda_inputs():
    q, k, v = (torch.randn(2, 64, 16, dtype=torch.float64, device="cuda") for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(al.ring_attention_simulated(q, k, v, 4, is_causal=True), want)
    got = al.ring_attention_distributed(q, k, v, 2, is_causal=True, timeout=60)  # gloo runs on the CPU
    assert got.device == q.device
    torch.testing.assert_close(got, want)
