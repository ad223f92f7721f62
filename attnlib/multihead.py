"""Multi-head attention (placeholder: being written under the foundation issue)."""


def multi_head_attention(query, key, value, num_heads, w_q, w_k, w_v, w_o, *, attn_mask=None,
                         is_causal=False, return_weights=False):
    raise NotImplementedError
