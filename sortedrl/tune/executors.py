"""Where trials run: in this process, in local processes, or on a Ray cluster.

Every trial is a deterministic simulation, so the backend changes only the wall time, never the
results: the search collects results by trial id and decides the next round from them alone.
The trace and cluster travel to each worker once (process initializer, ``ray.put``), not per
trial.

A trial whose knobs the policy refuses (they clash with each other, ``filter_groups=true`` with
``harvest=samples``, or with the trace, tail_batch ``responses`` above its group size) is not run:
:func:`run_trial` returns ``{"skipped": reason}``, the reason naming the ``--param`` values, and
the search records it under ``skipped`` as it does a cluster shape that cannot run.
:func:`check_spaces` refuses up front a policy whose every combination clashes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from sortedrl.compare import cluster_for
from sortedrl.errors import ConfigError
from sortedrl.interrupts import signals_deferred
from sortedrl.parallel import shut_down, worker_pool, worker_signals
from sortedrl.policies.base import Policy, parse_params
from sortedrl.policies.registry import make_policy, policy_class
from sortedrl.scratch import temp_scratch
from sortedrl.sim.cluster import Cluster
from sortedrl.sim.run import simulate
from sortedrl.traces.schema import Trace
from sortedrl.tune.space import CLUSTER, Space, as_sets, split_cluster

Job = tuple[str, list[str]]  # (policy name, ["key=value", ...])
SKIPPED = "skipped"  # run_trial's answer for knobs the policy refuses: {SKIPPED: reason}
MAX_CHECKED = 10_000  # check_spaces enumerates a policy's knob combinations up to this many

_worker: dict = {}


def shaped(cluster: Cluster, changes: dict, trace: Trace, placements, policy: str | None = None) -> Cluster:
    """The base cluster with a trial's shape applied (and split for a policy that needs it:
    ``policy``, its name for the error); raises ConfigError for a shape that cannot run the trace."""
    if changes:
        label = ",".join(f"{k}={v}" for k, v in changes.items())
        cluster = dataclasses.replace(cluster, name=f"{cluster.name}[{label}]", **changes,
                                      source=cluster.source and f"{cluster.source}[{label}]")
        cluster.validate(cluster.where)
    cluster = cluster_for(placements, cluster, policy)
    cluster.check_trace_fits(trace)
    return cluster


def trial_policy(name: str, knobs: list[str], trace: Trace) -> Policy:
    """The policy of a trial; knobs it refuses are one ConfigError naming the ``--param`` values
    (``--param NAME.key=value, ...: ...``), not ``--set``, which tune has not."""
    where = "--param " + ", ".join(f"{name}.{k}" for k in knobs)
    parse_params(policy_class(name).Params, knobs, name, where)  # a clash among the knobs
    try:
        return make_policy(name, knobs, trace)  # a clash with the trace
    except ConfigError as e:
        if not knobs:  # the defaults: no --param to blame
            raise
        raise ConfigError(f"{where}: {e}") from None


def check_spaces(spaces: list[Space], trace: Trace) -> None:
    """Refuse, before any trial runs, a policy none of whose ``--param`` combinations it accepts.

    A policy's finite knob space of at most :data:`MAX_CHECKED` combinations is enumerated up to
    the first it accepts; a space with a continuous range, or a larger one, is not (some of its
    trials may clash: they are skipped, see :func:`run_trial`)."""
    for space in spaces:
        dims = [d for d in space.dims if not d.key.startswith(CLUSTER + ".")]
        if not dims or not all(d.finite for d in dims):
            continue
        size = math.prod(len(d.grid()) for d in dims)
        if size > MAX_CHECKED:
            continue
        first = None
        for combo in itertools.product(*(d.grid() for d in dims)):
            try:
                trial_policy(space.policy, as_sets({d.key: v for d, v in zip(dims, combo, strict=True)}), trace)
                break
            except ConfigError as e:
                if first is None:
                    first = e
        else:
            every = f" (each of {space.policy}'s {size} --param combinations clashes)" if size > 1 else ""
            raise ConfigError(f"{first}{every}")


def run_trial(trace: Trace, cluster: Cluster, seed: int, job: Job, regen: str = "resample",
              scratch_root: Path | None = None) -> dict:
    """A trial's summary, or ``{"skipped": reason}`` when the policy refuses its knobs. Its
    timeline waits in a scratch directory in ``$TMPDIR``, or in ``scratch_root``."""
    name, sets = job
    changes, knobs = split_cluster(sets)
    try:
        policy = trial_policy(name, knobs, trace)
    except ConfigError as e:
        if not knobs:
            raise
        return {SKIPPED: str(e)}
    used = shaped(cluster, changes, trace, policy.placements, policy.name)
    with temp_scratch("tune", scratch_root) as spill:  # a long trial's timeline waits on disk
        summary = simulate(trace, policy, used, seed=seed, regen=regen, spill_dir=spill).summary
    summary["gpus"] = used.gpus
    summary["gpu_hours"] = round(used.gpus * summary["makespan_s"] / 3600.0, 6)  # as every float
    return summary


def _init(trace: Trace, cluster: Cluster, seed: int, regen: str) -> None:
    worker_signals()
    _worker.update(trace=trace, cluster=cluster, seed=seed, regen=regen)


def _run(job: Job) -> dict:
    return run_trial(_worker["trace"], _worker["cluster"], _worker["seed"], job, _worker["regen"])


class Executor:
    """Runs a batch of trials and returns their summaries in order."""

    name = "inline"

    def __init__(self, trace: Trace, cluster: Cluster, seed: int, regen: str = "resample") -> None:
        self.trace, self.cluster, self.seed, self.regen = trace, cluster, seed, regen

    def map(self, jobs: Sequence[Job], done: Callable[[int], None]) -> list[dict]:
        out = []
        for job in jobs:
            out.append(run_trial(self.trace, self.cluster, self.seed, job, self.regen))
            done(1)
        return out

    def close(self) -> None:
        pass


class LocalProcesses(Executor):
    name = "processes"

    def __init__(self, trace: Trace, cluster: Cluster, seed: int, workers: int,
                 regen: str = "resample") -> None:
        super().__init__(trace, cluster, seed, regen)
        self.forks = worker_pool()  # (its children take the workers' signals as they start)
        self.forks.__enter__()
        self.pool = ProcessPoolExecutor(max_workers=workers, initializer=_init,
                                        initargs=(trace, cluster, seed, regen))
        self.stopped = False  # map() ended in an error, Ctrl-C or SIGTERM: stop the workers

    def map(self, jobs: Sequence[Job], done: Callable[[int], None]) -> list[dict]:
        out = []
        try:
            futures = [self.pool.submit(_run, job) for job in jobs]
            for f in futures:
                out.append(f.result())
                done(1)
        except BaseException:  # an error, Ctrl-C or SIGTERM: the other trials would be wasted
            self.stopped = True  # (close(), which the caller's finally runs at once, stops them)
            raise
        return out

    def close(self) -> None:
        try:
            shut_down(self.pool, stop=self.stopped)
        finally:
            self.forks.__exit__(None, None, None)


class RayCluster(Executor):
    """Ray: ``address`` is ``auto`` (a running cluster), ``local`` (start one here) or an address."""

    name = "ray"

    def __init__(self, trace: Trace, cluster: Cluster, seed: int, address: str,
                 regen: str = "resample") -> None:
        super().__init__(trace, cluster, seed, regen)
        try:
            import ray
        except ImportError:
            raise ConfigError("--ray needs Ray: pip install 'sortedrl[ray]'") from None
        self.ray = ray
        self.started = False
        # a Ray started here runs its workers on this machine: their trials' scratch goes in one
        # of the driver's, which close() removes, since ray.shutdown() kills a worker mid-trial
        # before it can remove its own (Ctrl-C); a cluster's workers may be on other machines
        self.scratch = contextlib.ExitStack()
        if not ray.is_initialized():
            if address not in ("local", "auto"):  # (else Ray retried for 20 s, 20 log lines)
                from sortedrl.realrun.actors import check_reachable

                check_reachable(address, 10.0)
            self._start(address)
        try:  # (a failure here, or Ctrl-C, must not leave the scratch or the Ray started here)
            self.scratch_root = self.scratch.enter_context(temp_scratch("tune")) if address == "local" else None
            self.trace_ref = ray.put(trace)
            self.remote = ray.remote(run_trial)
        except BaseException:
            self.close()
            raise

    def _start(self, address: str) -> None:
        """Start or join Ray. A Ctrl-C within its start waits for it (one there was swallowed by
        Ray's fork handlers, and tune ran on, or crashed it), then stops it again, as after."""
        ray = self.ray
        # a Ray started here keeps its session files (logs, sockets) in a scratch directory that
        # close() removes once Ray is down, not in /tmp/ray, where each run left 200 KB; in /tmp,
        # as Ray's own default, since its socket paths must stay under 107 bytes (103 on macOS)
        # and $TMPDIR may be long; a RAY_TMPDIR the user set is theirs
        mine = address == "local" and not os.environ.get("RAY_TMPDIR") and Path("/tmp").is_dir()
        where = {"_temp_dir": str(self.scratch.enter_context(temp_scratch("ray", Path("/tmp"))))} if mine else {}
        try:  # (its INFO line, "Started a local Ray instance", is not ours to print)
            with signals_deferred(), _without_rays_sigterm_handler(ray):
                ray.init(address=None if address == "local" else address,
                         include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR, **where)
                self.started = True
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ConfigError(f"--ray {address}: cannot connect ({str(e).splitlines()[0]})") from None
        except BaseException:  # (the Ctrl-C that waited)
            self.close()
            raise

    def map(self, jobs: Sequence[Job], done: Callable[[int], None]) -> list[dict]:
        refs = [self.remote.remote(self.trace_ref, self.cluster, self.seed, job, self.regen, self.scratch_root)
                for job in jobs]
        out = []
        for ref in refs:
            out.append(self.ray.get(ref))
            done(1)
        return out

    def close(self) -> None:
        try:
            if self.started:
                with signals_deferred():  # (one Ctrl-C does not cut Ray's shutdown short: a segfault)
                    self.ray.shutdown()
        finally:
            self.scratch.close()


@contextlib.contextmanager
def _without_rays_sigterm_handler(ray):
    """``ray.init`` puts its own SIGTERM handler (``sys.exit(15)``) over the one holding the
    signal back: a SIGTERM while Ray started ended tune with a bare exit 15, no line, or was lost
    in Ray's fork hooks. Within the start it is not installed, so SIGTERM waits as Ctrl-C does."""
    utils = getattr(getattr(ray, "_private", None), "utils", None)
    saved = getattr(utils, "set_sigterm_handler", None)
    if saved is None:
        yield
        return
    utils.set_sigterm_handler = lambda handler: None
    try:
        yield
    finally:
        utils.set_sigterm_handler = saved


def make_executor(trace: Trace, cluster: Cluster, seed: int, workers: int, ray: str | None,
                  regen: str = "resample") -> Executor:
    if ray:
        return RayCluster(trace, cluster, seed, ray, regen)
    if workers > 1:
        return LocalProcesses(trace, cluster, seed, workers, regen)
    return Executor(trace, cluster, seed, regen)
