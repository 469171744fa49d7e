"""The real backend on Ray: N engine actors and a trainer actor, colocated or disaggregated.

The controller and the policy are the ones the simulator and the in-process runner use; this is
only another :class:`~sortedrl.policies.controller.Backend`. The driver keeps a mirror of each
engine's requests (what policies see through :class:`EngineMirror`), and runs rounds: it sends
each busy engine its queued admissions and one step, waits for all of them, records what
finished, then hands the events to the controller.

- ``colocated``: an update or a weight push runs while no engine steps (the controller already
  keeps rollout off around them), as on shared GPUs.
- ``disaggregated``: an update runs on the trainer actor while the engines keep stepping; the
  driver polls it after every round. A weight push is put into Ray's object store once by the
  trainer actor and read by every engine between two of its steps; running requests go on with
  the new weights, and their tokens are tagged with the version that made each one.

Per-token versions come from the engine actors (:mod:`sortedrl.realrun.actors`): each segment
comes back as stretches of one version, and each stretch is one ``span`` in the timeline (ended
``sync`` when a push cut it, as the simulator does), so staleness is exact per token.

A checkpoint on a disaggregated cluster is taken while the engines generate (the local backend's,
colocated, only once they are empty): it also keeps the tokens of every segment running then
(:meth:`RayBackend.flight_state`). A resumed run keeps them as the sample's tokens, each stretch a
span ended ``resume`` at the checkpoint, and the sample goes back to its engine from there, as
after a pause; so no token made before the checkpoint is lost or left out of the timeline, and
each sample's ``oldest`` is the version of a token it keeps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.policies.base import Event, EventKind
from sortedrl.realrun.backend import RealBackend
from sortedrl.realrun.checkpoint import SHOWN, _count, _ids
from sortedrl.realrun.trainer import Rollout


class EngineMirror:
    """The public half of one engine actor: its requests as the driver last saw them."""

    def __init__(self, index: int, max_num_seqs: int, kept: list[list[int]]) -> None:
        self.index, self.max_num_seqs, self.version = index, max_num_seqs, 0
        self.requests: dict[int, list] = {}  # sample -> [started, tokens this segment]
        self._kept = kept

    def running(self) -> tuple[int, ...]:
        return tuple(i for i, r in self.requests.items() if r[0])

    def queued(self) -> tuple[int, ...]:
        return tuple(i for i, r in self.requests.items() if not r[0])

    def load(self) -> int:
        return len(self.requests)

    def tokens(self, sample: int, now: float) -> int | None:
        r = self.requests.get(sample)
        return None if r is None else len(self._kept[sample]) + r[1]


class RayBackend(RealBackend):
    """Engines and trainer as Ray actors, driven in rounds of one step per busy engine."""

    def __init__(self, engines: list, trainer, placement: str, prompts: list[list[int]],
                 grade: Callable[[int, list[int], str], float], group_size: int, max_tokens: int,
                 temperature: float, max_num_seqs: int, timeline, seed: int = 0,
                 eos: int | None = None, clock_offset: float = 0.0) -> None:
        super().__init__(None, None, prompts, grade, group_size, max_tokens, temperature, max_num_seqs,
                         timeline, seed=seed, eos=eos, clock_offset=clock_offset)
        import ray

        self.ray, self.workers, self.trainer_actor, self.placement = ray, engines, trainer, placement
        self.mirrors = [EngineMirror(k, max_num_seqs, self.kept) for k in range(len(engines))]
        self.state = self.mirrors[0]  # the version every engine runs, for checkpoints
        self.pending: list[list[tuple]] = [[] for _ in engines]  # admissions for the next step
        self.training: tuple | None = None  # (future, samples, version, t0, tokens, batch)
        self.pushes: list[tuple[int, float]] = []  # (version, monotonic time each engine got it)
        self.in_flight: list[list] = []  # resumed: the segments running at the checkpoint
        self._weights_ref = None
        # per round, for calibration: the driver's wall time, and the slowest engine's own step
        # time (the rest is the round's cost of being on Ray: calls, results, bookkeeping)
        self.stats.update(round_s=0.0, engine_s=0.0)

    # -- Backend interface -------------------------------------------------------------------

    def engine_infos(self):
        return self.mirrors

    def admit(self, engine: int, samples: list[int], generated: list[int]) -> None:
        import zlib

        for i, g in zip(samples, generated, strict=True):
            if g == 0 and self.kept[i]:  # the policy dropped the partial response
                self.kept[i], self.kept_lp[i], self.kept_ver[i] = [], [], []
            assert g == len(self.kept[i]), "controller and backend disagree on kept tokens"
            self.segment[i] += 1
            rid = f"{i}.{self.ctl.s.attempt[i]}.{self.segment[i]}"
            seed = zlib.crc32(f"{self.seed}:{rid}".encode())
            self.pending[engine].append((i, rid, self.prompts[i] + self.kept[i], len(self.kept[i]),
                                         self.max_tokens - len(self.kept[i]), self.temperature, seed))
            self.mirrors[engine].requests[i] = [False, 0]
        self.idle_reported = False

    def abort(self, samples: list[int]) -> list[int]:
        by_engine: dict[int, list[int]] = {}
        for i in samples:
            by_engine.setdefault(self.ctl.s.engine_of[i], []).append(i)
        for k, chunk in by_engine.items():
            unsent = {a[0] for a in self.pending[k]} & set(chunk)
            self.pending[k] = [a for a in self.pending[k] if a[0] not in unsent]
            sent = [i for i in chunk if i not in unsent]
            results = self.ray.get(self.workers[k].abort.remote(sent)) if sent else []
            for i, started, tokens, logprobs, stretches, t0 in results:
                if started:
                    self._keep_stretches(k, i, tokens, logprobs, stretches, t0, self.now(), "abort")
            for i in chunk:
                self.mirrors[k].requests.pop(i, None)
        return [len(self.kept[i]) for i in samples]

    def set_rollout(self, enabled: bool) -> None:
        self.enabled = enabled

    def run(self, controller) -> None:
        self.ctl = controller
        if not controller.s.version and not self.timeline.count("train"):
            controller.start()
        while True:
            if self.jobs:
                self.jobs.popleft()()
            elif self.training is not None and self._poll_update(block=False):
                pass
            elif self.enabled and any(m.requests for m in self.mirrors):
                self._round()
            elif self.training is not None:
                self._poll_update(block=True)
            else:
                self.flush()
                return
            self.flush()

    # -- the rounds --------------------------------------------------------------------------

    def _round(self) -> None:
        busy = [k for k, m in enumerate(self.mirrors) if m.requests]
        t_before, wall0 = self.now(), time.perf_counter()
        refs = [self.workers[k].step.remote(self.pending[k]) for k in busy]
        for k in busy:
            self.pending[k] = []
        results = self.ray.get(refs)
        self.stats["steps"] += 1
        self.stats["round_s"] += time.perf_counter() - wall0
        self.stats["engine_s"] += max(res["step_s"] for res in results)
        finished_by: dict[int, list[int]] = {}
        lengths: dict[int, int] = {}
        for k, res in zip(busy, results, strict=True):
            mirror = self.mirrors[k]
            t_after = res["t_after"] - self.t0
            if res["started"]:
                self.timeline.add("prefill", t_before, t_after, k, res["started"],
                                  sum(len(self.prompts[i]) + len(self.kept[i]) for i in res["started"]),
                                  sum(len(self.kept[i]) for i in res["started"]))
            for i in res["started"]:
                mirror.requests[i][0] = True
                if self.ctl.s.oldest[i] < 0:  # its first token comes from this engine's version
                    self.ctl.s.oldest[i] = mirror.version
            for i, count in res["counts"]:
                mirror.requests[i][1] = count
            for i, tokens, logprobs, stretches, reason, t0 in res["finished"]:
                mirror.requests.pop(i, None)
                self._keep_stretches(k, i, tokens, logprobs, stretches, t0, t_after, "finish")
                lengths[i] = len(self.kept[i])
                self.reason[i] = reason
                self.reward[i] = self.grade(i, self.kept[i], reason)
                self.rewards.finished(i, self.reward[i])
                finished_by.setdefault(k, []).append(i)
        if lengths:  # all bookkeeping first: no event may see another engine's unrecorded finish
            self.ctl.samples_finished(list(lengths), lengths)
        for k, samples in finished_by.items():
            if self.ctl.policy.listens_to_finishes:
                self._event(Event(EventKind.FINISHED, k, tuple(samples)))
        for k in finished_by:
            if not self.mirrors[k].requests and not self.pending[k]:
                self._event(Event(EventKind.ENGINE_IDLE, k))

    def _keep_stretches(self, k: int, i: int, tokens: list[int], logprobs: list[float],
                        stretches: list, t0: float, t_end: float, end: str) -> None:
        """Keep a segment's tokens with their versions; one timeline span per version stretch."""
        if tokens and not self.kept[i]:
            self.ctl.s.oldest[i] = stretches[0][0]
        self.kept[i] += tokens
        self.kept_lp[i] += logprobs
        attempt = self.ctl.s.attempt[i]
        for j, (version, count, start) in enumerate(stretches):
            self.kept_ver[i] += [version] * count
            last = j == len(stretches) - 1
            stop = t_end if last else stretches[j + 1][2] - self.t0
            begin = t0 - self.t0 if j == 0 else start - self.t0
            self.timeline.add("span", begin, max(stop, begin), k, i, attempt, version, count,
                              end if last else "sync")
        assert len(self.kept_ver[i]) == len(self.kept[i]), "per-token versions lost"

    # -- updates and weight pushes -------------------------------------------------------------

    def _train(self, samples: list[int], version: int) -> None:
        t0 = self.now()
        batch = [Rollout(i, i // self.n, self.prompts[i], self.kept[i], self.kept_lp[i],
                         self.kept_ver[i], self.reward[i]) for i in samples]
        future = self.trainer_actor.update.remote(batch, self.rewards.advantages(batch), version)
        tokens = sum(len(r.prompt) + len(r.response) for r in batch)
        self.training = (future, samples, version, t0, tokens, batch)
        if self.placement == "colocated":  # the shared devices wait for the update
            self._poll_update(block=True)

    def _poll_update(self, block: bool) -> bool:
        future, samples, version, t0, tokens, batch = self.training
        ready, _ = self.ray.wait([future], timeout=None if block else 0)
        if not ready:
            return False
        metrics = self.ray.get(future)
        self.training = None
        metrics.update(version=version, samples=len(samples),
                       reward_mean=sum(r.reward for r in batch) / len(batch),
                       response_len_mean=sum(len(r.response) for r in batch) / len(batch),
                       train_s=self.now() - t0)
        if self.on_update is not None:
            self.on_update(metrics, samples, (t0, version, list(samples), tokens))
        self.timeline.train(t0, self.now(), version, samples, tokens)
        self.ctl.update_done()
        return True

    def _sync(self, version: int) -> None:
        t0 = self.now()
        self._weights_ref = self.trainer_actor.state_dict.remote()  # into the object store, once
        self._push(self._weights_ref, version)
        self.timeline.sync(t0, self.now(), version)
        self.ctl.sync_done()

    def _push(self, weights, version: int) -> None:
        done = self.ray.get([w.load_weights.remote(weights, version) for w in self.workers])
        self.pushes += [(version, t) for t in done]
        for m in self.mirrors:
            m.version = version

    @property
    def synced(self) -> dict | None:  # the weights the engines run, for checkpoints
        return None if self._weights_ref is None else self.ray.get(self._weights_ref)

    @synced.setter
    def synced(self, value) -> None:
        self._weights_ref = None if value is None else self.ray.put(value)

    def restore_weights(self, weights: dict, version: int) -> None:
        self.synced = weights
        self._push(self._weights_ref, version)

    def flight_state(self) -> dict:
        """What a checkpoint keeps beyond the local backend's: each segment running on an
        engine, ``[engine, sample, tokens, log-probs, stretches, t0, t_end]``, times on the
        run's clock (stretches ``[version, tokens, start]``)."""
        segments, now = [], self.now()
        for k, worker in enumerate(self.workers):
            if not self.mirrors[k].running():
                continue
            for i, tokens, logprobs, stretches, t0 in self.ray.get(worker.in_flight.remote()):
                segments.append([k, i, tokens, logprobs,
                                 [[v, c, start - self.t0] for v, c, start in stretches], t0 - self.t0, now])
        return {"in_flight": segments}

    def readmit(self, samples: list[int]) -> None:
        """Resume: the segments running at the checkpoint are kept, then every admitted sample
        goes back to its engine from its kept tokens (one with none gets its ``oldest`` when its
        first token is made again, as on the local backend)."""
        for k, i, tokens, logprobs, stretches, t0, t_end in self.in_flight:
            shifted = [(v, c, start + self.t0) for v, c, start in stretches]
            self._keep_stretches(k, i, tokens, logprobs, shifted, t0 + self.t0, t_end, "resume")
            self.ctl.sample_preempted(i, len(self.kept[i]))
        self.in_flight = []
        by_engine: dict[int, list[int]] = {}
        for i in samples:
            if not self.kept[i]:
                self.ctl.s.oldest[i] = -1
            by_engine.setdefault(max(0, self.ctl.s.engine_of[i]), []).append(i)
        for k, chunk in sorted(by_engine.items()):
            self.admit(k, chunk, [len(self.kept[i]) for i in chunk])

    def close(self) -> None:
        for actor in [*self.workers, self.trainer_actor]:
            self.ray.kill(actor)


def check_in_flight(state: dict, where, engines: int) -> None:
    """One error line for a checkpoint's ``backend.in_flight`` that is not as
    :meth:`RayBackend.flight_state` wrote it: each segment on one of the run's engines, of an
    admitted sample, its stretches adding up to its tokens."""
    segments = state["backend"].get("in_flight", [])
    admitted = set(state["admitted"])

    def fits(seg) -> bool:
        if not (isinstance(seg, list) and len(seg) == 7):
            return False
        k, i, tokens, logprobs, stretches, t0, t_end = seg
        return (_count(k) and k < engines and _count(i) and i in admitted and _ids(tokens)
                and isinstance(logprobs, list) and len(logprobs) == len(tokens)
                and all(map(finite, logprobs)) and isinstance(stretches, list) and bool(stretches)
                and all(isinstance(x, list) and len(x) == 3 and _count(x[0]) and _count(x[1])
                        and finite(x[2]) for x in stretches)
                and sum(x[1] for x in stretches) == len(tokens) and finite(t0) and finite(t_end))

    if not isinstance(segments, list):
        raise ConfigError(f"{where}: field 'backend.in_flight': expected a list, got "
                          f"{short_repr(segments, SHOWN)}")
    for seg in segments:
        if not fits(seg):
            raise ConfigError(f"{where}: field 'backend.in_flight': {short_repr(seg, SHOWN)} is not "
                              "a segment [engine, sample, tokens, log-probs, stretches, t0, t_end] "
                              "of an admitted sample on one of the run's engines")
