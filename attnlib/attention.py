"""Scaled dot-product attention (placeholder: being written under the foundation issue)."""


def scaled_dot_product_attention(q, k, v, attn_mask=None, *, is_causal=False, scale=None, return_weights=False):
    raise NotImplementedError
