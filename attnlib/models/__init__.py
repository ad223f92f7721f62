"""Models built from the kernels: ``transformer.py`` (the Transformer block of chapter 6,
in NumPy or torch, post-LN or pre-LN, with the torch layers it is checked against) and
``gpt.py`` (the small decoder-only GPT of chapters 9 to 12, written like nanoGPT's
``model.py``)::

    from attnlib.models import GPT, GPTConfig
    from attnlib.models import transformer as tfm
"""
from .gpt import GPT, Block, CausalSelfAttention, GPTConfig, MLP, next_token_loss

__all__ = ["GPT", "GPTConfig", "Block", "CausalSelfAttention", "MLP", "next_token_loss"]
