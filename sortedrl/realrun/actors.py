"""Engines and the trainer as Ray actors, and the connection to Ray.

Each engine actor owns one in-process :class:`~sortedrl.realrun.engine.VllmEngine` and records,
per request, the policy version of every token it makes: the engine's version at the step that
produced it. A weight push runs between two engine steps (Ray runs an actor's calls one at a
time, in order), so a request that is running when it arrives keeps going with the new weights
(mid-sequence, as AReaL does) and its tokens split into *stretches* of one version each.

The trainer actor owns the :class:`~sortedrl.realrun.trainer.GRPOTrainer`. Its ``state_dict``
returns the weights into Ray's object store once; the driver hands that one reference to every
engine, which reads it from the store (zero-copy for each engine on the same node). Checkpoints
are written by the trainer actor itself into the run directory (the driver and the actors share a
file system: a local Ray, or a cluster with a shared directory).

Deliberate simplifications: engines step in lockstep rounds (the driver waits for every engine's
step before acting), and times are ``time.monotonic`` of the host, which all processes on one node
share.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

from sortedrl.errors import ConfigError

ENGINE_CPUS = 0.5  # fractional, so two or three actors fit on a two-core machine
TRAINER_CPUS = 0.5
ACTOR_ENV = {"OMP_NUM_THREADS": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "TOKENIZERS_PARALLELISM": "false",
             "VLLM_LOGGING_LEVEL": "WARNING", "VLLM_LOGGING_STREAM": "ext://sys.stderr"}


def connect(address: str | None, num_cpus: int | None = None, wait_s: float = 10.0) -> None:
    """Join the Ray cluster at ``address``, or start a local one. An address that does not answer
    within ``wait_s`` seconds is a :class:`ConfigError`, raised before anything is written."""
    import ray

    remote = bool(address) and address != "auto"
    if remote:
        check_reachable(address, wait_s)
    if ray.is_initialized():
        return
    env = {"env_vars": _actor_env()}
    if remote:
        ray.init(address=address, include_dashboard=False, log_to_driver=False, runtime_env=env,
                 logging_level=logging.ERROR)
        return
    try:
        ray.init(address=address, num_cpus=None if address else (num_cpus or os.cpu_count() or 2),
                 include_dashboard=False, log_to_driver=False, runtime_env=env, logging_level=logging.ERROR)
    except ConnectionError as exc:
        raise ConfigError(f"--ray {address}: no Ray cluster answers ({exc})") from None


def _actor_env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[2])  # this checkout, for the actors' imports
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return {**ACTOR_ENV, "PYTHONPATH": path}


def check_reachable(address: str, wait_s: float) -> None:
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray {address}: expected HOST:PORT (or ray://HOST:PORT)")
    try:
        with socket.create_connection((host, int(port)), timeout=wait_s):
            pass
    except OSError as exc:
        raise ConfigError(f"--ray {address}: no Ray cluster answers within {wait_s:g} s ({exc})") from None


# -- the engine actor -------------------------------------------------------------------------------

class EngineWorker:
    """One vLLM engine in its own process; every call runs between two engine steps."""

    def __init__(self, index: int, model_dir: str, max_num_seqs: int, max_model_len: int,
                 engine_kwargs: dict) -> None:
        for k, v in ACTOR_ENV.items():
            os.environ.setdefault(k, v)
        from sortedrl.realrun.engine import VllmEngine

        self.index = index
        self.engine = VllmEngine(model_dir, max_num_seqs, max_model_len, **engine_kwargs)
        self.version = 0
        self.stretches: dict[int, list[list]] = {}  # sample -> [[version, tokens, t_start], ...]

    def step(self, adds: list[tuple]) -> dict:
        """Add the queued requests, run one engine step; report starts, finishes and counts."""
        for sample, *args in adds:
            self.engine.add(sample, *args)
            self.stretches[sample] = []
        t_before = time.monotonic()
        started, finished = self.engine.step(time.monotonic)
        t_after = time.monotonic()
        for r in started:
            self.stretches[r.sample] = [[self.version, 0, r.t0]]
        for r in self.engine.requests.values():
            if r.started:
                self._count(r.sample, r.count)
        done = []
        for f in finished:
            self._count(f.sample, len(f.tokens))
            done.append((f.sample, f.tokens, f.logprobs, self.stretches.pop(f.sample), f.reason, f.t0))
        counts = [(r.sample, r.count) for r in self.engine.requests.values() if r.started]
        return {"started": [r.sample for r in started], "finished": done, "counts": counts,
                "t_after": t_after, "step_s": t_after - t_before}

    def _count(self, sample: int, count: int) -> None:
        stretches = self.stretches[sample]
        stretches[-1][1] = count - sum(s[1] for s in stretches[:-1])

    def abort(self, samples: list[int]) -> list[tuple]:
        out = []
        for i in samples:
            req = self.engine.abort(i)
            stretches = self.stretches.pop(i, [])
            if req.started:
                self.stretches[i] = stretches
                self._count(i, req.count)
                stretches = self.stretches.pop(i)
            out.append((i, req.started, req.tokens, req.logprobs, stretches, req.t0))
        return out

    def in_flight(self) -> list[tuple]:
        """The running requests' segments so far, as :meth:`abort` returns them, the requests
        left running (a checkpoint keeps them)."""
        return [(r.sample, r.tokens, r.logprobs, [list(s) for s in self.stretches[r.sample]], r.t0)
                for r in self.engine.requests.values() if r.started]

    def load_weights(self, weights: dict, version: int) -> float:
        """New weights between two steps; running requests continue under ``version``."""
        self.engine.load_weights(weights, version)
        now = time.monotonic()
        for r in self.engine.requests.values():
            if r.started:
                self.stretches[r.sample].append([version, 0, now])
        self.version = version
        return now

    def pid(self) -> int:
        return os.getpid()

    def close(self) -> None:
        self.engine.close()


# -- the trainer actor ------------------------------------------------------------------------------

class TrainerWorker:
    """The GRPO trainer in its own process."""

    def __init__(self, model_dir: str, **kwargs) -> None:
        for k, v in ACTOR_ENV.items():
            os.environ.setdefault(k, v)
        from sortedrl.realrun.trainer import GRPOTrainer

        self.trainer = GRPOTrainer(model_dir, **kwargs)

    def pid(self) -> int:
        return os.getpid()

    def update(self, batch: list, advantages: list[float], version: int) -> dict:
        return self.trainer.update(batch, advantages, version)

    def timed_update(self, batch: list, advantages: list[float], version: int) -> float:
        """One update; its seconds as this process saw them (calibration: ``realrun/contention.py``)."""
        t0 = time.perf_counter()
        self.trainer.update(batch, advantages, version)
        return time.perf_counter() - t0

    def state_dict(self) -> dict:
        return {k: v.detach().clone() for k, v in self.trainer.state_dict().items()}

    def save(self, directory: str) -> dict:
        from sortedrl.realrun import checkpoint as ckpt_io

        return ckpt_io.save_trainer(Path(directory), self.trainer)

    def load(self, directory: str, optimizer: dict) -> None:
        from sortedrl.realrun import checkpoint as ckpt_io

        ckpt_io.load_trainer(Path(directory), self.trainer, optimizer)


class RemoteTrainer:
    """The driver's handle on the trainer actor, for checkpoints (blocking calls)."""

    def __init__(self, actor) -> None:
        self.actor = actor

    def save(self, directory: str) -> dict:
        import ray

        return ray.get(self.actor.save.remote(directory))

    def load(self, directory: str, optimizer: dict) -> None:
        import ray

        try:
            ray.get(self.actor.load.remote(directory, optimizer))
        except ConfigError as e:  # raised in the actor: its line, without the remote traceback
            raise ConfigError(str(getattr(e, "cause", e))) from None


def start_actors(n_engines: int, model_dir: str, max_num_seqs: int, max_model_len: int,
                 engine_kwargs: dict, trainer_kwargs: dict):
    """Start the engine actors and the trainer actor; wait until all are built."""
    import ray

    engine_cls = ray.remote(num_cpus=ENGINE_CPUS)(EngineWorker)
    trainer_cls = ray.remote(num_cpus=TRAINER_CPUS)(TrainerWorker)
    opts = {"runtime_env": {"env_vars": _actor_env()}}
    engines = [engine_cls.options(**opts).remote(k, model_dir, max_num_seqs, max_model_len,
                                                 engine_kwargs) for k in range(n_engines)]
    trainer = trainer_cls.options(**opts).remote(model_dir, **trainer_kwargs)
    ray.get([e.__ray_ready__.remote() for e in engines] + [trainer.__ray_ready__.remote()])
    return engines, trainer
