"""Decode time per generated token with and without the KV cache (chapter 11).

Model: :class:`attnlib.models.gpt.GPT` with 4 layers, 8 heads, ``d_model = 256`` and an MLP,
random weights (timing does not depend on them). For each sequence length ``S`` we time
producing the token after ``S`` tokens:

* **with the cache**: one token's projections and one query against ``S`` cached keys
  (:func:`attnlib.instruments.inference.extend` on a cache prefilled with ``S - 1`` tokens);
* **without**: a full causal forward pass over all ``S`` tokens.

The two are timed interleaved (``_timing.compare``); the table gives both medians, their
ratio and the exponents ``p`` of time ``~ S^p`` fitted over the lengths. Expected: ``p``
near 0 (a fixed per-step cost) to 1 with the cache, 1 to 2 without it.
Then end-to-end: greedy generation of 128 tokens after a 128-token prompt.

On the CPU the benchmark runs torch on one thread unless ``--threads`` says otherwise: a
decode step of one sequence is a chain of small operations, and on a busy 2-core machine a
second intra-op thread mostly adds synchronisation stalls (measured here: 69 ms instead of
4.6 ms for the cached step at S = 128, and exponents that meant nothing).
"""
from __future__ import annotations

import time

LENGTHS = [128, 512, 2048]
CFG = dict(vocab_size=256, context_length=4096, num_layers=4, num_heads=8, d_model=256, mlp=True)


def run(device="cpu"):
    import torch

    from attnlib.instruments import inference as inf
    from attnlib.instruments.complexity import fit_exponent
    from attnlib.models import GPT, GPTConfig

    from ._timing import compare

    torch.manual_seed(0)
    model = GPT(GPTConfig(**CFG)).to(device).eval()
    sync = torch.cuda.synchronize if device != "cpu" else None
    cfg = model.cfg
    per_token = inf.kv_cache_bytes(cfg.num_layers, cfg.num_heads, cfg.d_head, dtype=torch.float32)
    print(f"  device {device}: GPT {cfg.num_layers} layers, {cfg.num_heads} heads, d_model {cfg.d_model}; "
          f"cache {per_token / 1024:.0f} KiB per token (float32)", flush=True)
    print(f"  {'S':>6} {'cached (ms)':>12} {'no cache (ms)':>14} {'speed-up':>9}", flush=True)
    rows = []
    for S in LENGTHS:
        seq = torch.randint(cfg.vocab_size, (1, S), device=device)
        cache = inf.KVCache()
        inf.prefill(model, seq[:, :-1], cache)
        past = cache.layers

        def cached():
            c = inf.KVCache()
            c.layers = past
            inf.extend(model, seq[:, -1:], c)

        def uncached():
            with torch.no_grad():
                model(seq)

        t_cached, t_full, ratio = compare(cached, uncached, repeats=5 if S < 2048 else 3, sync=sync)
        print(f"  {S:6d} {t_cached * 1e3:12.2f} {t_full * 1e3:14.2f} {1 / ratio:8.1f}x", flush=True)
        rows.append(dict(device=device, S=S, cached_s=t_cached, full_s=t_full))
    p_c = fit_exponent(LENGTHS, [r["cached_s"] for r in rows])
    p_f = fit_exponent(LENGTHS, [r["full_s"] for r in rows])
    print(f"  fitted exponents of time per token vs S: cached {p_c:.2f}, no cache {p_f:.2f}", flush=True)
    prompt = torch.randint(cfg.vocab_size, (1, 128), device=device)
    for use_cache in (True, False):
        t0 = time.perf_counter()
        inf.generate(model, prompt, 128, use_cache=use_cache)
        if sync is not None:
            sync()
        dt = time.perf_counter() - t0
        print(f"  generate 128 tokens after 128, {'with' if use_cache else 'without'} cache: "
              f"{dt:6.2f} s ({128 / dt:7.1f} tokens/s)", flush=True)
    return rows


def main():
    import os

    import torch

    threads = torch.get_num_threads()
    if not os.environ.get("OMP_NUM_THREADS"):  # no --threads given: one thread (see above)
        torch.set_num_threads(1)
    try:
        rows = run("cpu")
    finally:
        torch.set_num_threads(threads)
    if torch.cuda.is_available():
        rows += run("cuda")
    return rows


if __name__ == "__main__":
    main()
