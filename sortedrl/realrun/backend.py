"""The real backend: the controller's Backend interface over vLLM and the torch trainer.

Time is the wall clock. One in-process vLLM engine generates; the trainer runs in the same
process on the same (CPU or GPU) device, so placement is colocated: the engine does not step
while an update runs. The controller and the policy are the simulator's, unchanged. The run loop
steps the engine, reports finishes and idleness, and runs the updates and weight syncs the
controller asked for, one at a time, so events never arrive while the controller is acting.

Per sample it keeps what the trainer needs: response tokens so far, vLLM's behaviour log-prob of
each token and the policy version that sampled it (exact per-token staleness), and the reward.
"""

from __future__ import annotations

import time
import zlib
from collections import deque
from collections.abc import Callable

from sortedrl.policies.base import Event, EventKind
from sortedrl.policies.controller import Backend, Controller
from sortedrl.realrun.engine import VllmEngine
from sortedrl.realrun.trainer import GroupRewards, GRPOTrainer, Rollout
from sortedrl.timeline import Timeline


class RealEngineState:
    """The public half of the real engine, as policies see it."""

    def __init__(self, engine: VllmEngine, max_num_seqs: int, kept: list[list[int]]) -> None:
        self.index, self.max_num_seqs, self.version = 0, max_num_seqs, 0
        self._engine, self._kept = engine, kept

    def running(self) -> tuple[int, ...]:
        return tuple(r.sample for r in self._engine.requests.values() if r.started)

    def queued(self) -> tuple[int, ...]:
        return tuple(r.sample for r in self._engine.requests.values() if not r.started)

    def load(self) -> int:
        return len(self._engine.requests)

    def tokens(self, sample: int, now: float) -> int | None:
        rid = self._engine.by_sample.get(sample)
        if rid is None:
            return None
        return len(self._kept[sample]) + self._engine.requests[rid].count


class RealBackend(Backend):
    placement = "colocated"

    def __init__(self, engine: VllmEngine, trainer: GRPOTrainer, prompts: list[list[int]],
                 grade: Callable[[int, list[int], str], float], group_size: int, max_tokens: int,
                 temperature: float,
                 max_num_seqs: int, timeline: Timeline, seed: int = 0, eos: int | None = None,
                 on_update: Callable[[dict, list[int], tuple], None] | None = None,
                 clock_offset: float = 0.0) -> None:
        self.engine, self.trainer, self.timeline = engine, trainer, timeline
        self.prompts, self.grade, self.n = prompts, grade, group_size
        self.max_tokens, self.temperature, self.seed, self.eos = max_tokens, temperature, seed, eos
        n = len(prompts)
        self.kept: list[list[int]] = [[] for _ in range(n)]
        self.kept_lp: list[list[float]] = [[] for _ in range(n)]
        self.kept_ver: list[list[int]] = [[] for _ in range(n)]
        self.reward: dict[int, float] = {}
        self.reason: dict[int, str] = {}  # "stop" (EOS) or "length" (hit max_tokens)
        self.rewards = GroupRewards(group_size)  # advantages from trained attempts only
        self.segment = [0] * n
        self.state = RealEngineState(engine, max_num_seqs, self.kept)
        self.jobs: deque[Callable[[], None]] = deque()
        self.synced: dict | None = None  # the weights the engine runs, once a sync pushed them
        self.enabled = True
        self.idle_reported = True
        self.on_update = on_update
        self.flush: Callable[[], None] = lambda: None  # the run's logs, after each step or job
        self.t0 = time.monotonic() - clock_offset
        # host time the runner adds around the engine, for calibration: per step, per admission
        self.stats = {"steps": 0, "host_s": 0.0, "admitted": 0, "admit_s": 0.0,
                      "events": 0, "event_s": 0.0}
        self.step_log: list[tuple] | None = None  # (batch, new, new tokens, new pairs, kv, s)
        self.ctl: Controller | None = None

    # -- Backend interface -------------------------------------------------------------------

    def engine_infos(self):
        return [self.state]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def admit(self, engine: int, samples: list[int], generated: list[int]) -> None:
        t_start = time.perf_counter()
        for i, g in zip(samples, generated, strict=True):
            if g == 0 and self.kept[i]:  # the policy dropped the partial response
                self.kept[i], self.kept_lp[i], self.kept_ver[i] = [], [], []
            assert g == len(self.kept[i]), "controller and backend disagree on kept tokens"
            self.segment[i] += 1
            attempt = self.ctl.s.attempt[i]
            rid = f"{i}.{attempt}.{self.segment[i]}"
            seed = zlib.crc32(f"{self.seed}:{rid}".encode())
            self.engine.add(i, rid, self.prompts[i] + self.kept[i], len(self.kept[i]),
                            self._budget(i), self.temperature, seed)
        self.idle_reported = False
        self.stats["admitted"] += len(samples)
        self.stats["admit_s"] += time.perf_counter() - t_start

    def abort(self, samples: list[int]) -> list[int]:
        now, out = self.now(), []
        for i in samples:
            req = self.engine.abort(i)
            if req.started:
                self._keep(i, req.tokens, req.logprobs)
                self.timeline.add("span", req.t0, now, 0, i, self.ctl.s.attempt[i], self.state.version,
                                  len(req.tokens), "abort")
            out.append(len(self.kept[i]))
        return out

    def train(self, samples: list[int], version: int) -> None:
        self.jobs.append(lambda: self._train(list(samples), version))

    def sync(self, version: int) -> None:
        self.jobs.append(lambda: self._sync(version))

    def set_rollout(self, enabled: bool) -> None:
        self.enabled = enabled

    def run(self, controller: Controller) -> None:
        self.ctl = controller
        if not controller.s.version and not self.timeline.count("train"):
            controller.start()
        while True:
            if self.jobs:
                self.jobs.popleft()()
            elif self.enabled and self.engine.has_unfinished():
                self._step()
            else:
                self.flush()
                return
            self.flush()

    def restore_weights(self, weights: dict, version: int) -> None:
        """Resume: the engine runs the weights last pushed before the checkpoint."""
        self.engine.load_weights(weights, version)
        self.synced = weights

    def readmit(self, samples: list[int]) -> None:
        """Resume: samples that were in the engine go back, from the tokens they kept."""
        self.admit(0, samples, [len(self.kept[i]) for i in samples])

    # -- the loop ------------------------------------------------------------------------------

    # hooks that multi-turn runs (realrun/agent.py) override: a request's token budget, the
    # tokens a sample generated, and what the trainer gets
    def _budget(self, i: int) -> int:
        return self.max_tokens - len(self.kept[i])

    def generated_tokens(self, i: int) -> int:
        """Tokens the model generated in sample ``i``'s kept response (tool output excluded)."""
        return len(self.kept[i])

    def _rollout(self, i: int) -> Rollout:
        return Rollout(i, i // self.n, self.prompts[i], self.kept[i], self.kept_lp[i],
                       self.kept_ver[i], self.reward[i])

    def _keep(self, i: int, tokens: list[int], logprobs: list[float]) -> None:
        if tokens and not self.kept[i]:
            self.ctl.s.oldest[i] = self.state.version  # the version of its oldest kept token
        self.kept[i] += tokens
        self.kept_lp[i] += logprobs
        self.kept_ver[i] += [self.state.version] * len(tokens)

    def _step(self) -> None:
        st = self.stats
        admits0, events0 = st["admit_s"], st["event_s"]
        log = self.step_log
        if log is not None:  # the step vLLM is about to run: up to max_num_seqs, FCFS
            reqs = list(self.engine.requests.values())
            running = [r for r in reqs if r.started]
            fresh = [len(r.prompt) for r in reqs if not r.started][: max(0, self.state.max_num_seqs - len(running))]
            shape = (len(running) + len(fresh), len(fresh), sum(fresh),
                     sum(x * (x + 1) // 2 for x in fresh),
                     sum(len(r.prompt) + r.count for r in running) + sum(fresh))
            h0 = time.perf_counter()
        t_before = self.now()
        started, finished = self.engine.step(self.now)
        t_after = self.now()
        h1 = time.perf_counter()
        if log is not None:
            log.append((*shape, h1 - h0))
        try:
            self._after_step(started, finished, t_before, t_after)
        finally:  # host time around the engine step; admissions and events have their own terms
            st["steps"] += 1
            st["host_s"] += (time.perf_counter() - h1 - (st["admit_s"] - admits0)
                             - (st["event_s"] - events0))

    def _after_step(self, started, finished, t_before: float, t_after: float) -> None:
        if started:
            self.timeline.add("prefill", t_before, t_after, 0, [r.sample for r in started],
                              sum(len(r.prompt) for r in started), sum(r.kept for r in started))
        if not finished:
            return
        lengths = {}
        for f in finished:
            i = f.sample
            self._keep(i, f.tokens, f.logprobs)
            response = self.kept[i]
            lengths[i] = self.generated_tokens(i)
            self.reason[i] = f.reason
            self.reward[i] = self.grade(i, response, f.reason)
            self.rewards.finished(i, self.reward[i])
            self.timeline.add("span", f.t0, t_after, 0, i, self.ctl.s.attempt[i],
                              self.state.version, len(f.tokens), "finish")
        samples = list(lengths)
        self.ctl.samples_finished(samples, lengths)
        if self.ctl.policy.listens_to_finishes:
            self._event(Event(EventKind.FINISHED, 0, tuple(samples)))
        if not self.engine.has_unfinished() and not self.idle_reported:
            self.idle_reported = True
            self._event(Event(EventKind.ENGINE_IDLE, 0))

    def _event(self, event: Event) -> None:
        """Dispatch an engine event, counting the host time the policy's reaction takes."""
        st = self.stats
        h0, admits0 = time.perf_counter(), st["admit_s"]
        self.ctl.dispatch(event)
        st["events"] += 1
        st["event_s"] += time.perf_counter() - h0 - (st["admit_s"] - admits0)

    def _train(self, samples: list[int], version: int) -> None:
        t0 = self.now()
        batch = [self._rollout(i) for i in samples]
        self.engine.sleep()  # colocated on a GPU: the trainer gets the memory
        metrics = self.trainer.update(batch, self.rewards.advantages(batch), version)
        self.engine.wake()
        tokens = sum(len(r.prompt) + len(r.response) for r in batch)
        metrics.update(version=version, samples=len(samples),
                       reward_mean=sum(r.reward for r in batch) / len(batch),
                       response_len_mean=sum(map(self.generated_tokens, samples)) / len(batch),
                       train_s=self.now() - t0)
        if self.on_update is not None:  # logs and the checkpoint are part of the update's time
            self.on_update(metrics, samples, (t0, version, list(samples), tokens))
        self.timeline.train(t0, self.now(), version, samples, tokens)
        self.ctl.update_done()

    def _sync(self, version: int) -> None:
        t0 = self.now()
        weights = self.trainer.state_dict()
        self.engine.load_weights(weights, version)
        self.synced = {k: v.detach().clone() for k, v in weights.items()}  # for checkpoints
        self.state.version = version
        self.timeline.sync(t0, self.now(), version)
        self.ctl.sync_done()
