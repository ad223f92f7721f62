"""Exercises of chapter 06 (complexity): ``online_softmax_merge``, ``tiled_attention`` and ``linear_attention_step``.

A *partial softmax state* of some queries over a set of keys ``J`` is the triple

    m    = max_j s_j                       shape (..., L)
    l    = sum_j exp(s_j - m)              shape (..., L)
    acc  = sum_j exp(s_j - m) v_j          shape (..., L, Ev)

(``acc / l`` is attention over ``J``). A row that may attend to nothing has
``(-inf, 0, 0)``. The references are plain NumPy, independent of :mod:`attnlib.kernels.flash`,
so the checker does not trust the code it teaches.
"""
from __future__ import annotations

import gc
import math
import tracemalloc

import numpy as np

from .._model import ATTENTION_SHORTCUTS, Case, Exercise, Mistake, register
from ...i18n import N_, _

__all__ = []  # exercises register themselves; nothing to import from here


def _state(s, v):
    """The partial state of scores ``s`` (..., L, S) (``-inf`` = masked) and values ``v``."""
    m = s.max(-1)  # (..., L)
    m_safe = np.where(np.isneginf(m), 0.0, m)
    p = np.exp(s - m_safe[..., None])  # (..., L, S)
    return m, p.sum(-1), p @ v  # acc: (..., L, S) @ (S, Ev) -> (..., L, Ev)


# --------------------------------------------------------------------------- online_softmax_merge

def _merge_reference(m1, l1, acc1, m2, l2, acc2):
    m = np.maximum(m1, m2)  # (..., L)
    m_safe = np.where(np.isneginf(m), 0.0, m)  # both empty: keep the factors at 0, not NaN
    a1, a2 = np.exp(m1 - m_safe), np.exp(m2 - m_safe)
    return m, a1 * l1 + a2 * l2, a1[..., None] * acc1 + a2[..., None] * acc2


def _merge_no_rescale(m1, l1, acc1, m2, l2, acc2):
    return np.maximum(m1, m2), l1 + l2, acc1 + acc2


def _merge_inverted(m1, l1, acc1, m2, l2, acc2):
    m = np.maximum(m1, m2)
    a1, a2 = np.exp(m - m1), np.exp(m - m2)  # the factors the wrong way up
    return m, a1 * l1 + a2 * l2, a1[..., None] * acc1 + a2[..., None] * acc2


def _merge_acc_only(m1, l1, acc1, m2, l2, acc2):
    m, _, acc = _merge_reference(m1, l1, acc1, m2, l2, acc2)
    return m, l1 + l2, acc


def _merge_keep_first_max(m1, l1, acc1, m2, l2, acc2):
    a2 = np.exp(m2 - m1)  # everything expressed relative to m1, which may not be the max
    a2 = np.where(np.isneginf(m2), 0.0, a2)
    return m1, l1 + a2 * l2, acc1 + a2[..., None] * acc2


def _merge_nan_on_empty(m1, l1, acc1, m2, l2, acc2):
    m = np.maximum(m1, m2)
    a1, a2 = np.exp(m1 - m), np.exp(m2 - m)  # -inf - (-inf) = NaN on a row with no keys
    return m, a1 * l1 + a2 * l2, a1[..., None] * acc1 + a2[..., None] * acc2


def _merge_cases(rng):
    def halves(L, S1, S2, Ev, mag, shift=0.0, masked_rows=()):
        s = rng.standard_normal((L, S1 + S2)) * mag
        s[:, S1:] += shift  # the second block's scores are larger: its max wins
        v = rng.standard_normal((S1 + S2, Ev))
        for r, part in masked_rows:
            s[r, :S1] = -np.inf if part in (1, 3) else s[r, :S1]
            s[r, S1:] = -np.inf if part in (2, 3) else s[r, S1:]
        return _state(s[:, :S1], v[:S1]) + _state(s[:, S1:], v[S1:])

    return [
        Case(args=halves(4, 3, 5, 2, 1.0, shift=2.0), label="two key blocks, the second with larger scores"),
        Case(args=halves(3, 6, 2, 3, 1.0, shift=-3.0), label="the first block holds the maximum"),
        Case(args=halves(5, 4, 4, 2, 30.0), label="large scores (exp(s) alone would overflow)"),
        Case(args=halves(3, 3, 4, 2, 1.0, shift=rng.uniform(780.0, 820.0)),
             label="the second block's scores are about 800 above the first's"),
        Case(args=halves(4, 3, 3, 2, 1.0, shift=1.0, masked_rows=[(0, 1), (1, 2), (3, 3)]),
             label="rows masked in one block, and a row masked in both"),
        Case(args=halves(1, 1, 1, 1, 1.0), label="one query, one key per block"),
    ]


register(Exercise(
    name="online_softmax_merge",
    chapter="06_complexity",
    prompt="Merge the partial softmax states (m1, l1, acc1) and (m2, l2, acc2) of the same queries over "
           "two disjoint key blocks into the state (m, l, acc) over both blocks.",
    stub='''def online_softmax_merge(m1, l1, acc1, m2, l2, acc2):
    """Merge two partial softmax states of the same queries over two key blocks.

    m1, m2: (L,) row maxima of the scores s of each block.
    l1, l2: (L,) sums of exp(s - m_i) over each block.
    acc1, acc2: (L, Ev) sums of exp(s - m_i) v over each block.
    Return (m, l, acc) with the same shapes, over both blocks. A row with
    m = -inf in both blocks (nothing to attend to) must come back as
    (-inf, 0, 0), without NaN.
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_merge_reference,
    cases=_merge_cases,
    mistakes=[
        Mistake("no_rescale", "The two states are added without rescaling",
                "l1 + l2 and acc1 + acc2 add sums of exp(s - m1) to sums of exp(s - m2): two different "
                "units. Bring both states to one common reference, the larger of the two maxima, before "
                "adding.",
                fn=_merge_no_rescale,
                fix="m = np.maximum(m1, m2); multiply state i by exp(m_i - m) before adding: "
                    "l = exp(m1 - m) * l1 + exp(m2 - m) * l2, and the same factors (with [:, None]) for acc."),
        Mistake("inverted_factor", "The rescaling factor is upside down",
                "Your factor is >= 1 and inflates the smaller block. The sums were taken relative to "
                "m_i; relative to the larger maximum m they are smaller, so the factor must be <= 1.",
                fn=_merge_inverted,
                fix="Multiply by exp(m_i - m), not exp(m - m_i)."),
        Mistake("l_not_rescaled", "Only acc is rescaled, not l",
                "acc and l are sums over the same exp(s - m) terms, so they need the same factors. "
                "Otherwise acc / l is no longer the softmax average.",
                fn=_merge_acc_only,
                fix="l = exp(m1 - m) * l1 + exp(m2 - m) * l2."),
        Mistake("max_not_updated", "The running maximum is not updated",
                "You kept m1 as the reference and scaled only the second state. acc / l is right, but "
                "exp(m2 - m1) overflows as soon as the second block's scores are ~700 larger (here ~800), "
                "which is what the maximum is there to prevent. The reference must be the larger "
                "maximum, and it is part of the returned state.",
                fn=_merge_keep_first_max,
                fix="Return m = np.maximum(m1, m2) and scale both states by exp(m_i - m)."),
        Mistake("nan_on_empty_rows", "A row with no keys in either block becomes NaN",
                "When both maxima are -inf, m - m_i is -inf - (-inf) = NaN. Such a row needs a finite "
                "reference in the exponent, so that both factors come out as exp(-inf) = 0 and the "
                "row stays (-inf, 0, 0).",
                fn=_merge_nan_on_empty,
                fix="m_safe = np.where(np.isneginf(m), 0.0, m); factors exp(m1 - m_safe), exp(m2 - m_safe); "
                    "return m itself."),
    ],
    hint="l1 is a sum of exp(s - m1) and l2 a sum of exp(s - m2): numbers in two different units. "
         "Which common reference makes them addable without overflow, and what factor converts each "
         "state to it? A row that saw no keys in either block must stay empty.",
    hints=("The common reference is the larger maximum m; a sum taken relative to m_i becomes a sum "
           "relative to m when multiplied by exp(m_i - m), a factor <= 1. l and acc get the same factor. "
           "Where m is -inf, use 0 in the exponent instead.",
           "m = max(m1, m2); m_safe = 0 where m is -inf; a_i = exp(m_i - m_safe); "
           "return m, a1 l1 + a2 l2, a1[:, None] acc1 + a2[:, None] acc2."),
    rtol=1e-4, atol=1e-6,  # a float32 answer passes (its factors are off by ~1e-5 at scores near 90)
))


# --------------------------------------------------------------------------- tiled_attention

def _tiled_reference(q, k, v, block_size):
    L, S = q.shape[0], k.shape[0]
    q = q / math.sqrt(q.shape[-1])
    m = np.full(L, -np.inf)  # running row maxima, (L,)
    l = np.zeros(L)  # running sums of exp(s - m), (L,)
    acc = np.zeros((L, v.shape[-1]))  # running sums of exp(s - m) v, (L, Ev)
    for j0 in range(0, S, block_size):
        s = q @ k[j0:j0 + block_size].T  # (L, E) @ (E, B) -> (L, B)
        m_new = np.maximum(m, s.max(-1))
        alpha = np.exp(m - m_new)  # rescales the old sums to the new maximum
        p = np.exp(s - m_new[:, None])  # (L, B)
        l = alpha * l + p.sum(-1)
        acc = alpha[:, None] * acc + p @ v[j0:j0 + block_size]  # (L, B) @ (B, Ev) -> (L, Ev)
        m = m_new
    return acc / l[:, None]


def _tiled_variant(q, k, v, block_size, *, rescale_acc=True, rescale_l=True, max_sub=True,
                   scale=True, drop_last=False, start_zero=False):
    L, S = q.shape[0], k.shape[0]
    if scale:
        q = q / math.sqrt(q.shape[-1])
    m = np.full(L, -np.inf) if max_sub and not start_zero else np.zeros(L)
    l, acc = np.zeros(L), np.zeros((L, v.shape[-1]))
    stop = (S // block_size) * block_size if drop_last else S
    for j0 in range(0, stop, block_size):
        s = q @ k[j0:j0 + block_size].T
        m_new = np.maximum(m, s.max(-1)) if max_sub else m
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = (alpha * l if rescale_l else l) + p.sum(-1)
        acc = (alpha[:, None] * acc if rescale_acc else acc) + p @ v[j0:j0 + block_size]
        m = m_new
    return acc / l[:, None]


def _tiled_average_of_blocks(q, k, v, block_size):
    """Softmax inside every block, then the mean of the block outputs."""
    q = q / math.sqrt(q.shape[-1])
    outs = []
    for j0 in range(0, k.shape[0], block_size):
        s = q @ k[j0:j0 + block_size].T
        w = np.exp(s - s.max(-1, keepdims=True))
        outs.append((w / w.sum(-1, keepdims=True)) @ v[j0:j0 + block_size])
    return np.mean(outs, axis=0)


def _tiled_cases(rng):
    n = rng.standard_normal

    def qkv(L, S, E, Ev, mag=1.0):
        return n((L, E)) * mag, n((S, E)) * mag, n((S, Ev))

    # every key shares one direction u; query 0 points against it, so all its scores lie
    # near -1000: a running maximum that starts at 0 underflows its row to 0 / 0
    u = n(4)
    u *= 1.5 / np.linalg.norm(u)                  # |u| = 1.5
    k_far = 0.05 * n((9, 4)) + u
    q_far = n((3, 4))
    q_far[0] = -rng.uniform(950.0, 1050.0) * 2.0 * u / (u @ k_far.mean(0))  # √E = 2
    # large scores, and one of them surely past exp's overflow (~709 in float64): query 0
    # along key 2, its score there drawn near 1000 (a draw alone stayed below 709 on some
    # seeds, and "no running maximum" then looked like "the maximum starts at 0")
    q_big, k_big, v_big = qkv(6, 10, 4, 3, mag=25.0)
    q_big[0] = rng.uniform(900.0, 1100.0) * 2.0 * k_big[2] / (k_big[2] @ k_big[2])  # √E = 2
    return [
        Case(args=(*qkv(5, 7, 4, 3), 3), label="S = 7 is not a multiple of block_size = 3"),
        Case(args=(*qkv(8, 12, 8, 2), 4), label="S = 12 = 3 blocks of 4"),
        Case(args=(q_big, k_big, v_big, 4), label="large scores (exp(s) would overflow)"),
        Case(args=(q_far, k_far, n((9, 2)), 4), label="a query whose scores all lie near -1000"),
        Case(args=(*qkv(3, 9, 16, 5), 2), label="E = 16, Ev = 5, L != S"),
        Case(args=(*qkv(1, 1, 2, 1), 1), label="one query, one key"),
        Case(args=(*qkv(4, 6, 4, 2), 16), label="block_size larger than S (one block)"),
    ]


def _tiled_full(q, k, v, block_size):
    """Right values, untiled: the whole (L, S) score matrix at once."""
    s = q @ k.T / math.sqrt(q.shape[-1])  # (L, S)
    w = np.exp(s - s.max(-1, keepdims=True))
    return (w / w.sum(-1, keepdims=True)) @ v


def _tiled_over_queries(q, k, v, block_size):
    """Right values, tiled the wrong way: a full softmax over all S keys per query block."""
    out = np.empty((q.shape[0], v.shape[-1]))
    for i0 in range(0, q.shape[0], block_size):
        s = q[i0:i0 + block_size] @ k.T / math.sqrt(q.shape[-1])  # (block, S): grows with S
        w = np.exp(s - s.max(-1, keepdims=True))
        out[i0:i0 + block_size] = (w / w.sum(-1, keepdims=True)) @ v
    return out


# The memory test. What tiling promises: no intermediate grows with L x S or with
# block x S. The sizes make those clearly larger than what a key-tiled solution needs
# (an (L, block) score tile, or a copy of k or v, S x E): block x S = 16 S x E.
_MEM_L, _MEM_S, _MEM_E, _MEM_BLOCK = 256, 16384, 2, 32
_RUNTIME_SLACK = 2 * 2**20  # bytes a library may touch on its own (arenas, caches)


def _rss(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise OSError(field)


def _peak_growth(fn, q, k, v, block) -> int:
    """Bytes by which ``fn(q, k, v, block)`` raised the process's peak memory.

    On Linux: the peak resident memory (VmHWM, reset through /proc/self/clear_refs) less
    the resident memory before the call, after returning freed heap pages to the system
    (malloc_trim), so reused free pages cannot hide an allocation. It sees every array
    library (NumPy, torch, ...). Elsewhere: tracemalloc's peak, which sees NumPy only."""
    import ctypes

    from .. import _worker

    fn(q[:4], k[:8], v[:8], 2)  # warm-up: imports and one-off buffers of the learner's code
    gc.collect()
    try:
        libc = ctypes.CDLL(None)
        if _worker.IN_WORKER:  # glibc: every block >= 128 KiB is mapped and unmapped on
            libc.mallopt(-3, 128 * 1024)  # free (M_MMAP_THRESHOLD, no dynamic raise), and freed
            libc.mallopt(-1, 128 * 1024)  # heap tops are returned (M_TRIM_THRESHOLD): RSS = live data
        libc.malloc_trim(0)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = _rss("VmRSS")
    except (OSError, AttributeError):
        tracemalloc.start()
        try:
            fn(q, k, v, block)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    fn(q, k, v, block)
    return max(_rss("VmHWM") - before, 0)


def _tiled_memory_check(fn):
    """Reject a solution that holds an intermediate growing with L x S or block x S, in
    any array library (the check measures the process's peak memory)."""
    rng = np.random.default_rng(62)
    L, S, E, B = _MEM_L, _MEM_S, _MEM_E, _MEM_BLOCK
    q, k, v = rng.standard_normal((L, E)), rng.standard_normal((S, E)), rng.standard_normal((S, E))
    allowed = _RUNTIME_SLACK + 8 * max(S * E, L * B) * 8  # a few float64 copies of k, v or score tiles
    grew = _peak_growth(fn, q, k, v, B)
    if grew <= allowed:
        return None
    if _peak_growth(fn, q, k, v, B // 4) < grew / 2:  # memory follows block_size (x S)
        return "query_tiling"
    if grew >= L * S * 8 / 2:
        return "full_score_matrix"
    # (this runs in the checker's worker, which speaks the notebook's language)
    return _("Right values, but an intermediate grows with the number of keys: on L = {L}, S = {S}, "
             "E = {E} with block_size = {B}, your function needed {grew} MiB more memory, while a block "
             "of scores takes L x block_size x 8 bytes = {block} MiB and a copy of k {copy} MiB. Keep only "
             "one (L, block_size) block of scores at a time, plus the running m, l and acc.").format(
        L=L, S=S, E=E, B=B, grew=f"{grew / 2**20:.1f}", block=f"{L * B * 8 / 2**20:.2f}",
        copy=f"{S * E * 8 / 2**20:.2f}")


register(Exercise(
    name="tiled_attention",
    chapter="06_complexity",
    prompt="Compute softmax(q kᵀ / √E) v one block of block_size keys at a time, with the online softmax, "
           "never holding the (L, S) score matrix.",
    stub='''def tiled_attention(q, k, v, block_size):
    """Exact attention softmax(q @ k.T / sqrt(E)) @ v, tiled over the keys.

    q: (L, E), k: (S, E), v: (S, Ev); block_size: an int >= 1.
    Process k and v in blocks of block_size rows, keeping running
    (m, l, acc) per query; never build an (L, S) array.
    Return the output (L, Ev).
    """
    # YOUR CODE HERE
    raise NotImplementedError
''',
    reference=_tiled_reference,
    cases=_tiled_cases,
    mistakes=[
        Mistake("no_rescale", "The running sums are not rescaled when the maximum changes",
                "After a block raises the row maximum, the old l and acc are still sums relative to the "
                "old maximum. Convert both to the new maximum before adding the new block's sums.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, rescale_acc=False, rescale_l=False),
                fix="alpha = np.exp(m - m_new); l = alpha * l + p.sum(-1); "
                    "acc = alpha[:, None] * acc + p @ v_block."),
        Mistake("l_not_rescaled", "acc is rescaled but l is not",
                "l and acc are sums over the same terms exp(s - m), so when the maximum changes both "
                "need the same conversion factor.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, rescale_l=False),
                fix="l = alpha * l + p.sum(-1) with alpha = np.exp(m - m_new)."),
        Mistake("acc_not_rescaled", "l is rescaled but acc is not",
                "acc is a sum of exp(s - m) v over the blocks seen so far; when the maximum changes it "
                "must be converted to the new maximum exactly like l.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, rescale_acc=False),
                fix="acc = alpha[:, None] * acc + p @ v_block with alpha = np.exp(m - m_new)."),
        Mistake("average_of_block_softmaxes", "Each block is normalised on its own and the results averaged",
                "A softmax per block gives every block the same total weight 1, whatever its scores. Keep "
                "unnormalised sums across blocks and divide once, at the end.",
                fn=_tiled_average_of_blocks,
                fix="Carry l and acc (sums of exp(s - m) and exp(s - m) v) through the loop; "
                    "return acc / l[:, None] after it."),
        Mistake("no_max_subtraction", "exp() of the raw scores overflows",
                "Without a running maximum, exp(s) is inf for scores above ~709 (float64) and the output "
                "becomes NaN. Keep the largest score seen so far per query and exponentiate relative to "
                "it.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, max_sub=False),
                fix="m_new = np.maximum(m, s.max(-1)); p = np.exp(s - m_new[:, None]); rescale the sums "
                    "by np.exp(m - m_new)."),
        Mistake("max_starts_at_zero", "The running maximum starts at 0 instead of −∞",
                "Your running maximum starts at 0, so it is never below 0. A query whose scores all lie "
                "far below 0 (here near -1000) then exponentiates scores about 1000 below the reference: "
                "every exp underflows to 0 and acc / l is 0 / 0. The maximum must start below every "
                "possible score.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, start_zero=True),
                fix="m = np.full(L, -np.inf); the first block then sets m to its own maximum "
                    "(alpha = exp(-inf) = 0 for the empty sums)."),
        Mistake("last_block_dropped", "The last, shorter block of keys is skipped",
                "Your loop stops before the keys after the last full block when S is not a multiple of "
                "block_size. The last block may be shorter; slicing past the end simply returns the "
                "keys that are left.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, drop_last=True),
                fix="for j in range(0, S, block_size): use k[j:j + block_size] (not range(0, S - block_size, ...) "
                    "or S // block_size blocks)."),
        Mistake("no_scale", "The scores are not divided by √E",
                "Scaled dot-product attention divides the scores by the square root of the width E of "
                "the queries and keys.",
                fn=lambda q, k, v, b: _tiled_variant(q, k, v, b, scale=False),
                fix="q = q / math.sqrt(q.shape[-1]) (or divide each score block)."),
        Mistake("full_score_matrix", "Right values, but not tiled: the whole (L, S) score matrix is built",
                "Your function holds an array as large as all L x S scores (all keys at once, a softmax "
                "over whole rows, or a full mask), in NumPy or in torch: that is exactly what tiling "
                "avoids. Visit the keys block by block and carry only running per-query quantities "
                "from one block to the next.",
                fn=_tiled_full, kind="custom",
                fix="Loop over key blocks k[j:j + block_size] and keep only the running m, l and acc "
                    "between blocks."),
        Mistake("query_tiling", "Tiled over the queries instead of the keys",
                "Each block of queries still takes a softmax over all S keys, so it holds a block_size x S "
                "array of scores: memory still grows with the sequence length. Tile the KEYS, and update "
                "every query's running state (the online softmax) block by block.",
                fn=_tiled_over_queries, kind="custom",
                fix="For each block k[j:j + block_size], v[j:j + block_size] update every query's running "
                    "maximum m, sum l and weighted sum acc; divide acc by l at the end."),
    ],
    hint="Keep three running quantities per query (the largest score so far, the sum of the exponentials "
         "and the weighted sum of the values) and, whenever a new key block raises the maximum, rescale "
         "the old sums before adding the block's; divide once, at the end.",
    hints=("Start with m = −∞, l = 0, acc = 0 per query. For each block: its scores (L, block) scaled by "
           "1/√E; the new maximum; the factor exp(old m − new m) for the old sums; the block's "
           "exponentials relative to the new maximum, added to l and (times the block's values) to acc.",
           "for j in range(0, S, B): s = q @ k[j:j+B].T / sqrt(E); m_new = max(m, s.max(-1)); "
           "a = exp(m - m_new); p = exp(s - m_new[:, None]); l = a l + p.sum(-1); "
           "acc = a[:, None] acc + p @ v[j:j+B]; m = m_new. Return acc / l[:, None]."),
    rtol=1e-4, atol=1e-5,  # a float32 answer passes (scores near 1000 round to ~1e-4 in float32)
    extra_check=_tiled_memory_check,
    forbidden=tuple(n for n in ATTENTION_SHORTCUTS if n != "attnlib.attention_state"),
))


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
    chapter="06_complexity",
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
