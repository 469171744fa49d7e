"""Measure how much engine actors and the trainer actor slow each other on one host's cores.

A disaggregated run on a CPU machine puts N engine actors and a trainer actor on the same
cores: while the trainer trains, the engines step slower, and the trainer trains slower beside
them (three busy processes on two cores slowed async's rollouts 2.2x here). The simulator models
it with two factors of the cost model (:mod:`sortedrl.sim.contention`), which this measures on
Ray, with the actors a run uses, in three phases repeated ``repeats`` times:

1. *engines alone*: every engine actor decodes a fixed batch (``batch`` requests of ``context``
   prompt tokens, ``ignore_eos``, ``DECODE_STEPS`` tokens each), in rounds as the Ray backend
   drives them, the batch started again when it ends;
2. *trainer alone*: the trainer actor runs ``updates`` updates of a batch of the run's lengths
   (timed inside the actor);
3. *together*: the trainer runs the same updates while the engines go on decoding.

``engine_contention`` is the median over decode step indices of (step time together / step time
alone) and ``train_contention`` the median update together / alone, each per repeat; the
profile keeps the medians over repeats and their spread. The engines' own steps alone (per
step index) are returned too, so calibration can compare them with the in-process grid.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import numpy as np

DECODE_STEPS = 12
CYCLES_ALONE = 4  # full engine batches per repeat in phase 1


class _Rounds:
    """Engine actors decoding fixed batches in lockstep rounds (one step of every engine)."""

    def __init__(self, workers: list, batch: int, context: int, vocab: int, seed: int) -> None:
        self.workers, self.batch, self.context, self.vocab = workers, batch, context, vocab
        self.rng = random.Random(seed)
        self.next_id = 0
        self.index = 0  # step index within the current batch (0: the prefill step)
        self._fresh()

    def _fresh(self) -> None:
        self.pending, self.left = [], [self.batch] * len(self.workers)
        for _ in self.workers:
            adds = []
            for _ in range(self.batch):
                prompt = [self.rng.randrange(4, self.vocab) for _ in range(self.context)]
                adds.append((self.next_id, f"cont-{self.next_id}", prompt, 0, DECODE_STEPS, 1.0,
                             self.rng.randrange(2**31), True))
                self.next_id += 1
            self.pending.append(adds)
        self.index = 0

    def round(self) -> tuple[int, list[float]]:
        """One step of every engine: (step index, each engine's own step seconds)."""
        import ray

        results = ray.get([w.step.remote(adds) for w, adds in zip(self.workers, self.pending, strict=True)])
        self.pending = [[] for _ in self.workers]
        index = self.index
        self.index += 1
        for k, res in enumerate(results):
            self.left[k] -= len(res["finished"])
        if not any(self.left):
            self._fresh()
        return index, [res["step_s"] for res in results]


def measure_contention(model_dir: str, engines: int, max_num_seqs: int, update_lengths: list[int],
                       repeats: int = 3, updates: int = 2, batch: int = 8, context: int = 64,
                       seed: int = 0, warm_tokens: int = 0) -> dict:
    """The two contention factors, with their spread over repeats (see the module doc)."""
    import ray

    from sortedrl.realrun.actors import connect, start_actors
    from sortedrl.realrun.update_shapes import synthetic_batch

    connect(None, num_cpus=os.cpu_count())
    try:
        vocab = int(json.loads((Path(model_dir) / "config.json").read_text())["vocab_size"])
        workers, trainer = start_actors(engines, model_dir, max_num_seqs,
                                        max(context + DECODE_STEPS + 8, 128),
                                        dict(seed=seed, warm_tokens=warm_tokens), dict(seed=seed))
        rounds = _Rounds(workers, min(batch, max_num_seqs), context, vocab, seed)
        rollouts, adv = synthetic_batch(update_lengths, vocab, random.Random(seed))

        def update():
            return trainer.timed_update.remote(rollouts, adv, 0)

        ray.get(update())  # warm-up: the first update of a shape builds the kernels
        for _ in range(DECODE_STEPS):
            rounds.round()
        per_repeat = [_one_repeat(rounds, update, updates) for _ in range(repeats)]
    finally:
        ray.shutdown()
    return summary(per_repeat, engines, rounds.batch, context, update_lengths)


def _one_repeat(rounds: _Rounds, update, updates: int) -> dict:
    import ray

    alone: dict[int, list[float]] = {}
    for _ in range(CYCLES_ALONE * DECODE_STEPS):
        j, secs = rounds.round()
        alone.setdefault(j, []).extend(secs)
    train_alone = [ray.get(update()) for _ in range(updates)]
    together: dict[int, list[float]] = {}
    train_together = []
    future = update()
    while len(train_together) < updates:
        j, secs = rounds.round()
        done, _ = ray.wait([future], timeout=0)
        if done:  # the update ended during this round: the round was only partly beside it
            train_together.append(ray.get(future))
            if len(train_together) < updates:
                future = update()
            continue
        together.setdefault(j, []).extend(secs)
    return repeat_ratios(alone, together, train_alone, train_together)


def repeat_ratios(alone: dict[int, list[float]], together: dict[int, list[float]],
                  train_alone: list[float], train_together: list[float]) -> dict:
    """One repeat's factors from its measurements: engine step seconds by step index (0: the
    prefill step, left out) alone and beside the trainer, and update seconds alone and beside
    the engines. Medians throughout, so a step or an update another job slowed weighs little."""
    ratios = [np.median(together[j]) / np.median(alone[j]) for j in sorted(together)
              if j > 0 and j in alone]
    return {"engine": float(np.median(ratios)) if ratios else 1.0,
            "train": float(np.median(train_together) / np.median(train_alone)),
            "alone_steps": {j: float(np.median(v)) for j, v in alone.items()},
            "train_alone_s": float(np.median(train_alone)),
            "train_together_s": float(np.median(train_together)),
            "steps_together": sum(map(len, together.values()))}


def summary(per_repeat: list[dict], engines: int, batch: int, context: int, lengths: list[int]) -> dict:
    def stats(key: str) -> tuple[float, float, list[float]]:
        vals = [r[key] for r in per_repeat]
        mid = float(np.median(vals))
        return mid, float((max(vals) - min(vals)) / mid) if mid > 0 else 0.0, vals

    engine, engine_spread, engine_all = stats("engine")
    train, train_spread, train_all = stats("train")
    steps = sorted({j for r in per_repeat for j in r["alone_steps"]})
    return {"engine_contention": max(1.0, engine), "train_contention": max(1.0, train),
            "engine_ratio_by_repeat": engine_all, "train_ratio_by_repeat": train_all,
            "engine_spread": engine_spread, "train_spread": train_spread,
            "engines": engines, "batch": batch, "context": context, "decode_steps": DECODE_STEPS,
            "update_tokens": int(sum(lengths)), "update_samples": len(lengths),
            "train_alone_s": float(np.median([r["train_alone_s"] for r in per_repeat])),
            "train_together_s": float(np.median([r["train_together_s"] for r in per_repeat])),
            "steps_together": int(sum(r["steps_together"] for r in per_repeat)),
            "alone_step_s": [float(np.median([r["alone_steps"][j] for r in per_repeat if j in r["alone_steps"]]))
                             for j in steps]}

