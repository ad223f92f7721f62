"""Exercises of chapter 08 (attention for long sequences): ``linear_attention_step``.

The reference is plain NumPy, independent of :mod:`attnlib.kernels.linear`, so the checker
does not trust the code it teaches.
"""
from __future__ import annotations

import numpy as np

from .._model import Case, Exercise, Mistake, register

__all__ = []  # exercises register themselves; nothing to import from here


# --------------------------------------------------------------------------- linear_attention_step
#
# Causal linear attention as a recurrence: query i sees keys j <= i, so its output
#     out_i = phi(q_i)^T kv_i / phi(q_i)^T z_i,  kv_i = sum_{j<=i} phi(k_j) v_j^T,  z_i = sum_{j<=i} phi(k_j)
# needs only the running sums (kv, z), updated by one token at a time: a state of fixed
# size (F, Ev) + (F,), whatever the length of the sequence.

def _step_reference(kv, z, phi_q, phi_k, v):
    kv = kv + np.outer(phi_k, v)  # (F, Ev) + (F, 1) (1, Ev): add this token's key and value first
    z = z + phi_k  # (F,)
    return kv, z, (phi_q @ kv) / (phi_q @ z)  # (F,) @ (F, Ev) -> (Ev,), divided by a number


def _step_read_before_write(kv, z, phi_q, phi_k, v):
    out = (phi_q @ kv) / (phi_q @ z)  # the old state: keys j < i only
    return kv + np.outer(phi_k, v), z + phi_k, out


def _step_state_not_returned(kv, z, phi_q, phi_k, v):
    _, _, out = _step_reference(kv, z, phi_q, phi_k, v)
    return kv, z, out


def _step_z_not_updated(kv, z, phi_q, phi_k, v):
    kv = kv + np.outer(phi_k, v)
    return kv, z, (phi_q @ kv) / (phi_q @ z)


def _step_no_normaliser(kv, z, phi_q, phi_k, v):
    kv, z, _ = _step_reference(kv, z, phi_q, phi_k, v)
    return kv, z, phi_q @ kv


def _step_query_free_normaliser(kv, z, phi_q, phi_k, v):
    kv, z, _ = _step_reference(kv, z, phi_q, phi_k, v)
    return kv, z, (phi_q @ kv) / z.sum()


def _step_outer_transposed(kv, z, phi_q, phi_k, v):
    kv = kv + np.outer(v, phi_k)  # (Ev, F): only fits when F == Ev
    z = z + phi_k
    return kv, z, (phi_q @ kv) / (phi_q @ z)


def _step_key_normaliser(kv, z, phi_q, phi_k, v):
    kv, z, _ = _step_reference(kv, z, phi_q, phi_k, v)
    return kv, z, (phi_q @ kv) / (phi_k @ z)  # the key's features where the query's belong


def _step_query_in_state(kv, z, phi_q, phi_k, v):
    return _step_reference(kv, z, phi_q, phi_q, v)  # the query's features added to the sums


def _step_per_feature_normaliser(kv, z, phi_q, phi_k, v):
    kv, z, _ = _step_reference(kv, z, phi_q, phi_k, v)
    return kv, z, phi_q @ (kv / z[:, None])  # each feature's row normalised on its own


def _step_out_first(kv, z, phi_q, phi_k, v):
    kv, z, out = _step_reference(kv, z, phi_q, phi_k, v)
    return out, kv, z


def _step_in_place(kv, z, phi_q, phi_k, v):
    kv += np.outer(phi_k, v)  # changes the caller's arrays
    z += phi_k
    return kv, z, (phi_q @ kv) / (phi_q @ z)


def _step_cases(rng):
    def state_after(t, F, Ev):
        """The state after t earlier tokens with positive features."""
        fk = np.exp(rng.standard_normal((t, F)) * 0.5)  # (t, F) > 0
        vs = rng.standard_normal((t, Ev))
        return fk.T @ vs, fk.sum(0)  # kv (F, Ev), z (F,)

    def token(F, Ev, mag=0.5):
        return np.exp(rng.standard_normal(F) * mag), np.exp(rng.standard_normal(F) * mag), rng.standard_normal(Ev)

    return [
        Case(args=(*state_after(5, 4, 3), *token(4, 3)), label="F = 4 features, Ev = 3, after 5 tokens"),
        Case(args=(*state_after(20, 6, 6), *token(6, 6)), label="F = Ev = 6, after 20 tokens"),
        Case(args=(np.zeros((3, 2)), np.zeros(3), *token(3, 2)), label="the first token (empty state)"),
        Case(args=(*state_after(2, 5, 1), *token(5, 1, mag=2.0)), label="Ev = 1, features far from 1"),
        Case(args=(*state_after(50, 2, 4), *token(2, 4)), label="F = 2, Ev = 4, after 50 tokens"),
    ]


register(Exercise(
    name="linear_attention_step",
    chapter="08_long_sequences",
    prompt="One step of causal linear attention as a recurrence: add token i's key and value to the running "
           "sums (kv, z), then read query i's output from them.",
    stub='''def linear_attention_step(kv, z, phi_q, phi_k, v):
    """One token of causal linear attention, from a state of fixed size.

    kv: (F, Ev) running sum of outer(phi(k_j), v_j) over the earlier tokens j < i.
    z: (F,) running sum of phi(k_j) over the earlier tokens.
    phi_q, phi_k: (F,) positive features of token i's query and key.
    v: (Ev,) token i's value.
    Return (kv, z, out): the state including token i, and out (Ev,),
    token i's output, which attends to the keys j <= i.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_step_reference,
    cases=_step_cases,
    mistakes=[
        Mistake("read_before_write", "The output is read from the state before token i is added",
                "Causal attention lets query i see keys j <= i, including its own key, so token i's key and "
                "value must be in the sums before the output is read from them. "
                "(On the first token the old state is empty and the output is 0 / 0.)",
                fn=_step_read_before_write,
                fix="Update first, kv = kv + np.outer(phi_k, v) and z = z + phi_k; then "
                    "out = (phi_q @ kv) / (phi_q @ z)."),
        Mistake("state_not_returned", "The output is right but the state is returned unchanged",
                "The next token needs the sums including this one: return the updated state, not the one "
                "you were given. This state is all the recurrence remembers of the past.",
                fn=_step_state_not_returned,
                fix="return kv_new, z_new, out with the sums that include token i."),
        Mistake("z_not_updated", "kv is updated but z is not",
                "The normaliser z = sum_j phi(k_j) runs over the same keys as kv = sum_j outer(phi(k_j), v_j): "
                "both must include token i's key, or the weights of query i no longer sum to 1.",
                fn=_step_z_not_updated,
                fix="z = z + phi_k."),
        Mistake("no_normaliser", "The output is not divided by the total weight",
                "phi_q @ kv is the weighted sum of values with unnormalised weights phi(q_i) . phi(k_j). "
                "Divide by the sum of those weights, as the softmax divides by the sum of its "
                "exponentials.",
                fn=_step_no_normaliser,
                fix="out = (phi_q @ kv) / (phi_q @ z)."),
        Mistake("query_free_normaliser", "The normaliser does not depend on the query",
                "Summing the features of the keys ignores how much query i likes each of them. The "
                "weights are phi(q_i) . phi(k_j), so their sum involves the query's features too.",
                fn=_step_query_free_normaliser,
                fix="Divide by phi_q @ z, not z.sum()."),
        Mistake("key_normaliser", "The normaliser uses the key's features instead of the query's",
                "The weight of key j for query i is phi(q_i) . phi(k_j), so the weights of query i sum to "
                "phi(q_i) . z, with the query's features, as in the numerator. Using the key's features "
                "makes the normaliser independent of which query is asking.",
                fn=_step_key_normaliser,
                fix="Divide by phi_q @ z, not phi_k @ z."),
        Mistake("query_in_state", "The query's features are added to the running sums",
                "kv and z collect the *keys* seen so far: later queries compare themselves with those keys. "
                "Token i's query is used once, to read its own output; the sums receive its key.",
                fn=_step_query_in_state,
                fix="kv = kv + np.outer(phi_k, v); z = z + phi_k (phi_k, not phi_q)."),
        Mistake("per_feature_normaliser", "Each feature is normalised on its own",
                "Dividing each row of kv by its entry of z gives every feature its own weights summing to 1, "
                "then adds them up with phi_q: the result no longer sums query i's weights phi(q_i) . phi(k_j) "
                "over the keys. Normalise once, by the total weight, after the product with phi_q.",
                fn=_step_per_feature_normaliser,
                fix="out = (phi_q @ kv) / (phi_q @ z), not phi_q @ (kv / z[:, None])."),
        Mistake("out_first", "The three results are returned in the wrong order",
                "The caller unpacks kv, z, out = linear_attention_step(...), so the new state comes first "
                "and the output last.",
                fn=_step_out_first,
                fix="return kv, z, out."),
        Mistake("outer_transposed", "The outer product is the wrong way round",
                "kv is (F, Ev): one row per feature, one column per value coordinate, so the new term "
                "has the key's features along the rows and the value along the columns.",
                fn=_step_outer_transposed,
                fix="np.outer(phi_k, v) (or phi_k[:, None] * v[None, :]), not np.outer(v, phi_k)."),
        Mistake("updates_in_place", "The state is updated in place",
                "Adding into the arrays the caller passed in (kv += ...) silently overwrites the caller's "
                "copy of the previous state (and a state shared by two sequences gets mixed up). Build "
                "new arrays instead.",
                fn=_step_in_place, kind="mutates",
                fix="kv = kv + np.outer(phi_k, v), z = z + phi_k (not kv += ..., z += ...)."),
    ],
    hint="Query i sees keys 0..i, itself included. Which two running sums does the formula for out_i "
         "need, and must token i's key be in them before you read them?",
    hints=("First add token i to the state: its key features times its value (an (F, Ev) outer product) "
           "to kv, its key features to z. Then the output is the query's features times kv, divided by "
           "the query's features times z.",
           "kv = kv + outer(phi_k, v); z = z + phi_k; return kv, z, (phi_q @ kv) / (phi_q @ z)."),
    rtol=1e-4, atol=1e-6,  # a float32 answer passes; every mistake differs by far more
))
