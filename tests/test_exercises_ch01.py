"""Chapter 1 exercises beyond the generic contract (tests/test_exercises_contract.py):
the references agree with outside computations and other correct solutions pass."""
import math

import numpy as np
import pytest
import torch

from attnlib.exercises import check
from attnlib.exercises.ch01_motivation import receptive_field_reference, soft_lookup_reference
from attnlib import motivation

NAMES = ["soft_lookup", "receptive_field"]


# --------------------------------------------------------------------------- soft_lookup

def test_soft_lookup_reference_matches_torch_sdpa_with_scale_one():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((5, 4)), rng.standard_normal((7, 4)), rng.standard_normal((7, 3))
    want = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(a) for a in (q, k, v)), scale=1.0).numpy()
    np.testing.assert_allclose(soft_lookup_reference(q, k, v), want, rtol=1e-12, atol=1e-12)


def test_soft_lookup_accepts_a_loop_solution():
    def loops(query, keys, values):
        out = []
        for qi in query:
            s = [float(np.dot(qi, kj)) for kj in keys]
            m = max(s)
            e = [math.exp(x - m) for x in s]
            z = sum(e)
            out.append(sum((ei / z) * vj for ei, vj in zip(e, values)))
        return np.array(out)

    assert check("soft_lookup", loops).passed


def test_soft_lookup_accepts_a_torch_solution():
    def with_torch(query, keys, values):
        q, k, v = (torch.as_tensor(a) for a in (query, keys, values))
        return torch.softmax(q @ k.T, dim=-1) @ v

    assert check("soft_lookup", with_torch).passed


def test_soft_lookup_weights_rows_sum_to_one():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((3, 4)), rng.standard_normal((6, 4))
    # with values = identity the output *is* the weight matrix
    w = soft_lookup_reference(q, k, np.eye(6))
    np.testing.assert_allclose(w.sum(-1), 1.0, rtol=1e-12)
    assert (w > 0).all()


# --------------------------------------------------------------------------- receptive_field

@pytest.mark.parametrize("dilated", [False, True])
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("L", [0, 1, 2, 4])
def test_receptive_field_reference_matches_measured_reach(L, k, dilated):
    n = 700
    assert motivation.conv_reach(n, L, k, dilated=dilated).sum() == receptive_field_reference(L, k, dilated)


def test_receptive_field_accepts_a_simulation_solution():
    def simulate(num_layers, kernel_size, dilated=False):
        seen = {0}
        for layer in range(num_layers):
            gap = kernel_size ** layer if dilated else 1
            seen = {s + t * gap for s in seen for t in range(kernel_size)}
        return len(seen)

    assert check("receptive_field", simulate).passed


def test_receptive_field_wrong_type_is_reported_not_raised():
    r = check("receptive_field", lambda L, k, dilated=False: "many")
    assert r.status == "failed"
