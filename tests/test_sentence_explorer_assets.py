"""Chapter 13's sentence explorer, without a browser: the snippet the chapter pastes, the
labels it carries for translation, and the weights the page's forward pass reads.

(The explorer itself runs in Chromium in tests/browser/test_sentence_explorer.py.)
"""
from __future__ import annotations

import json
import pathlib
import re
from html.parser import HTMLParser

import pytest

import explorer_snippets

ROOT = pathlib.Path(__file__).resolve().parents[1]
ASSETS = ROOT / "site_assets"
EXPLORER_JS = ASSETS / "attnlib-sentence-explorer.js"
MODEL_JS = ASSETS / "attnlib-text-model.js"
SNIPPETS = ["en", "zh"]   # the English snippet, and its translation in the chapter's catalogue
WEIGHTS = ROOT / "attnlib" / "models" / "weights"


def js_strings() -> dict[str, str]:
    """The explorer's STRINGS table: key -> English default."""
    block = re.search(r"var STRINGS = \{(.*?)\n  \};", EXPLORER_JS.read_text(encoding="utf-8"), re.S).group(1)
    return dict(re.findall(r"^\s+(\w+): '((?:[^'\\]|\\.)*)'", block, re.M))


def kebab(key: str) -> str:
    return "data-" + re.sub(r"[A-Z]", lambda m: "-" + m.group(0).lower(), key)


class _Snippet(HTMLParser):
    def __init__(self):
        super().__init__()
        self.divs, self.scripts = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "div" and "attnlib-sentence-explorer" in (attrs.get("class") or "").split():
            self.divs.append(attrs)
        if tag == "script":
            self.scripts.append(attrs)


def parse(lang: str) -> _Snippet:
    p = _Snippet()
    p.feed(explorer_snippets.snippet(lang))
    return p


def fields(text: str) -> set[str]:
    return set(re.findall(r"\{(\w+)\}", text))


def test_strings_table_is_read():
    strings = js_strings()
    assert len(strings) > 15 and strings["labelSentence"].startswith("Sentence")


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_snippet_carries_every_label_with_the_same_fields(snippet):
    """Every visible string of the explorer is a data- attribute of the snippet (so the Chinese
    edition's translation of the raw HTML reaches it), with the {fields} of the English default."""
    parsed = parse(snippet)
    assert len(parsed.divs) == 1
    div = parsed.divs[0]
    strings = js_strings()
    missing = [kebab(k) for k in strings if kebab(k) not in div]
    assert not missing, f"the {snippet} snippet lacks {missing}"
    unknown = [a for a in div if a.startswith("data-") and a != "data-model" and a not in {kebab(k) for k in strings}]
    assert not unknown, f"the {snippet} snippet: the script reads no {unknown}"
    for key, default in strings.items():
        assert fields(div[kebab(key)]) == fields(default), (key, div[kebab(key)])
    assert div["data-sentence"] == strings["sentence"]  # the model reads English only


@pytest.mark.parametrize("snippet", SNIPPETS)
def test_snippet_loads_the_two_scripts_and_a_shipped_model(snippet):
    parsed = parse(snippet)
    srcs = [s["src"] for s in parsed.scripts]
    assert srcs == ["../_static/attnlib-text-model.js", "../_static/attnlib-sentence-explorer.js"]
    assert all("defer" in s for s in parsed.scripts)  # in this order, after the page is parsed
    for src in srcs:
        assert (ASSETS / src.rsplit("/", 1)[1]).is_file()
    model = parsed.divs[0]["data-model"]
    assert model.startswith("../_static/models/")
    name = model.rsplit("/", 1)[1]
    assert (WEIGHTS / f"{name}.json").is_file() and (WEIGHTS / f"{name}.bin").is_file()
    assert name in (ROOT / "tools" / "sphinxext" / "attnlib_models.py").read_text(encoding="utf-8")


def test_scripts_load_nothing_from_another_host():
    for js in (MODEL_JS, EXPLORER_JS):
        assert not re.search(r"(https?:)?//[\w.-]+\.\w", re.sub(r"/\*.*?\*/|^\s*//.*$", "", js.read_text(encoding="utf-8"),
                                                              flags=re.S | re.M)), js.name


def test_weights_hold_the_tensors_the_page_reads():
    """The names and shapes attnlib-text-model.js uses are those pretrained.save writes."""
    meta = json.loads((WEIGHTS / "shakespeare.json").read_text(encoding="utf-8"))
    c = meta["config"]
    assert (c["pos"], c["norm"], c["mlp"], c["scaled"]) == ("learned", "pre", True, True)
    d, V, T = c["d_model"], c["vocab_size"], c["context_length"]
    want = {"tok_emb": [V, d], "pos_emb": [T, d], "unembed": [d, V], "ln_f.weight": [d], "ln_f.bias": [d]}
    for b in range(c["num_layers"]):
        p = f"blocks.{b}."
        want.update({p + f"attn.{w}": [d, d] for w in ("w_q", "w_k", "w_v", "w_o")})
        want.update({p + "mlp.w1": [d, 4 * d], p + "mlp.w2": [4 * d, d], p + "mlp.b1": [4 * d], p + "mlp.b2": [d]})
        want.update({p + f"{ln}.{x}": [d] for ln in ("ln1", "ln2") for x in ("weight", "bias")})
    assert {t["name"]: t["shape"] for t in meta["tensors"]} == want
    assert len(meta["alphabet"]) == V
    assert (WEIGHTS / "shakespeare.bin").stat().st_size == 4 * meta["numbers"]
    js = MODEL_JS.read_text(encoding="utf-8")
    for name in ("tok_emb", "pos_emb", "unembed", "ln_f.weight", "ln_f.bias", "w_q", "w_k", "w_v", "w_o",
                 "ln1.weight", "ln2.bias", "w1", "w2", "b1", "b2"):
        assert name in js, name


def test_the_chapter_holds_the_snippet_as_it_is():
    """The block the tests load is the block the chapter pastes (and the catalogue translates)."""
    import json
    chapter = json.loads((ROOT / "chapters" / "13_real_text.ipynb").read_text(encoding="utf-8"))
    blocks = ["".join(c["source"]).strip() for c in chapter["cells"] if c["cell_type"] == "markdown"]
    assert explorer_snippets.snippet("en") in blocks
