"""The checker's messages across its trust boundary, on :mod:`attnlib.runtime.wire`.

The checker has two sides (see :mod:`attnlib.exercises._judge` and
:mod:`attnlib.exercises._worker`):

- the **trusted** side (the notebook's kernel, or a grader's own process) makes the
  cases, computes the reference, compares and names the mistake;
- the **untrusted** side (the worker the checker starts, or the one a grader's sandbox
  starts) only calls the function on the inputs it receives and reports what happened.

Each message is a :class:`attnlib.runtime.wire.Message`: a JSON header whose values are
the runtime's value nodes, and the arrays they refer to (``.npy``, never pickled). No
code of the learner's runs when the trusted side reads a reply: :func:`read_reply` checks
every field it reads and raises :class:`WireError` on anything else.

A request (trusted -> untrusted, :func:`request`)::

    {"attnlib": "request", "version": 2, "id": "r…",
     "calls": [{"kind": "case", "args": [VALUE...], "kwargs": [["mask", VALUE]]},
               {"kind": "timed", "args": [...], "kwargs": [...]},    # only the time counts
               {"kind": "extra", "exercise": "tiled_attention"}],   # Exercise.extra_check(fn)
     "watch": [RULE...], "print_limit": 2000}

``RULE`` is one borrowed-answer rule (see :mod:`attnlib.exercises._watch`):
``{"name": "attnlib.softmax"}``, ``{"module": "attnlib.kernels.masks", "qualname": "causal_mask",
"when": {"align": "lower_right"}}`` or ``{"aten": "aten::_softmax"}``.

A reply (untrusted -> trusted, :func:`reply` / :func:`read_reply`)::

    {"attnlib": "reply", "version": 2, "id": "r…", "pid": 1234, "outcomes": [OUTCOME...]}

with one ``OUTCOME`` per call, in order::

    {"status": "value" | "raised" | "signature",
     "value": VALUE,                      # status "value" (for "timed": none)
     "raised": {"type": "ValueError", "text": "...", "kinds": ["recursion", ...]},
     "signature": "text of the TypeError",   # the function cannot take these arguments
     "function": "softmax",              # the function's __name__, for messages
     "printed": "...", "printed_bytes": 123,
     "mutated": false,
     "borrowed": [{"rule": 0, "name": "torch.softmax"}],  # library answers it called
     "computed": [{"name": "attnlib.…", "value": VALUE}], # arrays attnlib computed for it
     "tampered": null | "sys.setprofile",                  # it switched the watch off
     "seconds": 0.01, "cpu": 0.01,
     "extra": null | "text"}              # kind "extra": what extra_check returned

The reply's ``pid`` and ``id`` let a reader ignore stray messages: only the process it
started may answer, and only to the request it sent. The untrusted side cannot be made
honest by validation (it could claim anything about itself); what validation guarantees is
that reading a reply never runs its code and never breaks the trusted side. The values it
claims are judged against the reference on cases it has not seen before.
"""
from __future__ import annotations

import math
import os
import secrets
from dataclasses import dataclass
from typing import Any

from ..runtime.wire import (DTYPES, BFloat16Values, Message, Opaque, WireError, decode_value, encode_value,  # noqa: F401
                            text_field)

__all__ = ["WireError", "Raised", "Opaque", "Evidence", "Outcome", "BFloat16Values", "DTYPES", "Request",
           "request", "read_request", "reply", "read_reply", "new_id", "outcome_node"]

VERSION = 2
_KINDS = ("recursion", "not_implemented", "memory", "attribute", "type", "keyboard")
_STATUSES = ("value", "raised", "signature")
_FAILURES = ("timeout", "cpu", "crashed", "garbled", "unsendable")


# --------------------------------------------------------------------------- records

@dataclass(frozen=True)
class Raised:
    """An exception raised by the learner's code, as plain data: its type's name, the
    first part of its text and what kind of error it is (``kinds``: "recursion",
    "not_implemented", "memory", "attribute", "type", "keyboard")."""

    type_name: str
    text: str = ""
    kinds: frozenset = frozenset()

    @classmethod
    def of(cls, exc: BaseException) -> "Raised":
        """Record ``exc`` (untrusted side). Its ``__str__`` is called once; one that
        raises is noted, not propagated."""
        try:
            text = str(exc)
        except BaseException as inner:  # noqa: BLE001 - the learner's __str__ may raise anything
            text = f"<its message could not be shown: __str__ raised {type(inner).__name__}>"
        if not isinstance(text, str):
            text = "<its message is not text>"
        kinds = {k for k, t in (("recursion", RecursionError), ("not_implemented", NotImplementedError),
                                ("memory", MemoryError), ("attribute", AttributeError), ("type", TypeError),
                                ("keyboard", KeyboardInterrupt)) if isinstance(exc, t)}
        name = type(exc).__name__
        return cls(name if isinstance(name, str) else "Exception", text[:4000], frozenset(kinds))


@dataclass(frozen=True)
class Evidence:
    """A borrowed answer seen while the function ran: the index of the rule it matched
    (in the request's ``watch`` list) and the name it was called by."""

    rule: int
    name: str


@dataclass
class Outcome:
    """What one call did. ``status``:

    - ``"value"``: it returned ``value`` (decoded plain data);
    - ``"raised"``: it raised (``raised``);
    - ``"signature"``: it cannot be called with these arguments (``text``);
    - set by the trusted side's transport, never read from a reply: ``"timeout"`` (past
      the clock's backstop), ``"cpu"`` (past the CPU-time limit), ``"crashed"`` (the
      process died; ``how`` is ``("signal", n)`` or ``("exit", n)``), ``"garbled"`` (the
      reply broke the protocol; ``text`` says how) and ``"unsendable"`` (the function could
      not be sent to a spawned process; ``text`` says why).

    ``printed`` is the start of what it wrote to stdout / stderr (``printed_bytes`` in all),
    ``mutated`` whether it changed its inputs, ``borrowed`` the library answers it called,
    ``computed`` the arrays attnlib's own functions returned to it (``(name, value)``),
    ``tampered`` what it did to switch the watch off, ``extra`` what ``extra_check``
    returned, ``seconds`` / ``cpu`` its clock and CPU time (``cpu`` measured by the trusted
    side where it can).
    """

    status: str
    value: Any = None
    raised: Raised | None = None
    text: str = ""
    function: str = ""
    printed: str = ""
    printed_bytes: int = 0
    mutated: bool = False
    borrowed: tuple = ()
    computed: tuple = ()
    tampered: str | None = None
    extra: str | None = None
    seconds: float = 0.0
    cpu: float | None = None
    how: tuple | None = None

    @classmethod
    def failure(cls, status: str, *, text: str = "", how: tuple | None = None, seconds: float = 0.0,
                cpu: float | None = None) -> "Outcome":
        """An outcome made by the transport: timeout, cpu, crashed, garbled, unsendable."""
        if status not in _FAILURES:
            raise ValueError(f"status={status!r} is not a transport failure")
        return cls(status, text=text, how=how, seconds=seconds, cpu=cpu)

    @property
    def ended(self) -> bool:
        """Whether the call did not complete (the process was stopped or broke)."""
        return self.status in _FAILURES


# --------------------------------------------------------------------------- requests

def new_id() -> str:
    """A fresh request id (random: a reply to an earlier request cannot match)."""
    return "r" + secrets.token_hex(8)


def _checked(msg: Any, what: str) -> dict:
    header = msg.header if isinstance(msg, Message) else None
    if not isinstance(header, dict) or header.get("attnlib") != what or header.get("version") != VERSION:
        raise WireError(f"not an attnlib {what} of version {VERSION}")
    return header


def request(request_id: str, calls: list[dict], watch: list[dict] = (), *, print_limit: int = 2000) -> Message:
    """A request (trusted side). ``calls`` are dicts with ``kind`` ("case", "timed" or
    "extra"), ``args`` (a list of values) and ``kwargs`` (a dict), or ``exercise`` (the name
    whose ``extra_check`` to run) for kind "extra"."""
    arrays: list = []
    out = []
    for c in calls:
        kind = c["kind"]
        if kind == "extra":
            out.append({"kind": kind, "exercise": str(c["exercise"])})
            continue
        out.append({"kind": kind, "args": [encode_value(a, arrays) for a in c.get("args", ())],
                    "kwargs": [[str(k), encode_value(v, arrays)] for k, v in dict(c.get("kwargs", {})).items()]})
    header = {"attnlib": "request", "version": VERSION, "id": str(request_id), "calls": out,
              "watch": list(watch), "print_limit": int(print_limit)}
    return Message(header, tuple(arrays))


@dataclass
class Request:
    """A request as the untrusted side reads it: :meth:`inputs` decodes a call's ``args``
    and ``kwargs`` (fresh arrays each time)."""

    id: str
    calls: list
    watch: list
    print_limit: int = 2000
    arrays: tuple = ()

    def inputs(self, call: dict) -> tuple[tuple, dict]:
        args = tuple(decode_value(a, self.arrays) for a in call.get("args", ()))
        kwargs = {k: decode_value(v, self.arrays) for k, v in call.get("kwargs", ())}
        return args, kwargs


def read_request(msg: Message) -> Request:
    """Read a request (untrusted side), checking its form."""
    header = _checked(msg, "request")
    calls = header.get("calls")
    if not isinstance(calls, list):
        raise WireError("calls must be a list")
    for c in calls:
        if not isinstance(c, dict) or c.get("kind") not in ("case", "timed", "extra"):
            raise WireError("each call needs a kind: case, timed or extra")
        if c["kind"] == "extra" and not isinstance(c.get("exercise"), str):
            raise WireError("an extra call names its exercise")
        kw = c.get("kwargs", [])
        if not isinstance(c.get("args", []), list) or not isinstance(kw, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in kw):
            raise WireError("args must be a list and kwargs a list of [name, value] pairs")
    watch = header.get("watch", [])
    if not isinstance(watch, list) or not all(isinstance(r, dict) for r in watch):
        raise WireError("watch must be a list of rules")
    limit = header.get("print_limit", 2000)
    if type(limit) is not int or not 0 <= limit <= 10**6:
        raise WireError("print_limit must be an int")
    return Request(text_field(header, "id", 200), calls, watch, limit, msg.arrays)


# --------------------------------------------------------------------------- replies

def outcome_node(out: Outcome, arrays: list, value: Any = None) -> dict:
    """An :class:`Outcome` as a reply node (untrusted side); ``value`` is what the call
    returned (encoded into the reply's ``arrays``)."""
    node = {"status": out.status, "function": out.function[:200], "printed": out.printed,
            "printed_bytes": int(out.printed_bytes), "mutated": bool(out.mutated),
            "borrowed": [{"rule": int(e.rule), "name": str(e.name)[:200]} for e in out.borrowed[:8]],
            "computed": [{"name": str(n)[:200], "value": encode_value(v, arrays)} for n, v in out.computed[:4]],
            "tampered": None if out.tampered is None else str(out.tampered)[:200],
            "seconds": float(out.seconds), "cpu": None if out.cpu is None else float(out.cpu),
            "extra": out.extra}
    if out.status == "value":
        node["value"] = encode_value(value, arrays)
    elif out.status == "raised" and out.raised is not None:
        node["raised"] = {"type": out.raised.type_name, "text": out.raised.text, "kinds": sorted(out.raised.kinds)}
    elif out.status == "signature":
        node["signature"] = out.text[:2000]
    return node


def reply(request_id: str, nodes: list[dict], arrays: list, pid: int | None = None) -> Message:
    """A reply (untrusted side): ``nodes`` from :func:`outcome_node`, which filled ``arrays``."""
    header = {"attnlib": "reply", "version": VERSION, "id": str(request_id),
              "pid": os.getpid() if pid is None else int(pid), "outcomes": nodes}
    return Message(header, tuple(arrays))


def _number(node: dict, key: str, default=None, *, optional: bool = False):
    v = node.get(key, default)
    if v is None and optional:
        return None
    if type(v) not in (int, float) or not math.isfinite(v) or v < 0:
        raise WireError(f"{key} must be a non-negative number")
    return float(v)


def _outcome(node: Any, n_rules: int, arrays: tuple) -> Outcome:
    if not isinstance(node, dict) or node.get("status") not in _STATUSES:
        raise WireError(f"each outcome needs a status: {', '.join(_STATUSES)}")
    status = node["status"]
    printed = text_field(node, "printed", 100_000) if "printed" in node else ""
    pb = node.get("printed_bytes", len(printed))
    if type(pb) is not int or pb < 0:
        raise WireError("printed_bytes must be a non-negative int")
    if type(node.get("mutated", False)) is not bool:
        raise WireError("mutated must be true or false")
    borrowed = node.get("borrowed", [])
    if not isinstance(borrowed, list) or len(borrowed) > 64:
        raise WireError("borrowed must be a short list")
    evidence = []
    for e in borrowed:
        if not isinstance(e, dict) or type(e.get("rule")) is not int or not 0 <= e["rule"] < n_rules:
            raise WireError("each borrowed entry names a rule of the request")
        evidence.append(Evidence(e["rule"], text_field(e, "name", 200)))
    computed = node.get("computed", [])
    if not isinstance(computed, list) or len(computed) > 4 or not all(isinstance(c, dict) for c in computed):
        raise WireError("computed must be a list of at most 4 named values")
    computed = tuple((text_field(c, "name", 200), decode_value(c.get("value"), arrays)) for c in computed)
    tampered = node.get("tampered")
    if tampered is not None and (not isinstance(tampered, str) or len(tampered) > 200):
        raise WireError("tampered must be null or short text")
    extra = node.get("extra")
    if extra is not None and (not isinstance(extra, str) or len(extra) > 10_000):
        raise WireError("extra must be null or text")
    out = Outcome(status, printed=printed, printed_bytes=pb, mutated=node.get("mutated", False),
                  borrowed=tuple(evidence), computed=computed, tampered=tampered, extra=extra,
                  function=text_field(node, "function", 200) if "function" in node else "",
                  seconds=_number(node, "seconds", 0.0), cpu=_number(node, "cpu", None, optional=True))
    if status == "value":
        out.value = decode_value(node.get("value"), arrays)
    elif status == "raised":
        r = node.get("raised")
        if not isinstance(r, dict):
            raise WireError("a raised outcome needs its exception")
        kinds = r.get("kinds", [])
        if not isinstance(kinds, list) or not all(k in _KINDS for k in kinds):
            raise WireError(f"exception kinds must be among {', '.join(_KINDS)}")
        out.raised = Raised(text_field(r, "type", 200), text_field(r, "text", 10_000), frozenset(kinds))
    else:
        out.text = text_field(node, "signature", 2000)
    return out


def read_reply(msg: Message, request_id: str, n_calls: int, n_rules: int, *, pid: int | None = None) -> list[Outcome]:
    """Read and check a reply (trusted side): it must answer request ``request_id`` with
    ``n_calls`` outcomes whose evidence names rules ``0 .. n_rules - 1`` (and come from
    process ``pid`` when given). Raises :class:`WireError` otherwise."""
    header = _checked(msg, "reply")
    if header.get("id") != request_id:
        raise WireError("the reply answers another request")
    if pid is not None and header.get("pid") != pid:
        raise WireError("the reply comes from another process")
    outcomes = header.get("outcomes")
    if not isinstance(outcomes, list) or len(outcomes) != n_calls:
        raise WireError(f"the reply must hold {n_calls} outcomes")
    return [_outcome(o, n_rules, msg.arrays) for o in outcomes]


def answers(msg: Message, request_id: str, pid: int | None) -> bool:
    """Whether ``msg`` is the reply of process ``pid`` to ``request_id`` (its header read as
    data; the rest is checked by :func:`read_reply`)."""
    h = msg.header
    return h.get("attnlib") == "reply" and h.get("id") == request_id and (pid is None or h.get("pid") == pid)
