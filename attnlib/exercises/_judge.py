"""The trusted side of a check: make the cases, ask the untrusted side to run the
function on them, and judge what comes back.

API (for :func:`attnlib.exercises.check` and for a grader)::

    from attnlib.exercises._judge import Plan
    plan = Plan(EXERCISES["softmax"], seed=1234)        # fresh cases from this seed
    while (req := plan.next_request()) is not None:
        # run the function on the untrusted side: the checker's Worker, or a grader's
        # sandboxed one, with  attnlib.exercises._worker.run_cases(fn, req.message)
        reply = transport(req.message, limit=req.limit)
        plan.take(req, reply)     # the reply Message, or _wire.Outcome.failure("timeout"), ...
    result = plan.result()        # a CheckResult; result.details["seed"] replays it

``Request`` holds ``id``, ``message`` (an :class:`attnlib.runtime.wire.Message`), ``limit``
(CPU seconds the transport must enforce by ending the untrusted side, with the clock as a
backstop: :mod:`attnlib.runtime.limits`) and ``stage`` ("cases", "perf" or "extra").
``take`` also accepts ``cpu=`` (the CPU seconds the transport measured itself; then the
reply's own claim is ignored). A reply that does not follow the protocol is judged as a
garbled answer, never as the checker's failure.

What the trusted side does, and only it: make the cases (a fresh
``np.random.Generator`` per check, seed recorded), compute the reference (lazily, after
the untrusted side started), compare at the exercise's tolerance, run the catalogued
mistakes on the same cases to name the one the learner made, and word the verdict. The
untrusted side's report is used only as data: values, what was raised or printed, whether
inputs changed, which borrowed-answer rules fired (:mod:`._watch`), which arrays attnlib's
own functions computed for the function (one that gave the reference's answer on every
case is a borrowed answer, whatever its name), its times.

``batch=True`` sends all cases in one request (fewer round trips; a time-out then names
no single case); by default each case is its own request.
"""
from __future__ import annotations

import ast
import os
import secrets
import signal
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..i18n import N_, _, join_sentences
from ..runtime.limits import backstop
from ..runtime.wire import Message
from . import _wire
from ._compare import _compare, _kind_of_value, _shapes, _snapshot, _to_numpy
from ._hints import displayed_hint, idea_of_hint
from ._model import CheckResult
from ._rules import _display_name, parse_rule  # noqa: F401 - parse_rule: part of this module's API

__all__ = ["Plan", "Request", "parse_rule", "ANSWER_KEY_RULES"]

# The course's answer key: every chapter's exercise module (references, mistakes, helpers).
ANSWER_KEY_RULES = ({"module": "attnlib.exercises.catalogue.*", "qualname": "*", "answer_key": True},)
_ALLOW_ANSWER_KEY = "ATTNLIB_CHECK_ALLOW_ANSWER_KEY"


@dataclass
class Request:
    """One request to the untrusted side (see the module docstring)."""

    id: str
    message: Message
    stage: str
    calls: list
    limit: float                 # CPU seconds
    wall: float = 0.0            # clock seconds (the backstop: limits.backstop(limit) or less)
    issued: float = 0.0          # time.perf_counter() when it was made


class Plan:
    """One check of one exercise, on the trusted side (see the module docstring).

    Args:
        ex: the :class:`~attnlib.exercises.Exercise`.
        seed: seed of this check's cases (default: a fresh random one; recorded in the
            result's ``details["seed"]``).
        answer_key: whether calling the course's own answers (the references and
            mistakes of the exercise modules) is allowed. Default: only when the
            environment variable ``ATTNLIB_CHECK_ALLOW_ANSWER_KEY=1`` is set (the
            course's own tests check its references through the checker).
        batch: send all cases in one request.
    """

    def __init__(self, ex, seed: int | None = None, *, answer_key: bool | None = None, batch: bool = False):
        self.ex = ex
        self.seed = int(seed) if seed is not None else secrets.randbits(63)
        self.cases = ex.all_cases(self.seed)
        self.batch = batch
        if answer_key is None:
            answer_key = os.environ.get(_ALLOW_ANSWER_KEY, "") not in ("", "0")
        self.rules, self.rule_mistake = self._rules(answer_key)
        self.stage = "cases"
        self.next_case = 0
        self.spent = 0.0             # CPU seconds the cases' calls have taken so far (see take)
        self.spent_wall = 0.0        # and clock seconds
        self.computed: dict[str, list] = {}   # attnlib function -> [(case, gave the reference's answer)]
        self.outcomes: list = []
        self.failures: list = []
        self.printed: list[str] = []
        self.final = None
        self.note_seen = False
        self.want_cache: dict[int, Any] = {}

    # -- rules
    def _rules(self, answer_key: bool):
        rules, mistake_of = [], {}
        for text in self.ex.shortcuts():
            rules.append(parse_rule(text))
        for m in self.ex.mistakes:
            for text in getattr(m, "calls", ()) or ():
                mistake_of[len(rules)] = m.key
                rules.append(parse_rule(text))
        own = {"module": "attnlib*", "qualname": self.ex.name}
        if own not in rules:
            rules.append(own)
        if not answer_key:
            rules += [dict(r) for r in ANSWER_KEY_RULES]
        return rules, mistake_of

    def _wire_rules(self) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "answer_key"} for r in self.rules]

    # -- requests
    def next_request(self) -> Request | None:
        """The next request to send, or None when the verdict is known."""
        if self.final is not None:
            return None
        ex = self.ex
        if self.stage == "cases":
            budget = self.budget()
            if self.batch:
                idx = list(range(self.next_case, len(self.cases)))
                limit = budget
            else:
                idx = [self.next_case]
                limit = min(ex.time_limit, max(budget - self.spent, 0.05))
            wall = min(backstop(limit), max(backstop(budget) - self.spent_wall, 0.05))
            calls = [{"kind": "case", "args": self.cases[i].args, "kwargs": self.cases[i].kwargs} for i in idx]
            return self._request("cases", calls, [("case", i) for i in idx], limit, wall)
        if self.stage == "perf":
            c = ex.perf_case
            return self._request("perf", [{"kind": "timed", "args": c.args, "kwargs": c.kwargs}], [("perf", 0)],
                                 ex.slow_limit)
        if self.stage == "extra":
            return self._request("extra", [{"kind": "extra", "exercise": ex.name}], [("extra", 0)],
                                 2 * ex.time_limit + ex.slow_limit)
        return None

    def _computes(self, seen: list) -> bool:
        """Whether a function of attnlib's gave the reference's answer on every case (then
        it computes the exercise; a building block that agrees with the answer on some
        cases only, such as the causal mask where L = S, does not), and the cases have two
        different answers at least (a helper that returns the same number each time is
        not the answer)."""
        right = {i for i, ok in seen if ok}
        if len(right) < len(self.cases) or not all(ok for _i, ok in seen):
            return False
        answers = {(np.shape(w), np.asarray(w).tobytes()) for w in (self._want(i) for i in right)}
        return len(answers) >= 2 or len(self.cases) == 1

    def budget(self) -> float:
        ex = self.ex
        return ex.total_time_limit if ex.total_time_limit is not None else 3 * ex.time_limit

    def _request(self, stage, calls, what, limit, wall=None) -> Request:
        rid = _wire.new_id()
        message = _wire.request(rid, calls, self._wire_rules())
        wall = backstop(limit) if wall is None else wall
        return Request(rid, message, stage, what, float(limit), float(wall), time.perf_counter())

    # -- replies
    def take(self, req: Request, reply: Any, *, cpu: float | None = None, pid: int | None = None,
             seconds: float | None = None) -> None:
        """Judge the reply to ``req``: its message, or a failure Outcome of the transport.
        ``cpu``: CPU seconds the transport measured, counted against the cases' total time
        (default: the clock time); ``pid``: the process that must have sent it; ``seconds``:
        the clock seconds it measured (default: the clock time since ``req`` was made)."""
        if req.stage == "cases":
            wall = seconds if seconds is not None else time.perf_counter() - req.issued
            self.spent += cpu if cpu is not None else wall
            self.spent_wall += wall
        if isinstance(reply, _wire.Outcome):
            outcomes = [reply]
        else:
            try:
                outcomes = _wire.read_reply(reply, req.id, len(req.calls), len(self.rules), pid=pid)
            except _wire.WireError as exc:
                outcomes = [_wire.Outcome.failure("garbled", text=str(exc))]
        if cpu is not None and outcomes and not outcomes[-1].ended:
            outcomes[-1].cpu = cpu
        for (kind, i), out in zip(req.calls, outcomes):
            if self.final is not None:
                break
            self.printed.append(out.printed)
            if kind == "case":
                self.final = self._take_case(i, out, req)
                self.next_case = i + 1
            elif kind == "perf":
                self.final = self._take_perf(out, req)
            else:
                self.final = self._take_extra(out, req)
        if self.final is None and len(outcomes) < len(req.calls):  # a failure ended the batch
            self.final = self._fail(_("The checker lost track of your function's answers."), "garbled")
        if self.final is None:
            self._advance()

    def _advance(self) -> None:
        ex = self.ex
        if self.stage == "cases" and self.next_case < len(self.cases):
            return
        if self.stage == "cases":
            if self.failures:
                self.final = self._diagnose()
                return
            computed = next((name for name, seen in self.computed.items() if self._computes(seen)), None)
            if computed is not None:  # attnlib's own function gave the answer on every case
                shown = _display_name(computed)
                self.final = self._library_shortcut(shown, self._where(self.computed[computed][0][0]))
                return
            self.stage = "perf"
            if ex.perf_case is not None:
                return
        if self.stage == "perf":
            self.stage = "extra"
            if ex.extra_check is not None:
                return
        self.stage = "done"

    def result(self):
        """The verdict (a :class:`~attnlib.exercises.CheckResult`)."""

        r = self.final
        if r is None:
            if self.stage != "done":
                r = self._fail(_("The checker lost track of your function's answers."), "garbled")
            else:
                fast = _(" and it is fast enough") if self.ex.perf_case is not None else ""
                r = CheckResult(self.ex.name, "passed", _("All {n} cases match the reference{fast}{note}.").format(
                    n=len(self.cases), fast=fast, note=""), details={"problem": None})
        r.details.setdefault("seed", self.seed)
        printed = "".join(self.printed).strip("\n")
        if printed:
            lines = printed.splitlines()
            r.details["printed"] = ("\n".join(line[:200] for line in lines[:8])
                                    + ("\n..." if len(lines) > 8 else ""))
        return r

    # -- judging one outcome
    def _where(self, i: int) -> str:
        cases = self.cases
        case = cases[i]
        return _("case {i} of {n} ({label}; inputs {shapes})").format(
            i=i + 1, n=len(cases), label=_(case.label), shapes=_shapes(case))

    def _ended(self, out: _wire.Outcome, where: str, req: Request, stage: str, i: int | None = None):
        """The verdict for a call that did not complete, broke the protocol, switched the
        watch off or borrowed an answer (the same for every stage); None otherwise."""
        ex = self.ex
        if out.status in ("timeout", "cpu"):
            limit = req.limit
            if stage == "extra":
                return self._fail(_("Your function is right on the small cases, but the extra test (which runs it on "
                                    "a larger input) took longer than {limit} s, so the checker stopped it. Look for a "
                                    "loop that only ends for small inputs, or Python loops over single numbers."
                                    ).format(limit=f"{limit:g}"), "timeout")
            if stage == "perf":
                return self._slow()
            budget = self.budget()
            if self.batch:
                return self._fail(_("Your function took more than {budget} s for the {n} cases and was stopped. Look "
                                    "for an infinite loop, or replace Python loops over single numbers with array "
                                    "operations.").format(budget=f"{budget:g}", n=len(self.cases)),
                                  "timeout", idea_only=True)
            if limit >= ex.time_limit:
                what = _("ran longer than {limit} s on {where}").format(limit=f"{ex.time_limit:g}", where=where)
            else:
                what = _("took more than {budget} s for the first {n} cases (stopped on {where})").format(
                    budget=f"{budget:g}", n=i + 1, where=where)
            return self._fail(_("Your function {what} and was stopped. Look for an infinite loop, or replace "
                                "Python loops over single numbers with array operations.").format(what=what),
                              "timeout", case=i, idea_only=True)
        if out.status == "crashed":
            return self._fail(_crash_message(out, where), "crashed", hint=False)
        if out.status == "garbled":
            return self._fail(_("The checker could not read your function's answer back from the separate process "
                                "it ran in, on {where} ({why}). Something in your function wrote to the checker's "
                                "own channel, or started a process that did.").format(where=where, why=out.text),
                              "garbled", hint=False)
        if out.status == "unsendable":
            from ..runtime.processes import fork_unsafe_reason
            reason = _(fork_unsafe_reason() or N_("fork is unavailable"))
            return self._fail(_("Your function could not be sent to the separate process the checker runs it in "
                                "({why}); here the checker cannot fork ({reason}). Keep what your function uses "
                                "(helper functions, numbers, arrays) in the notebook, and no open files, locks or "
                                "generators.").format(why=out.text, reason=reason), "unsendable", hint=False)
        if out.tampered:
            return self._fail(_("Your function switched off the checker's watch for borrowed answers ({what}, on "
                                "{where}), so it cannot be checked. Remove that and check again.").format(
                                    what=out.tampered, where=where), "tampered", mistake="tampered", hint=False)
        if out.borrowed:
            return self._borrowed(out.borrowed[0], where)
        if out.status == "raised" and stage != "cases":  # (a case's exception is judged with the others)
            out.value, c = out.raised, ex.perf_case
            if stage == "perf":
                text = _("Your function passes the small cases but raised {error} on a larger input "
                         "({shapes}).").format(error=_fmt_exc(out.value), shapes=_shapes(c))
            else:
                text = _("The values are right, but an extra test failed: your function raised {error}."
                         ).format(error=_fmt_exc(out.value))
            return self._fail(text + _explain_exc(out.value), "raised" if stage == "perf" else "extra")
        return None

    def _borrowed(self, ev: _wire.Evidence, where: str):
        ex = self.ex
        rule = self.rules[ev.rule]
        shown = _display_name(ev.name)
        key = self.rule_mistake.get(ev.rule)
        if key is not None:
            m = ex.mistake(key)
            return self._fail(_mistake_text(m), "borrowed", mistake=m.key, hint=False, called=shown)
        if rule.get("answer_key"):
            return self._fail(_("Your function calls {name} (on {where}): that is the course's own answer to an "
                                "exercise, not yours, so it does not count. Write {exercise} yourself, from the "
                                "chapter's ideas.").format(name=shown, where=where, exercise=ex.name),
                              "forbidden", mistake="answer_key", hint=False, called=shown)
        return self._library_shortcut(shown, where)

    def _library_shortcut(self, shown: str, where: str):
        return self._fail(_("Your function calls {called} (on {where}): that is the library's own answer, and "
                            "the exercise is to write {name} yourself, so it does not count. Build it from basic "
                            "array operations (what the chapter shows) instead of calling a ready-made version."
                            ).format(called=shown, where=where, name=self.ex.name),
                          "forbidden", mistake="library_shortcut", hint=False, called=shown)

    def _take_case(self, i: int, out: _wire.Outcome, req: Request):
        ex, where = self.ex, self._where(i)
        if out.status == "signature":
            fname = out.function or "fn"
            case = self.cases[i]
            shown = ", ".join([f"<{type(a).__name__}>" for a in case.args] + [f"{k}=..." for k in case.kwargs])
            exc = out.text
            return self._fail(_("Your function cannot be called the way the checker calls it, {call}: {error}. "
                                "Keep the stub's signature: `{signature}`.").format(
                call=f"{fname}({shown})", error=exc, signature=ex.signature()), "signature", hint=False)
        if out.status == "raised" and "not_implemented" in out.raised.kinds and i == 0:
                # the title already says "not attempted": the message says why and what to do
                return CheckResult(ex.name, "not_attempted", _("The function still raises NotImplementedError: "
                                                            "replace `raise NotImplementedError` with your code."),
                               details={"problem": "not_attempted"})
        ended = self._ended(out, where, req, "cases", i)
        if ended is not None:
            return ended
        if out.mutated:
            m = next((m for m in ex.mistakes if m.kind == "mutates"), None)
            msg = (_mistake_text(m) if m else _("Your function changed its input in place. Work on "
                   "a copy (e.g. x = x - m instead of x -= m) so the caller's array is left unchanged."))
            return self._fail(msg + _(" (Seen on {where}.)").format(where=where), "mutates",
                              mistake=m.key if m else "mutates_input", hint=False, case=i)
        if out.status == "raised":
            value = out.raised
            self.outcomes.append(("raised", value))
            self.failures.append((i, _("Your function raised {error} on {where}.").format(error=_fmt_exc(value), where=where) + _explain_exc(value),
                                  "raised"))
            return None
        got = _to_numpy(out.value)
        self.outcomes.append(("value", got))
        if got is None:
            self.failures.append((i, _("Your function returned None on {where}. Did you forget the `return` "
                                       "statement (in every branch, e.g. with and without a mask)?").format(where=where), "none"))
            return None
        same, why, problem = _compare(got, self._want(i), ex)
        for name, value in out.computed:  # what attnlib's own functions returned, of the answer's shape
            self.computed.setdefault(name, []).append(
                (i, same and _compare(_to_numpy(value), self._want(i), ex)[0]))
        if not same:
            self.failures.append((i, _("Wrong result on {where}: {why}.").format(where=where, why=why), problem))
        return None

    def _want(self, i: int):
        if i not in self.want_cache:
            case = self.cases[i]
            self.want_cache[i] = _to_numpy(self.ex.reference(*_snapshot(case.args), **_snapshot(case.kwargs)))
        return self.want_cache[i]

    def _take_perf(self, out: _wire.Outcome, req: Request):
        ex = self.ex
        c = ex.perf_case
        where = _("a larger input ({shapes})").format(shapes=_shapes(c))
        ended = self._ended(out, where, req, "perf")
        if ended is not None:
            return ended
        if out.cpu is not None and out.cpu > ex.slow_limit:
            return self._slow()
        return None

    def _slow(self):
        ex = self.ex
        c = ex.perf_case
        slow = next((m for m in ex.mistakes if m.kind == "slow"), None)
        msg = (_mistake_text(slow) if slow else
               _("Correct, but far too slow: use array operations instead of Python loops over numbers."))
        return self._fail(msg + _(" (On inputs {shapes} it used over {limit} s of CPU time; the reference takes "
                                  "milliseconds.)").format(shapes=_shapes(c), limit=f"{ex.slow_limit:g}"), "slow",
                          mistake=slow.key if slow else "too_slow", hint=False)

    def _take_extra(self, out: _wire.Outcome, req: Request):
        ex = self.ex
        ended = self._ended(out, _("the extra test's input"), req, "extra")
        if ended is not None:
            return ended
        problem = out.extra
        if not problem:
            return None
        m = next((m for m in ex.mistakes if m.key == problem), None)
        if m is not None:
            return self._fail(_mistake_text(m), "mistake", mistake=m.key, hint=False)
        return self._fail(_(str(problem)), "extra", hint=False)

    # -- diagnosis
    def _diagnose(self):
        """Name the catalogued mistake that explains the outcomes, else the first failure."""
        ex, cases = self.ex, self.cases
        some_value = any(state == "value" for state, _v in self.outcomes)  # a mistake must match a value
        for m in ex.mistakes if some_value else ():
            if m.kind == "output" and _reproduces(m, self.outcomes, cases, ex):
                return self._fail(_mistake_text(m), "mistake", mistake=m.key, hint=False)
        failures = self.failures
        i, msg, problem = failures[0]
        tail = (_(" {failing} of {n} cases fail.").format(failing=len(failures), n=len(cases)) if len(failures) > 1 else
                _(" The other {others} cases pass.").format(others=len(cases) - 1) if len(cases) > 1 else "")
        form = problem in ("none", "type", "dtype")  # about the form of the answer, not the idea
        return self._fail(msg + tail, problem, case=i, hint=not form)

    def _fail(self, message: str, problem: str, *, mistake: str | None = None, hint: bool = True,
              idea_only: bool = False, **details):
        """A failed result; ``hint``: show the exercise's idea (or, unless ``idea_only``,
        the generic "work through the case by hand" line when it has none)."""

        shown = ""
        if hint:
            shown = idea_of_hint(self.ex.hint) if idea_only else displayed_hint(self.ex.hint)
        details = {k: v for k, v in details.items() if v is not None}
        return CheckResult(self.ex.name, "failed", message, hint=shown, mistake=mistake,
                           details={"problem": problem, **details})


# --------------------------------------------------------------------------- messages

def _mistake_text(m) -> str:
    """A catalogued mistake as the checker reports it: its title, then its message."""
    return join_sentences(_(m.title), _(m.message))


def _fmt_exc(exc) -> str:
    """'Type: first line of the message' for an exception or a :class:`._wire.Raised`."""
    if not isinstance(exc, _wire.Raised):
        exc = _wire.Raised.of(exc)
    text = exc.text.strip()
    text = text.splitlines()[0] if text else ""
    if len(text) > 300:
        text = text[:297] + "..."
    return f"{exc.type_name}: {text}" if text else exc.type_name


# torch methods and keywords that NumPy arrays do not have (the checker passes NumPy arrays)
_TORCH_ONLY_ATTRS = {"masked_fill", "masked_fill_", "softmax", "log_softmax", "unsqueeze", "squeeze_", "view",
                     "permute", "contiguous", "float", "double", "long", "bool", "numel", "dim", "size", "expand",
                     "repeat_interleave", "transpose_", "matmul", "exp_", "add_", "mul_", "div_", "sub_", "tril",
                     "triu", "masked_select", "clamp", "narrow", "detach", "item_", "new_zeros", "new_ones",
                     "new_full", "type_as", "to", "cpu", "cuda", "mT", "logsumexp", "amax", "amin", "flip",
                     "roll_", "gather", "scatter", "index_select", "chunk", "split_", "unbind", "masked_scatter",
                     "expand_as", "view_as", "reshape_as", "t_", "mm", "bmm", "baddbmm", "isinf_", "nan_to_num_"}
_TORCH_KEYWORDS = ("dim", "dim0", "dim1", "dim2", "keepdim", "dtype=torch", "device")


def _torch_style(exc: _wire.Raised) -> str:
    """The torch-only name in the error, or '' (``x.masked_fill`` on an ndarray,
    ``.diagonal(dim1=...)``, ``.sum(dim=...)``)."""
    import re

    text = exc.text
    m = re.search(r"'numpy\.ndarray' object has no attribute '(\w+)'", text)
    if m and m.group(1) in _TORCH_ONLY_ATTRS:
        return m.group(1)
    m = (re.search(r"(?:unexpected|invalid) keyword argument '(\w+)'", text)
         or re.search(r"'(\w+)' is an invalid keyword argument", text))
    if m and m.group(1) in _TORCH_KEYWORDS and ("type" in exc.kinds or exc.type_name == "TypeError"):
        return f"{m.group(1)}="
    return ""


def _explain_exc(exc) -> str:
    """A sentence that helps with common errors (empty when there is nothing to add)."""
    if not isinstance(exc, _wire.Raised):
        exc = _wire.Raised.of(exc)
    text = exc.text
    if "recursion" in exc.kinds:
        return _(" Your function calls itself without end. In a notebook this often happens when a "
                  "helper has the same name as your function (e.g. your softmax calls softmax): rename one. "
                  "(The checker keeps Python's recursion limit while your function runs.)")
    style = _torch_style(exc)
    if style:
        return _(" That is PyTorch's way to write it ({name}), but the checker passes NumPy arrays: use NumPy's "
                 "names (axis= and keepdims= instead of dim= and keepdim=, np.where instead of masked_fill, "
                 "np.diagonal(w, offset, axis1, axis2) instead of w.diagonal(offset, dim1, dim2)), or convert "
                 "first: x = torch.as_tensor(x) (you may return a tensor).").format(name=style)
    if ("Tensor" in text and "ndarray" in text) or (
            "attribute" in exc.kinds and "'numpy.ndarray' object has no attribute" in text):
        return _(" The checker passes NumPy arrays. To work in PyTorch, convert first, e.g. "
                  "x = torch.as_tensor(x) (you may return a tensor).")
    if "memory" in exc.kinds or "can't allocate memory" in text or "out of memory" in text.lower():
        return _(" Your function asked for more memory than the machine has.")
    return ""


def _crash_message(out: _wire.Outcome, where: str) -> str:
    how = out.how
    if how and how[0] == "signal":
        try:
            sig = signal.Signals(how[1]).name
        except ValueError:
            sig = f"signal {how[1]}"
        why = {"SIGSEGV": N_("a segmentation fault: usually recursion so deep that the C stack overflows "
                             "(after sys.setrecursionlimit was raised) or a broken C extension call"),
               "SIGKILL": N_("it was killed from outside, most often because the machine ran out of memory"),
               "SIGABRT": N_("an abort inside a C library")}.get(sig, N_("a fatal signal"))
        what = _("was ended by {signal} ({why})").format(signal=sig, why=_(why))
    elif how and how[0] == "exit":
        what = _("exited with status {status} (os._exit or a C library ending the process)").format(status=how[1])
    else:
        what = _("ended unexpectedly")
    return _("Your function crashed the separate process the checker ran it in: it {what}, on {where}. "
             "Your notebook is not affected.").format(what=what, where=where)


def _outcome(fn, case) -> tuple[str, Any]:
    """Run one of *our* functions (a mistake) on a case: ("value", out) or ("raised", exc)."""
    try:
        return "value", _to_numpy(fn(*_snapshot(case.args), **_snapshot(case.kwargs)))
    except Exception as exc:  # noqa: BLE001 - mistakes such as weights.T @ v raise when L != S
        return "raised", exc


def _reproduces(m, outcomes: list, cases: list, ex, outcome=_outcome) -> bool:
    """Whether mistake ``m`` (or one of its variants) explains the learner's outcomes.
    ``outcome(impl, case)`` runs a mistake on a case (the catalogue tests pass a memo of
    :func:`_outcome`, so that each mistake runs once per case and seed)."""
    with np.errstate(all="ignore"):
        for impl in (m.fn, *m.variants):
            values = 0
            for (state, got), case in zip(outcomes, cases):
                mstate, mval = outcome(impl, case)
                if state != mstate:
                    break
                if state == "value":
                    if got is None or not _compare(got, mval, ex, kind=_kind_of_value(mval))[0]:
                        break
                    values += 1
            else:
                if values:
                    return True
    return False

