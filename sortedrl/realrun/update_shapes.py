"""Updates of chosen shapes, so that calibration can tell the forms of the update cost apart.

The trainer runs a batch in micro-batches of similar length, each padded to its longest
(:func:`sortedrl.realrun.trainer.micro_batches`). The simulator has three forms of an update's
cost: the batch padded to its longest sequence (``train_padded``), each sequence alone, and the
trainer's micro-batches (``train_micro_pairs``). A real run's updates (16 samples of one run's
lengths) hardly tell them apart, and the padded form then over-predicted a long-tailed update
2x. These batches do (lengths in tokens, prompt + response; ``L`` long, ``S`` = L/10):

- ``skewed``: n-1 short sequences and one long one: padded is n x L tokens, the micro-batches
  and per-sequence forms about (n-1)·S + L (the long one is a micro-batch of its own);
- ``two_level``: half S, half 3S, one micro-batch: padded = micro-batches, per sequence less;
- ``uniform_short`` and ``uniform_long``: every form agrees; they pin the per-token, per-pair
  and fixed terms.

Each is timed on the real trainer in a process of its own, after one warm-up pass per shape
(the CPU kernels are built the first time a shape is seen). These updates write no checkpoint
and no log; the runner's own updates do, which the fit keeps as ``runner_update_s``
(:func:`sortedrl.realrun.calibrate.fit_train`).
"""

from __future__ import annotations

import random
import time

PROMPT = 16  # prompt tokens of each synthetic sequence (the rest is response)


def update_shapes(batch: int, max_tokens: int) -> dict[str, list[int]]:
    """Sequence lengths of each calibration update, for a run of ``batch`` samples an update
    and responses up to ``max_tokens``."""
    long = max(64, 2 * max_tokens)
    short = max(8, long // 10)
    half = max(1, batch // 2)
    return {"skewed": [short] * (batch - 1) + [long], "two_level": [short] * half + [3 * short] * half,
            "uniform_short": [2 * short] * batch, "uniform_long": [long] * max(2, half)}


def synthetic_batch(lengths: list[int], vocab: int, rng: random.Random, group_size: int = 4):
    """Rollouts of these lengths with random tokens, rewards alternating 0/1 within a group;
    returns (rollouts, advantages)."""
    from sortedrl.realrun.trainer import Rollout

    out = []
    for k, n in enumerate(lengths):
        prompt = min(PROMPT, max(1, n // 2))
        ids = [rng.randrange(4, vocab) for _ in range(n)]
        resp = n - prompt
        out.append(Rollout(k, k // group_size, ids[:prompt], ids[prompt:], [-1.0] * resp, [0] * resp,
                           float(k % 2)))
    return out, [1.0 if r.reward else -1.0 for r in out]


def measure_updates(model_dir: str, shapes: dict[str, list[int]], repeats: int,
                    seed: int = 0) -> list[tuple[list[int], float]]:
    """``(lengths, seconds)`` of every shape's update, ``repeats`` times after a warm-up pass."""
    from sortedrl.realrun.trainer import GRPOTrainer

    trainer = GRPOTrainer(model_dir, seed=seed)
    vocab = int(trainer.model.config.vocab_size)
    rng = random.Random(seed)
    out = []
    for rep in range(repeats + 1):
        for lengths in shapes.values():
            batch, adv = synthetic_batch(lengths, vocab, rng)
            t0 = time.perf_counter()
            trainer.update(batch, adv, 0)
            if rep:
                out.append((list(lengths), time.perf_counter() - t0))
    return out
