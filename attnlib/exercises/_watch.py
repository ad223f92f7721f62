"""What library answers a learner's function calls, seen from inside the process that runs
it (the untrusted side of :mod:`attnlib.exercises._wire`).

A borrowed answer is recognised by *what runs*, not by the name it was reached through:

- a profile hook (``sys.setprofile``, and ``threading.setprofile`` for the threads the
  function starts) sees every Python function that runs and every builtin that is called;
  a Python function is attributed to the module of the file it was written in (a code
  object from attnlib's own files counts as attnlib's wherever it runs) and to its
  qualified name, so ``from attnlib import causal_mask``, ``functools.partial``,
  ``__wrapped__`` / ``inspect.unwrap``, ``importlib.reload`` and a copied function object
  all run the same, recognised code;
- a torch ``TorchDispatchMode`` sees every ATen operator a torch answer runs, whatever
  Python name reached it (``torch.softmax``, ``Tensor.softmax``, ``torch._C.TensorBase.softmax``
  and ``torch.ops.aten.softmax.int`` all run ``aten::_softmax``).

Rules are plain data (the request's ``watch`` list), one of:

``{"name": "attnlib.softmax", "when": {...}}``
    a dotted public name, resolved here once its top module is imported: a Python function
    matches by module and qualified name, a builtin (``torch.softmax``) or a method
    descriptor (``torch.Tensor.softmax``) when it is called.
``{"module": "attnlib.kernels.masks", "qualname": "causal_mask", "when": {"align": "lower_right"}}``
    fnmatch patterns on the module and qualified name of the Python code that runs.
``{"aten": "aten::_softmax"}``
    an ATen operator (its schema name).

``when`` maps argument names to the values they must have in the call (read from the
frame at the call, so keyword, positional, default and ``functools.partial`` arguments
all count). A rule may carry a ``"label"`` used as the name reported.

**Tampering.** The function may not switch the watch off: a call of ``sys.setprofile``,
``sys.settrace``, ``threading.setprofile`` / ``settrace``, a pop of torch's dispatch-mode
stack, or a thread started with ``_thread`` directly (it would run unwatched) is reported
as ``tampered``; so is a profile hook found removed after a call that returned a value
(``lost``: a RecursionError inside the hook removes it too, so after a call that raised it
only means the call failed anyway). Code in this process can
always lie about itself (``ctypes`` can reach the interpreter); the watch makes borrowing
visible to an honest mistake and costly to a determined one, and the values must still
match the reference on cases the code has not seen.
"""
from __future__ import annotations

import contextlib
import fnmatch
import os
import sys
import threading
from typing import Any, Callable

__all__ = ["Recorder"]

_TAMPER = -1                                   # the "rule" of a tampering match
_LIBRARY_TOPS = frozenset({"torch", "attnlib", "numpy", "scipy"})
_ATTNLIB_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PY_TAMPER = {("threading", "setprofile"), ("threading", "settrace"), ("threading", "setprofile_all_threads"),
              ("threading", "settrace_all_threads"), ("torch.utils._python_dispatch", "_pop_mode"),
              ("torch.utils._python_dispatch", "_pop_mode_temporarily"),
              ("torch.utils._python_dispatch", "_disable_current_modes")}
_THREADS_OK = frozenset({"threading"})
_OWN = frozenset({"attnlib.exercises._watch", "attnlib.exercises._worker", "attnlib.exercises._wire"})         # modules that may start raw threads and set the hook


def _module_of(code, frame) -> str:
    """The module a code object belongs to: from its file for attnlib's own files (so a copy
    run with other globals is still attnlib's), else from the frame's globals."""
    path = code.co_filename
    if path.startswith(_ATTNLIB_DIR) and path.endswith(".py") and path[len(_ATTNLIB_DIR):len(_ATTNLIB_DIR) + 1] == os.sep:
        rel = path[len(_ATTNLIB_DIR) + 1:-3].replace(os.sep, ".")
        rel = rel[:-len(".__init__")] if rel.endswith(".__init__") else ("" if rel == "__init__" else rel)
        return "attnlib" + ("." + rel if rel else "")
    name = dict.get(frame.f_globals, "__name__") if isinstance(frame.f_globals, dict) else None
    return name if type(name) is str else ""


def _qualname(code) -> str:
    return getattr(code, "co_qualname", code.co_name)


def _public_name(module: str, qualname: str) -> str:
    """``attnlib.softmax`` for ``attnlib.softmax:softmax`` when the package exports it."""
    top = module.split(".")[0]
    pkg = sys.modules.get(top)
    if pkg is not None and "." not in qualname:
        obj = getattr(pkg, qualname, None)
        code = getattr(getattr(obj, "__wrapped__", obj), "__code__", None)
        if code is not None and _module_of(code, _FakeFrame(getattr(obj, "__globals__", {}))) == module:
            return f"{top}.{qualname}"
    return f"{module}.{qualname}" if module else qualname


class _FakeFrame:
    def __init__(self, g):
        self.f_globals = g


def _resolve(dotted: str):
    """The object a dotted name stands for, when its top module is imported (else None)."""
    parts = dotted.split(".")
    if parts[0] not in sys.modules:
        return None
    for i in range(len(parts), 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        obj = mod
        try:
            for p in parts[i:]:
                obj = getattr(obj, p)
        except Exception:  # noqa: BLE001 - absent in this version
            return None
        return obj
    return None


class Recorder:
    """Watches one function's calls for the rules given (see the module docstring).

    Use :meth:`watching` around each call; afterwards ``evidence`` lists
    ``(rule index, name)`` pairs and ``tampered`` what switched the watch off (or None).
    """

    def __init__(self, rules: list[dict]):
        self.rules = list(rules)
        self.exact: dict[tuple[str, str], list] = {}
        self.patterns: list = []
        self.aten: dict[str, int] = {}
        self.pending: list = []
        self.specials: dict[Any, tuple] = {}      # builtin -> (rule, name, when)
        self.methods: dict[str, list] = {}        # method name -> [(objclass, rule, name)]
        for i, r in enumerate(self.rules):
            when = r.get("when") if isinstance(r.get("when"), dict) else None
            label = r.get("label") if isinstance(r.get("label"), str) else None
            if isinstance(r.get("aten"), str):
                self.aten[r["aten"]] = i
            elif isinstance(r.get("name"), str):
                self.pending.append((i, r["name"], when, label))
            elif isinstance(r.get("module"), str):
                mod, qual = r["module"], r.get("qualname", "*")
                qual = qual if isinstance(qual, str) else "*"
                if any(c in mod + qual for c in "*?["):
                    self.patterns.append((mod, qual, i, when, label))
                else:
                    self.exact.setdefault((mod, qual), []).append((i, when, label))
        self._tamper_builtins()
        self.verdicts: dict = {}
        self.aten_cache: dict = {}
        self.evidence: list[tuple[int, str]] = []
        self.tampered: str | None = None
        self.lost = False             # the profile hook was found removed after a call
        self.active = False
        self.busy = 0
        self.entry: Any = None
        self.entry_frame = None
        self._hook_fn = self._make_hook()
        self._mode = None
        self._torch_done = False

    # -- rules
    def _tamper_builtins(self) -> None:
        for name in ("setprofile", "settrace", "_setprofileallthreads", "_settraceallthreads"):
            f = getattr(sys, name, None)
            if f is not None:
                self.specials[f] = (_TAMPER, f"sys.{name}", None)
        import _thread
        for name in ("start_new_thread", "start_new", "start_joinable_thread"):
            f = getattr(_thread, name, None)
            if f is not None:
                self.specials[f] = (_TAMPER, f"_thread.{name}", "thread")

    def _torch_specials(self) -> None:
        torch = sys.modules.get("torch")
        if self._torch_done or torch is None or not hasattr(torch, "_C"):
            return
        self._torch_done = True
        for name in ("_pop_torch_dispatch_stack", "_set_dispatch_mode", "_unset_dispatch_mode"):
            f = getattr(torch._C, name, None)
            if f is not None:
                with contextlib.suppress(TypeError):
                    self.specials[f] = (_TAMPER, f"torch._C.{name}", None)

    def resolve(self) -> None:
        """Resolve the dotted names whose module is imported by now (once each)."""
        self._torch_specials()
        left = []
        for i, dotted, when, label in self.pending:
            obj = _resolve(dotted)
            if obj is None:
                left.append((i, dotted, when, label))
                continue
            name = label or dotted
            seen = set()
            while hasattr(obj, "__wrapped__") and id(obj) not in seen:  # a decorator's wrapper
                seen.add(id(obj))
                obj = obj.__wrapped__
            code = getattr(obj, "__code__", None)
            if code is not None and hasattr(obj, "__globals__"):
                key = (_module_of(code, _FakeFrame(obj.__globals__)), _qualname(code))
                self.exact.setdefault(key, []).append((i, when, name))
            elif type(obj).__name__ == "method_descriptor" and hasattr(obj, "__objclass__"):
                self.methods.setdefault(obj.__name__, []).append((obj.__objclass__, i, name))
            else:
                with contextlib.suppress(TypeError):
                    self.specials[obj] = (i, name, when)
        self.pending = left
        self.verdicts.clear()  # (the same dict the hook holds)

    def _classify(self, code, frame) -> tuple:
        module, qual = _module_of(code, frame), _qualname(code)
        matches = list(self.exact.get((module, qual), ()))
        for mod, q, i, when, label in self.patterns:
            if fnmatch.fnmatchcase(module, mod) and fnmatch.fnmatchcase(qual, q):
                matches.append((i, when, label))
        if (module, qual) in _PY_TAMPER:
            matches.append((_TAMPER, None, f"{module}.{qual}"))
        library = module.split(".")[0] in _LIBRARY_TOPS and module not in _OWN
        v = (library, tuple(matches), module, qual)
        self.verdicts[code] = v
        return v

    # -- recording
    def _hit(self, rule: int, name: str) -> None:
        if len(self.evidence) < 8 and all(r != rule for r, _ in self.evidence):
            self.evidence.append((rule, name))

    def _tamper(self, what: str) -> None:
        if self.tampered is None:
            self.tampered = what

    @staticmethod
    def _arg_is(frame, key: str, want: Any) -> bool:
        try:
            got = frame.f_locals.get(key, _MISSING)
        except Exception:  # noqa: BLE001
            return False
        return type(got) is type(want) and got == want

    def _make_hook(self) -> Callable:
        """The profile function (a closure: it runs on every call and return of the
        learner's code, so it reads as few attributes as it can)."""
        rec, verdicts, specials, methods = self, self.verdicts, self.specials, self.methods
        classify, matched, special, hit = self._classify, self._matched, self._special, self._hit

        def hook(frame, event, arg):
            if event == "c_return" or not rec.active or rec.busy:
                return
            if event == "c_call":
                if rec.entry_frame is None:
                    rec.entry = arg
                try:
                    found = specials.get(arg)
                except TypeError:
                    return
                if found is not None:
                    special(found, frame)
                elif methods:
                    ms = methods.get(getattr(arg, "__name__", None))
                    if ms:
                        owner = getattr(arg, "__self__", None)
                        for cls, i, name in ms:
                            if isinstance(owner, cls):
                                hit(i, name)
                                break
            elif event == "call":
                code = frame.f_code
                v = verdicts.get(code)
                if v is None:
                    v = classify(code, frame)
                if v[1]:
                    matched(v, frame)
                if v[0] and rec.entry_frame is None:
                    rec.entry_frame, rec.entry = frame, code
            elif event == "return":
                if frame is rec.entry_frame:
                    rec.entry_frame = None

        return hook

    def _matched(self, v: tuple, frame) -> None:
        _lib, matches, module, qual = v
        for i, when, label in matches:
            if i == _TAMPER:
                back = frame.f_back
                caller = _module_of(back.f_code, back) if back is not None else ""
                if caller.split(".")[0] not in _LIBRARY_TOPS | _THREADS_OK:
                    self._tamper(label)
            elif when is None or all(self._arg_is(frame, k, w) for k, w in when.items()):
                name = label or _public_name(module, qual)
                if when:
                    name += "(" + ", ".join(f"{k}={w!r}" for k, w in when.items()) + ")"
                self._hit(i, name)

    def _special(self, hit: tuple, frame) -> None:
        i, name, when = hit
        if i == _TAMPER:
            caller = _module_of(frame.f_code, frame)
            if caller.split(".")[0] not in _THREADS_OK and not (when == "thread" and caller.startswith("threading")):
                self._tamper(name)
        else:
            self._hit(i, name)

    def entry_name(self) -> str:
        """The name of the outermost library function the learner's code is in now."""
        e = self.entry
        if e is None:
            return ""
        if hasattr(e, "co_filename"):
            return _public_name(self.verdicts.get(e, (None, None, ""))[2], _qualname(e))
        return _builtin_name(e)

    def aten_op(self, func) -> None:
        """Called by the dispatch mode for every ATen operator."""
        rule = self.aten_cache.get(func)
        if rule is None:
            try:
                rule = self.aten.get(str(func._schema.name), -1)
            except Exception:  # noqa: BLE001
                rule = -1
            self.aten_cache[func] = rule
        if rule >= 0:
            self.busy += 1
            try:
                self._hit(rule, self.entry_name() or f"torch.ops.{str(func)}")
            finally:
                self.busy -= 1

    # -- the window
    @contextlib.contextmanager
    def watching(self):
        """Watch the code run inside the ``with`` block (this thread and the threads it
        starts); on leaving, note a watch that was switched off as tampering."""
        self.resolve()
        mode = self._dispatch_mode()
        old_profile = sys.getprofile()
        old_thread = threading.getprofile() if hasattr(threading, "getprofile") else None
        self.entry = self.entry_frame = None
        entered = False
        try:
            if mode is not None:
                mode.__enter__()
                entered = True
            threading.setprofile(self._hook_fn)
            sys.setprofile(self._hook_fn)
            self.active = True
            yield self
        finally:
            self.active = False
            still = sys.getprofile()
            sys.setprofile(old_profile)
            threading.setprofile(old_thread)
            if still != self._hook_fn:  # (a RecursionError inside the hook removes it too)
                self.lost = True
            if entered:
                if not self._mode_on_top(mode):
                    self._tamper("torch's dispatch mode stack was changed")
                with contextlib.suppress(Exception):
                    mode.__exit__(None, None, None)

    def _dispatch_mode(self):
        torch = sys.modules.get("torch")
        if not self.aten or torch is None or not hasattr(torch, "_C"):
            return None
        if self._mode is None:
            try:
                self._mode = _mode_class()(self)
            except Exception:  # noqa: BLE001 - an odd torch build: the profile hook still watches
                return None
        return self._mode

    @staticmethod
    def _mode_on_top(mode) -> bool:
        try:
            from torch.utils._python_dispatch import _get_current_dispatch_mode
            return _get_current_dispatch_mode() is mode
        except Exception:  # noqa: BLE001
            return True

    def watched(self, fn: Callable) -> Callable:
        """``fn`` wrapped so that each call of it is watched (for ``extra_check``)."""
        def call(*args, **kwargs):
            with self.watching():
                return fn(*args, **kwargs)
        call.__name__ = getattr(fn, "__name__", "fn")
        return call


_MISSING = object()
_MODE_CLASS = None


def _mode_class():
    global _MODE_CLASS
    if _MODE_CLASS is None:
        from torch.utils._python_dispatch import TorchDispatchMode

        class AtenRecorder(TorchDispatchMode):
            """Notes the ATen operators a torch answer runs (and runs them unchanged)."""

            def __init__(self, recorder: Recorder):
                super().__init__()
                self.recorder = recorder

            @classmethod
            def _should_skip_dynamo(cls) -> bool:
                return False  # else torch wraps __torch_dispatch__ and imports torch._dynamo (seconds)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                rec = self.recorder
                if rec.active:
                    rec.aten_op(func)
                return func(*args, **(kwargs or {}))

        _MODE_CLASS = AtenRecorder
    return _MODE_CLASS


_NAMESPACES = ("torch", "torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.nn.init",
               "scipy.special", "numpy")


def _builtin_name(f) -> str:
    """A readable name of a builtin the learner called: ``torch.Tensor.softmax``,
    ``torch.special.softmax``, ``torch.softmax``."""
    try:
        name = f.__name__
        owner = getattr(f, "__self__", None)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(owner, torch.Tensor):
            return f"torch.Tensor.{name}"
        for ns in _NAMESPACES:
            mod = sys.modules.get(ns)
            if mod is None:
                continue
            for attr, value in vars(mod).items():
                if value is f or (type(value) is type(f) and value == f):
                    if attr == name or not attr.startswith("_"):
                        return f"{ns}.{attr}"
        mod = getattr(f, "__module__", None) or getattr(type(owner), "__module__", "")
        return f"{mod}.{getattr(f, '__qualname__', name)}" if mod else str(name)
    except Exception:  # noqa: BLE001
        return "a builtin"
