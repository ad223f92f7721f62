"""The checker's machinery: it never raises, never hangs, stops runaway code, and says
clearly what is wrong with a submission (on toy exercises with small time limits and on
the chapter 2 exercises)."""
from __future__ import annotations

import inspect
import os
import sys
import time

import numpy as np
import pytest
import torch

import attnlib as al
from attnlib.exercises import EXERCISES, Case, CheckResult, Mistake, check
from attnlib.runtime import limits, processes
from conftest import start_methods
from exercise_toys import interrupt_after, toys


def _double(x):
    return 2.0 * np.asarray(x, dtype=float)


def _toy_cases():
    rng = np.random.default_rng(0)
    return [Case((rng.standard_normal(3),), label="a vector"),
            Case((rng.standard_normal((2, 3)),), label="a matrix"),
            Case((rng.standard_normal((2, 2, 2)),), label="a batch")]


@pytest.fixture
def toy():
    """A tiny exercise "toy_double" (2 x), with short time limits; removed afterwards."""
    yield from toys("toy_double", cases=_toy_cases, hint="Multiply by 2.", time_limit=0.5, total_time_limit=1.2,
                    mistakes=[Mistake("plus_one", "Added one", "You returned x + 1; multiply by 2 instead.",
                                      fn=lambda x: np.asarray(x) + 1.0),
                              Mistake("squared", "Squared", "You returned x ** 2; multiply by 2 instead.",
                                      fn=lambda x: np.asarray(x) ** 2, variants=(lambda x: np.asarray(x) * x,))])


def _workers_alive():
    """Worker processes (and anything they started) still running under this process."""
    return [p for p in processes.descendants(os.getpid()) if p not in processes.standby_pids()]


def _wait_no_workers(seconds=3.0):
    deadline = time.perf_counter() + seconds
    while _workers_alive() and time.perf_counter() < deadline:
        time.sleep(0.02)
    return not _workers_alive()


# --------------------------------------------------------------------------- runaway code

def test_infinite_loop_is_stopped_and_stops_burning_cpu(toy):
    toy()

    def spin(x):
        while True:
            pass

    t0 = time.perf_counter()
    r = check("toy_double", spin)
    # stopped at 0.5 CPU seconds (about 0.6 s on an idle machine), or on a machine so busy
    # that it got less than a third of a CPU at the clock's backstop (tests/test_exercise_clock.py)
    assert time.perf_counter() - t0 < limits.backstop(0.5) + 1.0
    assert r.status == "failed" and r.details["problem"] == "timeout", str(r)
    assert "0.5 s" in r.message and "infinite loop" in r.message
    assert _wait_no_workers(1.0), "the runaway worker is still alive"
    cpu = time.process_time()
    time.sleep(0.3)
    assert time.process_time() - cpu < 0.15, "something still burns CPU after the check"
    assert check("toy_double", _double).passed  # a later check still works


def test_loop_that_catches_the_first_interrupt_is_stopped_too(toy):
    toy()

    def stubborn(x):
        try:
            while True:
                pass
        except BaseException:  # noqa: BLE001 - a learner's bare except
            while True:
                pass

    r = check("toy_double", stubborn)
    assert r.details["problem"] == "timeout"
    assert _wait_no_workers(1.0)


def test_kernel_interrupt_during_a_check_stops_the_worker_too(toy):
    """The notebook's "interrupt" button (SIGINT to the main thread) must not leave the
    learner's loop running in the background."""
    toy(time_limit=8.0, total_time_limit=20.0)  # the interrupt must come first, even on a busy machine

    def spin(x):
        while True:
            pass

    with interrupt_after(0.3), pytest.raises(KeyboardInterrupt):
        check("toy_double", spin)
    assert _wait_no_workers(1.0)


@pytest.mark.slow  # a spawned worker: a new Python
def test_long_c_call_is_stopped_at_once_in_the_spawned_worker_too(toy, monkeypatch):
    """Spawned worker (used where fork is unsafe): a C call that never returns is killed
    with its process at the clock's backstop, as in the forked worker
    (tests/test_exercise_leaks.py); the verdict does not say that anything still runs."""
    monkeypatch.setenv("ATTNLIB_CHECK_WORKER", "spawn")
    toy(time_limit=0.2)
    check("toy_double", _double)  # (the spawned worker starts ahead of the timed check)
    t0 = time.perf_counter()
    r = check("toy_double", lambda x: time.sleep(30))
    assert r.details["problem"] == "timeout" and "background" not in r.message
    assert time.perf_counter() - t0 < limits.backstop(0.2) + 60  # (a new Python may take a while on a busy machine)
    assert _wait_no_workers(0.5)
    assert check("toy_double", _double).passed


def test_total_time_budget_stops_a_slow_but_finite_function(toy):
    toy(time_limit=0.5, total_time_limit=0.6)

    def slowish(x):
        _busy(0.25)
        return _double(x)

    r = check("toy_double", slowish)
    assert r.details["problem"] == "timeout" and "more than 0.6 s for the first" in r.message
    assert _wait_no_workers(1.0)


def _busy(seconds):
    """Compute (burn CPU) for ``seconds`` of this thread's CPU time."""
    t0 = time.thread_time()
    while time.thread_time() - t0 < seconds:
        pass


def test_correct_but_slow_on_perf_case_is_called_too_slow(toy, tmp_path):
    big = Case((np.ones(10_000),), label="big")
    toy(perf_case=big, slow_limit=0.2)
    finished = tmp_path / "finished"

    def slow_when_big(x):
        if np.size(x) > 100:
            _busy(3.0)
            finished.write_text("it ran to the end")
        return _double(x)

    t0 = time.perf_counter()
    r = check("toy_double", slow_when_big)
    assert r.status == "failed" and r.mistake == "too_slow" and "0.2 s of CPU time" in r.message
    assert not finished.exists()  # stopped once it had used 0.2 s of CPU, not left to finish
    if processes.start_method() == "fork":  # (a spawned worker also waits for a new Python)
        assert time.perf_counter() - t0 < 1.5
    assert check("toy_double", _double).passed


def test_speed_is_judged_by_cpu_time_not_by_waiting(toy):
    # On a busy machine a fast answer waits for a core: its wall time grows, its CPU
    # time does not. Waiting (here: sleeping) is not computing and is not "too slow" ...
    big = Case((np.ones(10_000),), label="big")
    toy(perf_case=big, slow_limit=0.2)

    def waits_when_big(x):
        if np.size(x) > 100:
            time.sleep(0.4)
        return _double(x)

    assert check("toy_double", waits_when_big).passed

    def waits_forever_when_big(x):  # ... but a call that never returns is still stopped
        if np.size(x) > 100:
            time.sleep(30)  # past the clock's backstop of slow_limit (2.6 s)
        return _double(x)

    r = check("toy_double", waits_forever_when_big)
    assert r.status == "failed" and r.mistake == "too_slow"
    assert _wait_no_workers(5)


# --------------------------------------------------------------------------- learner errors

def test_stub_raising_not_implemented_is_not_attempted(toy):
    toy()
    ns = {}
    exec(EXERCISES["toy_double"].stub, ns)
    r = check("toy_double", ns["double"])
    assert r.status == "not_attempted" and "…" in str(r)
    assert "NotImplementedError" in r.message


def test_not_implemented_on_a_later_case_is_an_error_not_not_attempted(toy):
    toy()

    def vectors_only(x):
        if np.ndim(x) > 1:
            raise NotImplementedError("matrices")
        return _double(x)

    r = check("toy_double", vectors_only)
    assert r.status == "failed" and r.details["problem"] == "raised" and "case 2" in r.message


def test_recursion_error_is_explained():
    def softmax(x, axis=-1):
        return softmax(x, axis)

    r = check("softmax", softmax)
    assert r.details["problem"] == "raised" and "RecursionError" in r.message and "calls itself" in r.message


def test_deep_but_finite_recursion_runs_in_the_worker(toy):
    toy()
    # nearly all of the recursion the limit leaves below this test's own frames (deeper
    # under pytest-xdist) and the checker's (a few dozen)
    room = sys.getrecursionlimit() - len(inspect.stack(0)) - 120

    def deep(x, n=room):
        return deep(x, n - 1) if n else _double(x)

    assert check("toy_double", deep).passed


def test_wrong_signature_gets_the_stub_signature():
    def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads):  # no mask parameter
        return x

    r = check("multi_head_attention", multi_head_attention)
    assert r.details["problem"] == "signature"
    assert "def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, mask=None):" in r.message
    assert "mask" in r.message


def test_function_that_prints_still_passes_and_its_output_is_captured(capsys):
    def softmax(x, axis=-1):
        print("shape", np.shape(x))
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)

    r = check("softmax", softmax)
    assert r.passed, str(r)
    assert capsys.readouterr().out == ""
    assert "shape (6,)" in r.details["printed"] and "printed" in str(r) and "shape (6,)" in r._repr_html_()


def test_returning_a_list_says_to_return_an_array():
    r = check("softmax", lambda x, axis=-1: al.exercises.ch02_qkv.softmax_reference(x, axis).tolist())
    assert r.details["problem"] == "type" and "Python list" in r.message and "np.asarray" in r.message


def test_none_in_only_the_masked_branch_is_pointed_out():
    ref = al.exercises.ch05_multihead._mha_reference

    def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
        if mask is None:
            return ref(x, w_q, w_k, w_v, w_o, num_heads)

    r = check("multi_head_attention", multi_head_attention)
    assert r.details["problem"] == "none" and "without a mask" in r.message and "`return`" in r.message


def test_torch_only_code_on_numpy_inputs_gets_a_conversion_tip():
    r = check("softmax", lambda x, axis=-1: torch.exp(x) / torch.exp(x).sum(dim=axis, keepdim=True))
    assert r.details["problem"] == "raised" and "torch.as_tensor" in r.message


def test_learner_keyboard_interrupt_and_system_exit_do_not_escape(toy):
    toy()

    def interrupts(x):
        raise KeyboardInterrupt

    assert check("toy_double", interrupts).details["problem"] == "raised"
    assert check("toy_double", lambda x: sys.exit(3)).details["problem"] == "raised"


def test_a_huge_exception_message_is_shortened(toy):
    toy()

    def loud(x):
        raise ValueError("x" * 5000)

    r = check("toy_double", loud)
    assert len(r.message) < 600 and "ValueError" in r.message


# --------------------------------------------------------------------------- outputs

@pytest.mark.parametrize("convert", [
    lambda out: torch.as_tensor(out),
    lambda out: torch.as_tensor(out).requires_grad_(True) * 1.0,
    lambda out: torch.as_tensor(out, dtype=torch.float32),
], ids=["float64", "requires_grad", "float32"])
def test_correct_torch_tensors_pass(convert):
    ref = al.exercises.ch02_qkv.softmax_reference
    assert check("softmax", lambda x, axis=-1: convert(ref(x, axis))).passed


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_correct_cuda_tensor_passes():
    ref = al.exercises.ch02_qkv.attention_reference
    assert check("attention", lambda q, k, v: torch.as_tensor(ref(q, k, v), device="cuda")).passed


def test_tolerance_is_the_exercises_not_the_answer_dtypes():
    """A float32 answer of correct code passes at the default tolerance; a float16 one does
    not (it keeps ~3 digits) and is told why; a real error is caught in any dtype."""
    ref = al.exercises.ch02_qkv.softmax_reference
    assert check("softmax", lambda x, axis=-1: ref(x, axis).astype(np.float32)).passed
    half = check("softmax", lambda x, axis=-1: ref(x, axis).astype(np.float16))
    assert half.details["problem"] == "value" and "your answer is float16" in half.message, str(half)
    assert "rtol=" in half.message and "float64" in half.message
    r = check("softmax", lambda x, axis=-1: (ref(x, axis) * 1.002).astype(np.float32))
    assert r.details["problem"] == "value" and "largest difference" in r.message


def test_wrong_values_report_case_shapes_and_largest_difference(toy):
    toy()
    r = check("toy_double", lambda x: 2.0 * np.asarray(x) + (np.ndim(x) == 2) * 0.5)
    assert r.mistake is None and {k: v for k, v in r.details.items() if k != "seed"} == {"problem": "value", "case": 1}
    assert isinstance(r.details["seed"], int)  # (recorded: check(..., seed=...) replays the cases)
    assert "case 2 of 3 (a matrix; inputs (2, 3))" in r.message
    assert "largest difference 0.5" in r.message and "The other 2 cases pass" in r.message
    assert r.hint == "Multiply by 2."


def test_bool_exercise_rejects_a_float_mask(toy):
    toy(name="toy_positive", reference=lambda x: np.asarray(x) > 0, output_kind="bool",
        mistakes=[Mistake("negative", "Negative side", "Use x > 0, not x < 0.", fn=lambda x: np.asarray(x) < 0)])
    assert check("toy_positive", lambda x: np.asarray(x) > 0).passed
    r = check("toy_positive", lambda x: (np.asarray(x) > 0).astype(float))
    assert r.details["problem"] == "dtype" and "bool" in r.message
    assert check("toy_positive", lambda x: np.asarray(x) < 0).mistake == "negative"


def test_mutating_the_input_is_reported(toy):
    toy()

    def in_place(x):
        x *= 2.0
        return x

    r = check("toy_double", in_place)
    assert r.mistake == "mutates_input" and "in place" in r.message
    soft = check("softmax", EXERCISES["softmax"].mistake("mutates").fn)
    assert soft.mistake == "mutates" and "In-place operations" in soft.message


# --------------------------------------------------------------------------- mistakes

def test_mistake_variants_are_recognised(toy):
    toy()
    assert check("toy_double", lambda x: np.asarray(x) * x).mistake == "squared"


def test_a_mistake_that_raises_on_some_cases_is_recognised():
    """A learner's 2-D code `weights.T @ v` gives wrong values when L == S and raises
    when L != S or on batches; the catalogue still names the mistake."""
    def attention(q, k, v, mask=None):
        scores = q @ k.T / np.sqrt(q.shape[-1])
        if mask is not None:
            scores = np.where(mask, scores, -np.inf)
        w = np.exp(scores - scores.max(axis=-1, keepdims=True))
        w = w / w.sum(axis=-1, keepdims=True)
        return w.T @ v

    r = check("attention", attention)
    assert r.mistake == "weights_transposed", r.message


def test_raising_everywhere_does_not_match_a_mistake_that_raises_everywhere(toy):
    def always(x):
        raise ValueError("no")
    toy(mistakes=[Mistake("raises", "Raises", "This mistake always raises, so it never explains anything.",
                          fn=always)])
    r = check("toy_double", always)
    assert r.mistake is None and r.details["problem"] == "raised"


def test_extra_check_can_name_a_custom_mistake_or_give_a_message(toy):
    def extra(fn):
        out = fn(np.array([1e308]))
        return "overflow" if np.isinf(out).any() else None
    toy(extra_check=extra, mistakes=[Mistake("overflow", "Overflow", "2 * 1e308 overflows; divide first.",
                                             fn=_double, kind="custom")])
    r = check("toy_double", _double)
    assert r.mistake == "overflow" and "divide first" in r.message
    toy(name="toy_double_msg", extra_check=lambda fn: "too much memory")
    r = check("toy_double_msg", _double)
    assert r.details["problem"] == "extra" and r.message == "too much memory"


# --------------------------------------------------------------------------- API misuse and robustness

def test_unknown_exercise_name_suggests_the_closest():
    r = check("sofmax", lambda x: x)
    assert r.status == "error" and "Did you mean 'softmax'?" in r.message and "!" in str(r)


def test_non_callable_fn_is_an_error():
    r = check("softmax", np.ones(3))
    assert r.status == "error" and "needs a function" in r.message


def test_swapped_arguments_are_pointed_out():
    r = check(lambda x: x, "softmax")
    assert r.status == "error" and "swapped" in r.message


def test_a_bug_in_the_exercise_itself_is_an_error_not_an_exception(toy):
    def broken_cases():
        raise RuntimeError("bad cases")
    toy(cases=broken_cases)
    r = check("toy_double", _double)
    assert r.status == "error" and "bug in attnlib" in r.message


def test_register_rejects_duplicates_and_unknown_kinds(toy):
    toy()
    with pytest.raises(ValueError, match="registered twice"):
        toy()
    m = Mistake("a", "A", "a message", fn=_double)
    with pytest.raises(ValueError, match="duplicate mistake keys"):
        toy(name="toy_dup", mistakes=[m, m])
    with pytest.raises(ValueError, match="unknown kind"):
        toy(name="toy_kind", mistakes=[Mistake("a", "A", "a message", fn=_double, kind="typo")])


# --------------------------------------------------------------------------- display

def _fresh_check(name, fn):
    al.exercises._hints._LADDER.clear()  # (a repeated mistake would show its fix: the hint ladder)
    return check(name, fn)


def test_display_is_deterministic_and_shows_the_verdict():
    good = [_fresh_check("softmax", EXERCISES["softmax"].reference) for _ in range(2)]
    bad = [_fresh_check("attention", EXERCISES["attention"].mistake("no_scaling").fn) for _ in range(2)]
    assert str(good[0]) == str(good[1]) and good[0]._repr_html_() == good[1]._repr_html_()
    assert str(bad[0]) == str(bad[1]) and bad[0]._repr_html_() == bad[1]._repr_html_()
    assert str(good[0]).startswith("✓ softmax: passed") and repr(good[0]) == str(good[0])
    assert str(bad[0]).startswith("✗ attention: not yet") and "√E" in str(bad[0])
    assert "✗" in bad[0]._repr_html_() and "attnlib-check-failed" in bad[0]._repr_html_()
    assert bool(good[0]) and not bool(bad[0])


def test_html_escapes_and_shows_the_hint():
    r = CheckResult("x", "failed", "a < b & c", hint="use <b>")
    page = r._repr_html_()
    assert "a &lt; b &amp; c" in page and "use &lt;b&gt;" in page and "Hint:" in page
    assert "  Hint: use <b>" in str(r)


# --------------------------------------------------------------------------- library shortcuts

def _softmax_ref(x, axis=-1):
    return al.exercises.ch02_qkv.softmax_reference(x, axis)


from attnlib import softmax as imported_softmax  # noqa: E402 - a learner's `from attnlib import softmax`


@pytest.mark.parametrize("fn, called", [
    (lambda x, axis=-1: al.softmax(x, axis=axis), "al.softmax"),
    (al.softmax, "al.softmax"),
    (lambda x, axis=-1: imported_softmax(x, axis=axis), "al.softmax"),
    (lambda x, axis=-1: torch.softmax(torch.as_tensor(x), dim=axis), "torch.softmax"),
    (lambda x, axis=-1: torch.nn.functional.softmax(torch.as_tensor(x), dim=axis), "F.softmax"),
    (lambda x, axis=-1: torch.as_tensor(x).softmax(axis), "torch.Tensor.softmax"),
    (lambda x, axis=-1: torch.special.softmax(torch.as_tensor(x), axis), "torch.special.softmax"),
], ids=["al.softmax", "al.softmax itself", "imported name", "torch.softmax", "F.softmax", "Tensor.softmax",
        "torch.special"])
def test_softmax_by_the_library_is_refused(fn, called):
    r = check("softmax", fn)
    assert r.status == "failed" and r.mistake == "library_shortcut", str(r)
    assert r.details["called"] == called and called in r.message
    assert "the exercise is to write softmax yourself" in r.message


def _attention_via(kind):
    def attention(q, k, v, mask=None):
        if kind == "al.sdpa":
            return al.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        if kind == "al.flash":
            return al.flash_attention(q, k, v, attn_mask=mask)
        if kind == "al.mha":  # one head with identity projections is plain attention
            eye = np.eye(q.shape[-1])
            return al.multi_head_attention(q, k, v, 1, eye, eye, eye, eye, attn_mask=mask)
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        m = None if mask is None else torch.as_tensor(mask)
        if kind == "F.sdpa":
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=m)
        mha = torch.nn.MultiheadAttention(q.shape[-1], 1, bias=False, batch_first=True, dtype=q.dtype)
        return mha(q, k, v, need_weights=False)[0]
    return attention


@pytest.mark.parametrize("kind, called", [
    ("al.sdpa", "al.scaled_dot_product_attention"), ("al.flash", "al.flash_attention"),
    ("al.mha", "al.multi_head_attention"), ("F.sdpa", "F.scaled_dot_product_attention"),
    ("nn.MHA", "nn.MultiheadAttention"),
])
def test_attention_by_the_library_is_refused(kind, called):
    r = check("attention", _attention_via(kind))
    assert r.status == "failed" and r.mistake == "library_shortcut", str(r)
    assert r.details["called"] == called and called in r.message and "write attention yourself" in r.message


@pytest.mark.parametrize("use", ["al", "nn"])
def test_multi_head_attention_by_the_library_is_refused(use):
    def multi_head_attention(x, w_q, w_k, w_v, w_o, num_heads, mask=None):
        if use == "al":
            return al.multi_head_attention(x, x, x, num_heads, w_q, w_k, w_v, w_o, attn_mask=mask)
        mha = torch.nn.MultiheadAttention(x.shape[-1], num_heads, bias=False, batch_first=True, dtype=torch.float64)
        return mha(*(torch.as_tensor(x),) * 3, need_weights=False)[0]

    r = check("multi_head_attention", multi_head_attention)
    assert r.mistake == "library_shortcut", str(r)
    assert ("al.multi_head_attention" if use == "al" else "nn.MultiheadAttention") in r.message


def test_the_parent_keeps_the_real_library_functions():
    check("softmax", lambda x, axis=-1: al.softmax(x, axis=axis))
    check("attention", _attention_via("F.sdpa"))
    assert al.softmax.__name__ == "softmax" and not hasattr(al.softmax, "__wrapped__")
    assert imported_softmax is al.softmax
    assert torch.Tensor.softmax.__name__ == "softmax" and not hasattr(torch.Tensor.softmax, "__wrapped__")
    assert not hasattr(torch.nn.functional.scaled_dot_product_attention, "__wrapped__")
    import builtins
    assert builtins.__import__.__name__ == "__import__"


@pytest.mark.slow  # a spawned worker: a new Python
def test_shortcuts_are_caught_in_the_spawned_worker_too(monkeypatch):
    monkeypatch.setenv("ATTNLIB_CHECK_WORKER", "spawn")
    r = check("softmax", lambda x, axis=-1: torch.softmax(torch.as_tensor(x), dim=axis))
    assert r.mistake == "library_shortcut" and r.details["called"] == "torch.softmax"
    assert not hasattr(torch.softmax, "__wrapped__") and not hasattr(al.softmax, "__wrapped__")
    assert check("softmax", _softmax_ref).passed


def test_a_library_helper_that_is_not_the_answer_is_allowed():
    # torch.softmax is the answer of "softmax", not of "attention": a building block there
    def attention(q, k, v, mask=None):
        q, k, v = (torch.as_tensor(a) for a in (q, k, v))
        s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
        if mask is not None:
            s = s.masked_fill(~torch.as_tensor(mask), float("-inf"))
        return torch.softmax(s, dim=-1) @ v
    assert check("attention", attention).passed


@pytest.mark.parametrize("method", start_methods())
def test_closing_file_descriptors_0_to_2_is_not_a_crash(toy, method, monkeypatch):
    """Issue 27's probe: a function that closes stdin, stdout and stderr and returns the
    right answer got "crashed the separate process" (the checker's own copies of them took
    their numbers): the checker puts them back after each call."""
    monkeypatch.setenv("ATTNLIB_CHECK_WORKER", method)
    toy()

    def closes(x):
        for fd in (0, 1, 2):
            try:
                os.close(fd)
            except OSError:
                pass
        return _double(x)

    r = check("toy_double", closes)
    assert r.passed, str(r)
    assert check("toy_double", _double).passed


def test_a_library_answer_under_a_chapter_instrument_is_refused():
    """Issue 27's probe: softmax_jacobian answered by chapter 3's own instrument, which no
    rule names, passed. A borrowed answer is refused by what it computes."""
    import attnlib.instruments.scaling
    from attnlib.instruments.scaling import softmax_np

    r = check("softmax_jacobian", lambda x: attnlib.instruments.scaling.softmax_jacobian_np(softmax_np(x)))
    assert r.status == "failed" and r.mistake == "library_shortcut", str(r)
    assert r.details["called"] == "al.instruments.scaling.softmax_jacobian_np"
    assert "library's own answer" in r.message and "write softmax_jacobian yourself" in r.message


def _renamed(fn, name):
    """A copy of ``fn`` under another name (its code, and so its file, stay attnlib's)."""
    import types
    copy = types.FunctionType(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = name
    return copy


@pytest.mark.parametrize("how", ["module", "renamed", "torch"])
def test_any_function_of_attnlib_that_computes_the_answer_is_refused(how):
    """Whatever name reaches it: attnlib's instruments compute chapter 1's soft lookup and
    chapter 3's Jacobian; a copy under another name, or a call through torch, computes the
    same."""
    from attnlib.instruments import motivation, scaling

    if how == "module":
        name, fn = "soft_lookup", lambda query, keys, values: motivation.soft_lookup(query, keys, values)
    elif how == "renamed":
        jac = _renamed(scaling.softmax_jacobian_np, "my_helper")
        name, fn = "softmax_jacobian", lambda x: jac(softmax_ref(x))
    else:
        jac = _renamed(scaling.softmax_jacobian_np, "helper")
        name, fn = "softmax_jacobian", lambda x: torch.as_tensor(jac(torch.softmax(torch.as_tensor(x), -1).numpy()))
    r = check(name, fn)
    assert r.status == "failed" and r.mistake == "library_shortcut", str(r)
    assert r.details["called"].startswith("al.instruments."), r.details


def softmax_ref(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_a_library_building_block_that_is_the_answer_on_some_cases_only_is_allowed():
    """The causal mask (upper left) is the lower-right one when L = S: a learner who uses it
    there is not refused; nor is a building block that is not the answer (a softmax)."""
    def lower_right_causal_mask(L, S):
        if L == S:
            return np.asarray(al.causal_mask(L, S))  # the same mask when L = S
        return np.tril(np.ones((L, S), dtype=bool), k=S - L)

    r = check("lower_right_causal_mask", lower_right_causal_mask)
    assert r.passed, str(r)

    def softmax_jacobian(x):
        s = al.softmax(x)  # (..., n): the library's softmax is a building block here
        return s[..., :, None] * np.eye(s.shape[-1]) - s[..., :, None] * s[..., None, :]

    assert check("softmax_jacobian", softmax_jacobian).passed


def test_forbidden_must_be_dotted_names(toy):
    with pytest.raises(ValueError, match="dotted names"):
        toy(name="toy_bad_forbidden", forbidden="attnlib.softmax")


# --------------------------------------------------------------------------- dtypes and masked arrays

@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_answers_are_compared_at_the_exercises_tolerance(dtype):
    """Issue 20: the tolerance is the exercise's, not the answer's dtype. Attention computed
    in a low precision is not within rtol=1e-4 of the reference, and the verdict names the
    dtype and says why; a real mistake in that dtype is caught all the same."""
    def attention(q, k, v, mask=None):  # computed in the low precision itself
        q, k, v = (torch.as_tensor(a, dtype=dtype) for a in (q, k, v))
        s = (q @ k.transpose(-2, -1)).float() / q.shape[-1] ** 0.5
        if mask is not None:
            s = s.masked_fill(~torch.as_tensor(mask), float("-inf"))
        return (s.softmax(-1).to(dtype) @ v)

    r = check("attention", attention)
    name = str(dtype).split(".")[1]
    assert not r.passed and r.details["problem"] == "value", str(r)
    assert f"your answer is {name}" in r.message and "significant digits" in r.message
    wrong = check("softmax", lambda x, axis=-1: torch.as_tensor(_softmax_ref(x, axis) * 1.15).to(dtype))
    assert not wrong.passed and f"your answer is {name}" in wrong.message


def test_a_masked_array_answer_is_refused():
    def softmax(x, axis=-1):
        return np.ma.masked_array(_softmax_ref(x, axis), mask=np.zeros(np.shape(x), bool))
    r = check("softmax", softmax)
    assert r.status == "failed" and r.details["problem"] == "type", str(r)
    assert "masked array" in r.message and "plain array" in r.message


# --------------------------------------------------------------------------- hints

@pytest.mark.parametrize("hint, shown", [
    ("m = x.max(axis=axis, keepdims=True); e = np.exp(x - m); return e / e.sum()", None),
    ("Subtract the row maximum first. Then: e = np.exp(x - m).", "Subtract the row maximum first."),
    ("Each query shares its attention among the keys, so normalise along the last axis.",
     "Each query shares its attention among the keys, so normalise along the last axis."),
    ("Combine as causal[None, :, :] & padding[:, None, :].", None),
])
def test_the_checker_never_shows_code_as_a_hint(hint, shown):
    text = al.exercises.displayed_hint(hint)
    assert text == (shown or al.exercises._hints._GENERIC_HINT)


def test_a_timeout_shows_the_hint_idea_but_never_code(toy):
    toy(hint="Multiply every entry by two. For example: y = 2 * x.")

    def spin(x):
        while True:
            pass

    r = check("toy_double", spin)
    assert r.details["problem"] == "timeout" and r.hint == "Multiply every entry by two."


# --------------------------------------------------------------------------- messages that apply

@pytest.mark.parametrize("fn, problem", [
    (lambda x: None, "none"),
    (lambda x: (np.asarray(x) > 0).astype(float), "dtype"),
    (lambda x: list(np.asarray(x) * 2.0), "type"),
])
def test_the_work_it_through_by_hand_line_is_not_added_where_it_does_not_apply(toy, fn, problem):
    """Issue 20: "returned None", "expected a bool array", "got a Python list" are about the
    form of the answer, not the idea; a time-out shows the idea but not the generic line."""
    toy(name="toy_form", reference=lambda x: np.asarray(x) > 0 if problem == "dtype" else _double(x),
        output_kind="bool" if problem == "dtype" else "float", hint="")
    r = check("toy_form", fn)
    assert r.details["problem"] == problem, str(r)
    assert r.hint == "" and al.exercises._hints._GENERIC_HINT not in str(r)

    def spin(x):
        while True:
            pass

    t = check("toy_form", spin)
    assert t.details["problem"] == "timeout" and t.hint == "", str(t)
    wrong = check("toy_form", lambda x: np.asarray(x) < 0 if problem == "dtype" else _double(x) + 1)
    assert wrong.details["problem"] == "value" and wrong.hint == al.exercises._hints._GENERIC_HINT


@pytest.mark.parametrize("code, what", [
    (lambda w: w.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1), "dim1="),
    (lambda w: np.where(w.masked_fill(w > 0, 0.0) > 0, 1.0, 0.0).sum(), "masked_fill"),
    (lambda w: w.sum(dim=-1), "dim="),
    (lambda w: w.softmax(dim=-1), "softmax"),
])
def test_torch_style_code_on_a_numpy_input_is_told_the_input_is_numpy(code, what):
    r = check("prev_token_score", code)
    assert r.details["problem"] == "raised", str(r)
    assert "NumPy arrays" in r.message and "torch.as_tensor" in r.message and what in r.message, r.message


# --------------------------------------------------------------------------- cases that vary, the ladder

def _random_cases(rng):
    return [Case((rng.standard_normal(3),), label="a vector"),
            Case((rng.standard_normal((2, 3)),), label="a matrix")]


def test_cases_are_fresh_each_check_replayable_by_seed_and_a_memorised_table_fails(toy):
    ex = toy(cases=_random_cases)
    assert ex.varies
    table = {c.args[0].tobytes(): _double(c.args[0]) for c in ex.all_cases(5)}

    def memorised(x):
        return table.get(np.asarray(x).tobytes())

    assert check("toy_double", memorised, seed=5).passed
    r = check("toy_double", memorised)
    assert not r.passed and r.details["seed"] != 5 and r.details["problem"] == "none", str(r)
    again = check("toy_double", memorised, seed=r.details["seed"])
    assert again.message == r.message  # the seed replays the same cases
    assert len({check("toy_double", _double).details["seed"] for _ in range(3)}) == 3


def test_old_style_cases_without_an_rng_still_work(toy):
    ex = toy()  # _toy_cases() takes no argument
    assert not ex.varies and len(ex.all_cases()) == 3 and check("toy_double", _double).passed


def test_the_hint_ladder_names_the_idea_first_then_the_fix_then_the_hints(toy, capsys):
    from attnlib.exercises import _hints
    toy(mistakes=[Mistake("plus_one", "Added one", "You added one instead of doubling: scale, do not shift.",
                          fn=lambda x: np.asarray(x) + 1.0, fix="Return 2 * x."),
                  Mistake("squared", "Squared", "You squared x: the map is linear.", fn=lambda x: np.asarray(x) ** 2)],
        hints=("Each entry is multiplied by the same number.", "That number is two."))
    _hints._LADDER.pop("toy_double", None)
    al.exercises.hint("toy_double")
    assert "Check your function first" in capsys.readouterr().out
    first = check("toy_double", lambda x: np.asarray(x) + 1.0)
    assert first.mistake == "plus_one" and first.fix == "" and "Return 2 * x." not in str(first)
    assert 'al.exercises.hint("toy_double")' in str(first) and "al.exercises.hint" in first._repr_html_()

    def ask():
        al.exercises.hint("toy_double")
        return capsys.readouterr().out

    step = ask()
    assert "Hint 1 of 3" in step and "Return 2 * x." in step  # level 2 first: the mistake's fix
    second = check("toy_double", lambda x: np.asarray(x) + 1.0)  # the same mistake again: the fix shows
    assert second.fix == "Return 2 * x." and "How to fix it: Return 2 * x." in str(second)
    assert "How to fix it:" in second._repr_html_()
    step = ask()
    assert "Hint 2 of 3" in step and "Each entry is multiplied by the same number." in step
    step = ask()
    assert "Hint 3 of 3" in step and "That number is two." in step
    assert "last hint" in ask()
    # a failure that matches no mistake starts at the hints; a mistake without a fix shows none
    check("toy_double", lambda x: _double(x) + 0.5)
    h = _hints.next_hint("toy_double")
    assert h.text == "Each entry is multiplied by the same number." and h.step == 1
    check("toy_double", lambda x: np.asarray(x) ** 2)
    sq = check("toy_double", lambda x: np.asarray(x) ** 2)
    assert sq.mistake == "squared" and sq.fix == ""
    assert check_solution_does_not_count("toy_double")
    assert check("toy_double", _double).passed
    assert "passed" in _hints.next_hint("toy_double").text
    assert "<div" in _hints.next_hint("toy_double")._repr_html_()


def check_solution_does_not_count(name) -> bool:
    from attnlib.exercises import _hints
    before = _hints._LADDER.get(name)
    al.exercises.check_solution(name, lambda x: np.asarray(x) ** 2)
    return _hints._LADDER.get(name) is before
