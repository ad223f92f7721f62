"""Device helpers (placeholder: being written under the foundation issue)."""


def default_device():
    raise NotImplementedError


def to_device(x, device=None):
    raise NotImplementedError
