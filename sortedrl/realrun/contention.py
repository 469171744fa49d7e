"""Measure how much engine actors and the trainer actor slow each other on one host's cores.

A disaggregated run on a CPU machine puts N engine actors and a trainer actor on the same
cores: while the trainer trains, the engines step slower, and the trainer trains slower beside
them (three busy processes on two cores slowed async's rollouts 2.2x here); engine actors slow
each other too, and the driver process that steps them in rounds adds its own time per round.
How much depends on how many compute at once, so each term is measured with every engine busy
and with one. The simulator applies them by the number of busy engines
(:mod:`sortedrl.sim.contention`). This measures them on Ray, with the actors a run uses. A
*cycle* is one batch per engine (``batch`` requests of ``context`` prompt tokens, ``ignore_eos``,
``DECODE_STEPS`` tokens each) stepped to its end in lockstep rounds, as the Ray backend drives
engines. One *pair* of measurements is, back to back:

    solo cycle (engine 0 alone), peers cycle (every engine), update alone,
    update beside cycles of every engine (rounds that ran entirely inside it),
    update beside cycles of engine 0 alone, peers cycle, solo cycle

so that each ratio compares measurements seconds apart: a shared machine's load drifts over
minutes (a first version measured the phases a minute apart, and a load spike in between gave an
engine "slowed" x0.43). Per pair, with per-step-index medians (the prefill step left out):

- ``engine_contention`` = median over step indices of (step beside the update / peers step);
  ``engine_contention_one`` the same for engine 0 alone (solo beside the update / solo step);
- ``train_contention`` = update beside the engines / update alone (timed inside the actor);
  ``train_contention_one`` = update beside engine 0 alone / update alone;
- ``ray_step_factor`` = median over step indices of (peers step / solo step): an engine actor
  beside its N-1 peers, against one engine alone as the in-process grid measures it;
- ``step_overhead_s`` / ``step_overhead_one_s`` = median over decode rounds of the driver's wall
  time per round beyond the slowest engine's own step, peers / solo cycles.

The profile keeps each term's median over the pairs (``repeats`` x ``pairs``), its values by
pair and their relative MAD.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import numpy as np

DECODE_STEPS = 12


class _Engines:
    """Engine actors decoding fixed batches in lockstep rounds (one step of every busy engine)."""

    def __init__(self, workers: list, batch: int, context: int, vocab: int, seed: int) -> None:
        self.workers, self.batch, self.context, self.vocab = workers, batch, context, vocab
        self.rng = random.Random(seed)
        self.next_id = 0

    def _requests(self) -> list[tuple]:
        adds = []
        for _ in range(self.batch):
            prompt = [self.rng.randrange(4, self.vocab) for _ in range(self.context)]
            adds.append((self.next_id, f"cont-{self.next_id}", prompt, 0, DECODE_STEPS, 1.0,
                         self.rng.randrange(2**31), True))
            self.next_id += 1
        return adds

    def cycle(self, which: list[int], during=None) -> dict[int, list[float]]:
        """One batch on each engine of ``which``, to its end: each engine's own step seconds by
        step index, and under the key -1 the driver's time per round beyond the slowest step
        (calls and results over Ray). With ``during`` (an update in flight), only rounds that
        ended before it did."""
        import ray

        adds = {k: self._requests() for k in which}
        left = dict.fromkeys(which, self.batch)
        out: dict[int, list[float]] = {}
        index = 0
        while any(left.values()):
            busy = [k for k in which if left[k]]
            wall = time.perf_counter()
            results = ray.get([self.workers[k].step.remote(adds.pop(k, [])) for k in busy])
            wall = time.perf_counter() - wall
            for k, res in zip(busy, results, strict=True):
                left[k] -= len(res["finished"])
            if during is None or not ray.wait([during], timeout=0)[0]:
                out.setdefault(index, []).extend(res["step_s"] for res in results)
                if index > 0 and len(busy) == len(which):  # a decode round of every engine asked
                    out.setdefault(-1, []).append(wall - max(res["step_s"] for res in results))
            index += 1
        return out


def measure_contention(model_dir: str, engines: int, max_num_seqs: int, update_lengths: list[int],
                       repeats: int = 3, pairs: int = 3, batch: int = 8, context: int = 64,
                       seed: int = 0, warm_tokens: int = 0) -> dict:
    """The contention factors over ``repeats`` x ``pairs`` pairs (see the module doc)."""
    import ray

    from sortedrl.realrun.actors import connect, start_actors
    from sortedrl.realrun.update_shapes import synthetic_batch

    connect(None, num_cpus=os.cpu_count())
    try:
        vocab = int(json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))["vocab_size"])
        workers, trainer = start_actors(engines, model_dir, max_num_seqs,
                                        max(context + DECODE_STEPS + 8, 128),
                                        dict(seed=seed, warm_tokens=warm_tokens), dict(seed=seed))
        eng = _Engines(workers, min(batch, max_num_seqs), context, vocab, seed)
        rollouts, adv = synthetic_batch(update_lengths, vocab, random.Random(seed))

        def update():
            return trainer.timed_update.remote(rollouts, adv, 0)

        ray.get(update())  # warm-up: the first update of a shape builds the kernels
        eng.cycle(list(range(engines)))
        measured = [_one_pair(eng, engines, update) for _ in range(repeats * pairs)]
    finally:
        ray.shutdown()
    return summary(measured, engines, eng.batch, context, update_lengths)


def _one_pair(eng: _Engines, engines: int, update) -> dict:
    import ray

    every = list(range(engines))
    solo, peers = eng.cycle([0]), eng.cycle(every)
    alone = ray.get(update())
    together, beside = _beside(eng, every, update)
    together_one, beside_one = _beside(eng, [0], update)
    _merge(peers, eng.cycle(every))
    _merge(solo, eng.cycle([0]))
    return pair_ratios(solo, peers, beside, alone, together, beside_one, together_one)


def _beside(eng: _Engines, which: list[int], update) -> tuple[float, dict[int, list[float]]]:
    """An update's seconds beside cycles of the engines ``which``, and their steps inside it."""
    import ray

    future, steps = update(), {}
    while not ray.wait([future], timeout=0)[0]:
        _merge(steps, eng.cycle(which, during=future))
    return ray.get(future), steps


def _merge(into: dict[int, list[float]], more: dict[int, list[float]]) -> None:
    for j, v in more.items():
        into.setdefault(j, []).extend(v)


def _step_ratio(top: dict[int, list[float]], bottom: dict[int, list[float]]) -> float | None:
    """Median over decode step indices (the prefill step 0 and the driver's times left out) of
    the ratio of medians."""
    ratios = [np.median(top[j]) / np.median(bottom[j]) for j in sorted(top) if j > 0 and j in bottom]
    return float(np.median(ratios)) if ratios else None


def _overhead(cycles: dict[int, list[float]]) -> float | None:
    return float(np.median(cycles[-1])) if cycles.get(-1) else None


def pair_ratios(solo: dict[int, list[float]], peers: dict[int, list[float]], beside: dict[int, list[float]],
                train_alone: float, train_beside: float, beside_one: dict[int, list[float]] | None = None,
                train_beside_one: float | None = None) -> dict:
    """One pair's factors: engine step seconds by step index for engine 0 alone (``solo``), every
    engine (``peers``), every engine beside an update (``beside``) and engine 0 beside one
    (``beside_one``); the update's seconds alone and beside every engine / engine 0; the driver's
    seconds per round beyond the slowest step with one engine and with every engine busy."""
    return {"engine": _step_ratio(beside, peers), "train": train_beside / train_alone,
            "engine_one": _step_ratio(beside_one, solo) if beside_one else None,
            "train_one": train_beside_one / train_alone if train_beside_one else None,
            "ray_step": _step_ratio(peers, solo), "overhead": _overhead(peers), "overhead_one": _overhead(solo),
            "train_alone_s": train_alone, "train_beside_s": train_beside,
            "steps_beside": sum(len(v) for j, v in beside.items() if j >= 0)}


FACTORS = (("engine", "engine_contention"), ("train", "train_contention"),
           ("engine_one", "engine_contention_one"), ("train_one", "train_contention_one"),
           ("ray_step", "ray_step_factor"))
SECONDS = (("overhead", "step_overhead_s"), ("overhead_one", "step_overhead_one_s"))


def summary(measured: list[dict], engines: int, batch: int, context: int, lengths: list[int]) -> dict:
    """Medians over pairs, values by pair and relative MADs; a pair whose update was too short
    for a whole round beside it has no engine ratio. The factors are at least 1 (a machine's
    noise can put a median just below); a term no pair measured is left out."""
    out = {"engines": engines, "batch": batch, "context": context, "decode_steps": DECODE_STEPS,
           "pairs": len(measured), "update_tokens": int(sum(lengths)), "update_samples": len(lengths),
           "train_alone_s": float(np.median([m["train_alone_s"] for m in measured])),
           "train_beside_s": float(np.median([m["train_beside_s"] for m in measured])),
           "steps_beside": int(sum(m["steps_beside"] for m in measured))}
    for key, name in FACTORS + SECONDS:
        vals = np.asarray([m[key] for m in measured if m.get(key) is not None], dtype=float)
        if not vals.size and key not in ("engine", "train", "ray_step"):
            continue
        mid = float(np.median(vals)) if vals.size else 1.0
        out[name] = max(1.0, mid) if (key, name) in FACTORS else max(0.0, mid)
        out[f"{name}_by_pair"] = [float(v) for v in vals]
        out[f"{name}_rel_mad"] = float(1.4826 * np.median(np.abs(vals / mid - 1))) if vals.size and mid else 0.0
    return out
