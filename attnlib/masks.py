"""Boolean attention masks (placeholder: being written under the foundation issue)."""


def causal_mask(L, S=None):
    raise NotImplementedError


def padding_mask(lengths, S):
    raise NotImplementedError
