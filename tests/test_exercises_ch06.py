"""Chapter 6 exercise (layer_norm) beyond the generic contract (tests/test_exercises_contract.py):
the reference is nn.LayerNorm, correct answers in other styles pass, the library's LayerNorm is
refused, and the mistakes a learner writes in their own way are named."""
import numpy as np
import pytest
import torch

from attnlib.exercises import EXERCISES, check
from attnlib.models import transformer as tfm
from exercise_catalogue import catalogue_problems, passes_every_seed

EX = EXERCISES["layer_norm"]


@pytest.mark.parametrize("seed", range(5))
def test_the_reference_is_torchs_layer_norm(seed):
    for case in EX.all_cases(seed):
        x, gain, shift = case.args
        eps = case.kwargs.get("eps", 1e-5)
        ln = torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=torch.float64)
        with torch.no_grad():
            ln.weight.copy_(torch.as_tensor(gain))
            ln.bias.copy_(torch.as_tensor(shift))
            want = ln(torch.as_tensor(x)).numpy()
        np.testing.assert_allclose(EX.reference(*case.args, **case.kwargs), want, rtol=1e-10, atol=1e-10)


def ln_torch(x, gain, shift, eps=1e-5):
    t = torch.as_tensor(x)
    mean = t.mean(-1, keepdim=True)
    var = t.var(-1, keepdim=True, correction=0)
    return (t - mean) * torch.rsqrt(var + eps) * torch.as_tensor(gain) + torch.as_tensor(shift)


def ln_loops(x, gain, shift, eps=1e-5):
    x = np.asarray(x, dtype=float)
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape[:-1]):   # one token at a time
        row = x[idx]
        mean = sum(row) / len(row)
        var = sum((r - mean) ** 2 for r in row) / len(row)
        out[idx] = [(r - mean) / (var + eps) ** 0.5 * g + s for r, g, s in zip(row, gain, shift)]
    return out


def ln_float32(x, gain, shift, eps=1e-5):
    x = np.asarray(x, dtype=np.float32)
    mean = x.mean(-1, keepdims=True)
    return ((x - mean) / np.sqrt(x.var(-1, keepdims=True) + eps) * gain + shift).astype(np.float32)


@pytest.mark.parametrize("fn", [ln_torch, ln_loops])
def test_other_correct_answers_pass(fn):
    res = check("layer_norm", fn)
    assert res.passed, res.message


def test_a_float32_answer_passes_on_every_draw():
    assert not passes_every_seed(EX, ln_float32, seeds=range(10))


@pytest.mark.parametrize("borrowed", [
    lambda x, gain, shift, eps=1e-5: tfm.layer_norm(x, gain, shift, eps=eps),
    lambda x, gain, shift, eps=1e-5: torch.nn.functional.layer_norm(
        torch.as_tensor(x), (np.shape(x)[-1],), torch.as_tensor(gain), torch.as_tensor(shift), eps)],
    ids=["tfm.layer_norm", "F.layer_norm"])
def test_the_library_layer_norm_is_refused(borrowed):
    res = check("layer_norm", borrowed)
    assert not res.passed and res.status == "failed", res.message


def test_normalising_across_the_tokens_is_named_in_any_style():
    def over_tokens(x, gain, shift, eps=1e-5):
        t = torch.as_tensor(x)
        mean, var = t.mean(-2, keepdim=True), t.var(-2, keepdim=True, unbiased=False)
        return (t - mean) / torch.sqrt(var + eps) * torch.as_tensor(gain) + torch.as_tensor(shift)

    res = check("layer_norm", over_tokens)
    assert res.mistake == "over_tokens" and "token" in res.message


def test_torchs_default_unbiased_variance_is_named():
    def unbiased(x, gain, shift, eps=1e-5):
        t = torch.as_tensor(x)
        return (t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, keepdim=True) + eps) * torch.as_tensor(
            gain) + torch.as_tensor(shift)

    res = check("layer_norm", unbiased)
    assert res.mistake == "unbiased_variance" and "d_model - 1" in res.message


def test_rms_norm_is_named_as_a_different_normalisation():
    def rms(x, gain, shift, eps=1e-5):
        x = np.asarray(x)
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * gain + shift

    res = check("layer_norm", rms)
    assert res.mistake == "rms_norm" and "RMSNorm" in res.message


def test_catalogue_holds_on_every_draw_of_the_cases():
    problems = catalogue_problems(EX)
    assert not problems, problems[:5]


def test_the_chapter_shows_the_registered_stub():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).parents[1] / "chapters" / "06_transformer_block.ipynb").read_text())
    cells = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    shown = [c for c in cells if "raise NotImplementedError" in c and 'check("layer_norm"' in c]
    assert len(shown) == 1 and shown[0].startswith(EX.stub.rstrip("\n"))
