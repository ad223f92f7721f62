"""attnlib's folders are its layers, and no module imports one above it or forms a cycle.

Every import counts, at module level or inside a function (a deferred import is still a
dependency: it only hides the cycle until the function runs)."""
from __future__ import annotations

import ast
import pathlib

import pytest

PKG = pathlib.Path(__file__).resolve().parents[1] / "attnlib"

# lowest first: a module may import its own layer and the layers before it
LAYERS = ["i18n", "kernels", "data", "models", "instruments", "ui", "runtime", "exercises", "grading"]


def module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, pathlib.Path]:
    return {module_name(p): p for p in PKG.rglob("*.py")}


def imports_of(name: str, path: pathlib.Path, known: set[str]) -> set[str]:
    """The attnlib modules ``name`` imports (a package's ``__init__`` counts as itself)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # `from x import y`: y may be a submodule
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:  # attnlib.kernels.softmax.softmax -> the module
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def layer(name: str) -> str | None:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def test_attnlib_has_no_import_cycle():
    found = cycles(graph())
    assert not found, "import cycles in attnlib (each line one cycle):\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_lives_in_a_layer_folder():
    loose = sorted(n for n in modules() if n != "attnlib" and layer(n) is None)
    assert not loose, f"modules outside the layer folders {LAYERS}: {loose}"


def test_no_module_imports_a_layer_above_its_own():
    g = graph()
    wrong = []
    for name, deps in g.items():
        if name == "attnlib" or layer(name) is None:
            continue
        for dep in deps:
            if dep == "attnlib" and layer(name) != LAYERS[-1]:  # attnlib/__init__ imports the layers below grading
                wrong.append(f"{name} imports the package attnlib itself (import the module it needs)")
            elif layer(dep) and LAYERS.index(layer(dep)) > LAYERS.index(layer(name)):
                wrong.append(f"{name} ({layer(name)}) imports {dep} ({layer(dep)})")
    assert not wrong, "\n".join(sorted(wrong))


@pytest.mark.parametrize("name", ["softmax", "scaled_dot_product_attention", "multi_head_attention",
                                  "flash_attention", "causal_mask", "apply_rope", "exercises", "quiz",
                                  "widgets", "plots", "set_language"])
def test_the_public_api_is_still_reexported(name):
    import attnlib
    assert name in attnlib.__all__ and hasattr(attnlib, name)
