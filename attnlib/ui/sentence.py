"""The reader's own sentence, in Jupyter: a text box, and every head's weights on what it holds.

This explorer needs the kernel (the model runs on each new sentence), so it cannot be
precomputed like :func:`attnlib.ui.widgets.explorer`. Displaying it publishes the same two
outputs as the other explorers: a *still* (the picture for the first sentence and a line
saying to run the cell) and the live widget view. In JupyterLab the live view hides the
still once it renders. On the website, where no kernel runs, the live view is hidden (its
class ``attnlib-kernel-only``; ``site_assets/attnlib-site.css``) and the still stays: the
page's own sentence box (``site_assets/attnlib-text-model.js``) runs the model in the browser.
"""
from __future__ import annotations

import html

import numpy as np

from ..i18n import N_, _
from .plots import fig_to_png, png_img
from .widgets import RUN_HINT, WIDGET_VIEW, _STILL_CSS

__all__ = ["SentenceExplorer", "sentence_explorer", "prepare", "weights_figure"]

TYPE_HINT = N_("type your own sentence in the box (in Jupyter, with a running kernel)")


def prepare(tokenizer, text: str, context_length: int) -> tuple[str, list[str]]:
    """``(kept, notes)``: ``text`` without the characters outside the model's alphabet and cut to
    ``context_length`` characters, and what was changed, as sentences to show."""
    notes = []
    unknown = tokenizer.unknown_chars(text)
    if unknown:
        text = "".join(c for c in text if c not in set(unknown))
        notes.append(_("Left out, not in the model's alphabet: {chars}").format(chars=" ".join(map(repr, unknown))))
    if len(text) > context_length:
        text = text[:context_length]
        notes.append(_("Cut to the model's context of {n} characters.").format(n=context_length))
    return text, notes


def _weights(model, tokenizer, text):
    import torch
    with torch.no_grad():
        _, weights = model(torch.tensor([tokenizer.encode(text)]), return_weights=True)
    return [w[0].double().cpu().numpy() for w in weights]              # layers x (h, L, L)


def weights_figure(model, tokenizer, text: str):
    """A figure of every head's weights on ``text`` (rows: layers; queries down, keys across)."""
    import matplotlib.pyplot as plt

    ws = _weights(model, tokenizer, text)
    layers, h = len(ws), ws[0].shape[0]
    L = len(text)
    shown = [c if c not in " \n" else {" ": "␣", "\n": "↵"}[c] for c in text]
    fig, axes = plt.subplots(layers, h, figsize=(2.3 * h, 2.7 * layers), squeeze=False)
    for layer in range(layers):
        for head in range(h):
            ax = axes[layer, head]
            ax.imshow(ws[layer][head], cmap="Blues", vmin=0, vmax=1)
            # counted from 1, as the website's explorer and chapter 13 name heads
            ax.set_title(_("layer {layer}, head {head}").format(layer=layer + 1, head=head + 1), fontsize=9)
            ticks = np.arange(L) if L <= 24 else np.arange(0, L, max(1, L // 12))
            ax.set_xticks(ticks, [shown[i] for i in ticks], fontsize=6)
            ax.set_yticks(ticks, [shown[i] for i in ticks], fontsize=6)
    fig.suptitle(_("Every head's weights on your sentence (queries down, keys across)"), fontsize=10)
    fig.tight_layout(h_pad=1.5)            # room between a row's key labels and the next row's titles
    return fig


def _strongest(model, tokenizer, text) -> str:
    """What each head mostly does, in words: the offset its weight is largest on, on average."""
    ws = _weights(model, tokenizer, text)
    parts = []
    for layer, w in enumerate(ws):
        L = w.shape[-1]
        for head in range(w.shape[0]):
            if L < 2:
                continue
            # mean weight at each offset back (0 = itself, 1 = the previous character, ...)
            by_offset = [np.mean([w[head, t, t - k] for t in range(k, L)]) for k in range(min(L, 4))]
            k = int(np.argmax(by_offset))
            parts.append(_("{layer}.{head}: {k} back").format(layer=layer + 1, head=head + 1, k=k))
    return "; ".join(parts)


class SentenceExplorer:
    """A text box and the picture of every head's weights on its sentence."""

    def __init__(self, model, tokenizer, sentence: str):
        import ipywidgets as w

        self.model, self.tokenizer = model, tokenizer
        self.context_length = model.cfg.context_length
        self.sentence, self.notes = prepare(tokenizer, sentence, self.context_length)
        self.png = fig_to_png(weights_figure(model, tokenizer, self.sentence))
        self.box = w.Text(value=sentence, description=_("Your sentence"), continuous_update=False,
                          layout=w.Layout(width="100%"), style={"description_width": "initial"})
        self.note = w.HTML(self._note_html())
        self.picture = w.HTML(png_img(self.png, self.alt()))
        self.box.observe(self._changed, names="value")
        self.widget = w.VBox([self.box, self.note, self.picture])
        self.widget.add_class("attnlib-explorer")
        self.widget.add_class("attnlib-kernel-only")

    def alt(self) -> str:
        return _("Every head's attention weights on {text!r}, one heat map per head; the offset each "
                 "head's weight is largest on: {summary}").format(
            text=self.sentence, summary=_strongest(self.model, self.tokenizer, self.sentence))

    def _note_html(self) -> str:
        return "".join(f"<p style='margin:.2em 0'>{html.escape(n)}</p>" for n in self.notes)

    def _changed(self, change):
        text, self.notes = prepare(self.tokenizer, change["new"], self.context_length)
        self.note.value = self._note_html()
        if not text:
            return
        self.sentence = text
        self.picture.value = png_img(fig_to_png(weights_figure(self.model, self.tokenizer, text)), self.alt())

    def __repr__(self) -> str:
        return f"SentenceExplorer({self.sentence!r})"

    def _ipython_display_(self) -> None:
        from IPython.display import publish_display_data

        line = _("{run}: {what}. This picture is for {text!r}.").format(run=_(RUN_HINT), what=_(TYPE_HINT),
                                                                        text=self.sentence)
        page = (f'<div class="attnlib-explorer-still"><style>{_STILL_CSS}</style>'
                f'{png_img(self.png, self.alt())}'
                f'<p style="margin:.2em 0;font-style:italic">&#9654; {html.escape(line)}</p></div>')
        publish_display_data({"text/html": page, "text/plain": f"{self!r}. {line}"})
        view = (self.widget._repr_mimebundle_() or {}).get(WIDGET_VIEW)
        if view is not None:
            publish_display_data({WIDGET_VIEW: view})


def sentence_explorer(model, tokenizer, sentence: str) -> SentenceExplorer:
    """A text box: type a sentence, see every head's weights on it (needs a running kernel).

    Args:
        model: a :class:`attnlib.models.gpt.GPT`.
        tokenizer: its :class:`attnlib.data.chars.CharTokenizer`.
        sentence: the sentence shown first (and in the still).

    Returns:
        a :class:`SentenceExplorer`; display it as the last expression of a cell.
    """
    return SentenceExplorer(model, tokenizer, sentence)
