"""Chapter 4 exercises beyond the generic contract (tests/test_exercises_contract.py):
the references agree with torch, and masking mistakes written independently, in torch,
are named too."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attnlib as al
from attnlib.exercises import EXERCISES, check

NAMES = ["causal_mask", "padding_mask", "combined_mask"]


@pytest.mark.parametrize("name,required", [
    ("causal_mask", {"diagonal_masked", "upper_triangle", "true_means_blocked"}),
    ("padding_mask", {"off_by_one_long", "off_by_one_short", "inverted"}),
    ("combined_mask", {"or_instead_of_and", "padding_on_queries", "true_means_blocked"}),
])
def test_catalogue_covers_the_issue_mistakes(name, required):
    assert required <= {m.key for m in EXERCISES[name].mistakes}


# --- correct answers written in other ways pass ------------------------------------

def causal_torch(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool))


def causal_loops(n):
    out = np.zeros((n, n), dtype=bool)
    for i in range(n):
        for j in range(i + 1):
            out[i, j] = True
    return out


def padding_torch(lengths, max_len):
    return torch.arange(max_len)[None, :] < torch.as_tensor(lengths)[:, None]


def padding_loops(lengths, max_len):
    return np.array([[p < int(L) for p in range(max_len)] for L in lengths], dtype=bool).reshape(len(lengths), max_len)


def combined_with_attnlib(lengths, n):
    return al.causal_mask(n) & al.padding_mask(np.asarray(lengths), n)  # (n, n) & (N, 1, n)


def combined_float_then_bool(lengths, n):
    additive = np.where(np.tril(np.ones((n, n))) > 0, 0.0, -np.inf)[None] \
        + np.where(np.arange(n)[None, None, :] < np.asarray(lengths)[:, None, None], 0.0, -np.inf)
    return np.isfinite(additive)


@pytest.mark.parametrize("name,fn", [
    ("causal_mask", causal_torch), ("causal_mask", causal_loops),
    ("causal_mask", lambda n: np.tri(n, dtype=bool)),  # (al.causal_mask itself is the library's answer: refused)
    ("padding_mask", padding_torch), ("padding_mask", padding_loops),
    ("padding_mask", lambda lengths, S: np.arange(S)[None, :] < np.asarray(lengths)[:, None]),
    ("combined_mask", combined_with_attnlib), ("combined_mask", combined_float_then_bool),
])
def test_equivalent_correct_answers_pass(name, fn):
    res = check(name, fn)
    assert res.passed, res.message


# --- mistakes written independently of the catalogue are still recognised ------------

@pytest.mark.parametrize("name,fn,key", [
    ("causal_mask", lambda n: torch.tril(torch.ones(n, n), diagonal=-1).bool(), "diagonal_masked"),
    ("causal_mask", lambda n: torch.ones(n, n).triu().bool(), "upper_triangle"),
    ("causal_mask", lambda n: torch.ones(n, n, dtype=torch.bool).triu(1), "true_means_blocked"),
    ("causal_mask", lambda n: torch.zeros(n, n).masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf")),
     "additive_float_mask"),
    ("padding_mask", lambda lengths, m: np.array([[p <= L for p in range(m)] for L in lengths]), "off_by_one_long"),
    ("padding_mask", lambda lengths, m: np.array([[p + 1 < L for p in range(m)] for L in lengths]),
     "off_by_one_short"),
    ("padding_mask", lambda lengths, m: torch.arange(m)[None] >= torch.as_tensor(lengths)[:, None], "inverted"),
    ("padding_mask", lambda lengths, m: (np.arange(m) < np.asarray(lengths)[:, None])[:, None, :],
     "kept_broadcast_axis"),
    ("padding_mask", lambda lengths, m: np.arange(max(lengths))[None, :] < np.asarray(lengths)[:, None],
     "max_len_ignored"),
    ("combined_mask", lambda lengths, n: al.causal_mask(n) | al.padding_mask(np.asarray(lengths), n),
     "or_instead_of_and"),
    ("combined_mask", lambda lengths, n: al.causal_mask(n) & np.swapaxes(al.padding_mask(np.asarray(lengths), n), 1, 2),
     "padding_on_queries"),
    ("combined_mask", lambda lengths, n: np.broadcast_to(al.causal_mask(n), (len(lengths), n, n)), "forgot_padding"),
])
def test_independently_written_mistakes_are_recognised(name, fn, key):
    res = check(name, fn)
    assert res.mistake == key, res.message


def test_wrong_answer_outside_the_catalogue_gets_a_located_message():
    res = check("causal_mask", lambda n: np.eye(n, dtype=bool))
    assert res.status == "failed" and res.mistake is None
    assert "case" in res.message and "differ" in res.message


def test_int_mask_is_told_to_be_bool():
    res = check("causal_mask", lambda n: np.tril(np.ones((n, n), dtype=int)))
    assert not res.passed and "bool" in res.message


# --- the references agree with attnlib and with torch ---------------------------------

@pytest.mark.parametrize("n", [1, 2, 7, 97])
def test_causal_reference_matches_attnlib_and_torch(n):
    ref = EXERCISES["causal_mask"].reference(n)
    np.testing.assert_array_equal(ref, al.causal_mask(n))
    np.testing.assert_array_equal(ref, torch.tril(torch.ones(n, n, dtype=torch.bool)).numpy())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 12), min_size=1, max_size=6), st.integers(0, 4))
def test_padding_reference_counts_real_tokens(lengths, extra):
    max_len = max(lengths) + extra
    ref = EXERCISES["padding_mask"].reference(np.array(lengths), max_len)
    assert ref.shape == (len(lengths), max_len) and ref.dtype == bool
    np.testing.assert_array_equal(ref.sum(axis=1), lengths)
    np.testing.assert_array_equal(ref, al.padding_mask(np.array(lengths), max_len)[:, 0, :])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 8), min_size=1, max_size=4), st.integers(0, 3))
def test_combined_reference_never_lets_a_query_see_the_future_or_padding(lengths, extra):
    n = max(lengths) + extra
    ref = EXERCISES["combined_mask"].reference(np.array(lengths), n)
    b, i, j = np.nonzero(ref)
    assert np.all(j <= i) and np.all(j < np.array(lengths)[b])
    # and it allows everything else
    assert ref.sum() == sum(sum(min(i + 1, L) for i in range(n)) for L in lengths)
