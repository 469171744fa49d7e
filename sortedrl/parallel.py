"""Independent simulations at once, in local processes: compare's policies, forecast's runs.

Each simulation is deterministic and independent of the others, so running several in worker
processes changes only the wall time: the results come back in the order of the jobs, the same
as one process gives them, byte for byte. What every job shares (the trace, the cluster) reaches
each worker once, when the pool forks it (fork, named: not the platform's default), not with
every job; a job and its result travel by pickle. Each worker holds a whole simulation of its
own, so memory grows with the workers. (``tune`` has its own executors, Ray included:
:mod:`sortedrl.tune.executors`.) A run's progress comes back through counters in shared memory
that the workers inherit at the fork too (:mod:`sortedrl.parallel_progress`), so the parent's
bar moves within the runs, not only as each one ends.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from typing import TYPE_CHECKING

from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.interrupts import signals_deferred
from sortedrl.scratch import forget_temp_scratches, remove_temp_scratches

if TYPE_CHECKING:
    from sortedrl.parallel_progress import SampleCounts

_worker: dict = {}  # in a worker process: the job function and what the jobs share
_pools = [0]  # this process's worker pools alive now: a child forked meanwhile is a worker


def check_workers(workers: int) -> None:
    if workers < 1:
        raise ConfigError(f"--workers {workers}: must be >= 1")


def worker_signals() -> None:
    """In a worker process (a pool's initializer). Ctrl-C and a hang-up reach the whole
    foreground process group: the parent stops the workers, and an idle worker must not print
    an interrupt of its own. SIGTERM, how the parent stops them, ends a worker at once, its
    scratch directory removed (a forked worker would otherwise inherit the CLI's handler, which
    unwinds a command, and a pool's worker goes on to its next job after one that raised)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _end_worker)


@contextlib.contextmanager
def worker_pool():
    """Around a pool's life: a child forked in it takes the workers' signals (and forgets the
    parent's scratch directories) as it starts, before any of its Python runs. The pool's
    initializer does the same, too late for a SIGTERM that lands between the fork and it (the
    parent stopping the pool at once): the child then ran the parent's handler, and its
    bootstrap printed a traceback beside the parent's one line.

    The temporary directory is looked up here, in the parent, so that the children inherit it:
    a child that looked it up itself (its first scratch directory) would probe ``$TMPDIR`` with
    a file of a random name, which a SIGTERM in that moment left there (the worker ends with
    ``os._exit``, past the probe's clean-up)."""
    tempfile.gettempdir()
    _pools[0] += 1
    try:
        yield
    finally:
        _pools[0] -= 1


def _after_fork_in_child() -> None:
    if _pools[0]:
        _pools[0] = 0  # (this worker's own children, if any, are not pool workers)
        forget_temp_scratches()
        worker_signals()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _end_worker(signum: int, frame: object) -> None:
    remove_temp_scratches()
    os._exit(128 + signum)


STOP_WAIT_S = 5.0  # a stopped worker ends at once; one that has not by then lost its SIGTERM


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """End a pool's worker processes now, not after their runs (an error, Ctrl-C, SIGTERM), and
    reap them. One that has not ended ``STOP_WAIT_S`` after its SIGTERM lost it (CPython clears
    a signal that lands between the fork and its after-fork reset, and one noted by a deferral
    the child inherited is never raised there) and is killed."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + STOP_WAIT_S
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


def shut_down(pool: ProcessPoolExecutor, stop: bool) -> None:
    """``pool.shutdown``; ``stop``: after an error, Ctrl-C or SIGTERM, the workers are stopped
    first (:func:`stop_workers`), not left to finish their runs. An interrupt raised while the
    pool's first ``submit`` starts its manager thread (the workers are forked first) leaves a
    thread that never started, which ``shutdown`` cannot join: the workers are stopped and
    reaped already, so its RuntimeError is dropped (else it replaced the interrupt's one line
    with a traceback)."""
    if stop:
        try:
            stop_workers(pool)
        finally:  # (a second Ctrl-C in the join: the pipe is closed all the same)
            _close_result_writer(pool)
    try:
        pool.shutdown(wait=True, cancel_futures=True)
    except RuntimeError:
        if not stop:
            raise


def _close_result_writer(pool: ProcessPoolExecutor) -> None:
    """Close this process's copy of the write end of the pool's result pipe, once its workers
    are gone. A worker stopped while it wrote a result (a whole run, pickled) leaves part of a
    message in the pipe, and the pool's manager thread waits in its read for the rest: for
    ever, since this process holds a write end too, and ``shutdown`` joins that thread (one
    Ctrl-C or SIGTERM in several hung ``compare --workers 2``). With no writer left the read
    ends (end of file mid-message), the pool counts itself broken, and its thread exits. The
    parent never writes there (its manager is woken through a pipe of its own)."""
    queue = getattr(pool, "_result_queue", None)
    writer = getattr(queue, "_writer", None)
    if writer is not None:
        with contextlib.suppress(OSError):
            writer.close()


def _start(fn: Callable, shared: object, counts: SampleCounts | None) -> None:
    worker_signals()
    _worker.update(fn=fn, shared=shared, counts=counts)


def _call(index: int, job: object) -> object:
    return _run_job(_worker["fn"], _worker["shared"], job, _worker["counts"], index)


def _run_job(fn: Callable, shared: object, job: object, counts: SampleCounts | None,
             index: int) -> object:
    """``fn(shared, job)``, its run's samples generated written to ``counts``'s ``index``th
    counter (its last count also for a run that raised or ended without a note)."""
    if counts is None:
        return fn(shared, job)
    counts.job = index
    try:
        return fn(shared, job)
    finally:
        counts.unwatch()


def run_jobs(fn: Callable[[object, object], object], shared: object, jobs: Sequence,
             workers: int = 1, done: Callable[[], None] | None = None,
             counts: SampleCounts | None = None) -> list:
    """``[fn(shared, job) for job in jobs]``, in up to ``workers`` processes when that is more
    than one; ``done()`` as each job ends. The first job that raises stops the rest (its error
    is raised here); ``fn`` must be a module-level function (workers find it by name).
    ``counts``: one counter per job, the same object that ``shared`` hands the simulations as
    their ``progress`` (in a worker it is the forked copy of it: the same memory)."""
    if workers <= 1 or len(jobs) <= 1:
        out = []
        for index, job in enumerate(jobs):
            out.append(_run_job(fn, shared, job, counts, index))
            if done is not None:
                done()
        return out
    with worker_pool():
        return _run_in_pool(fn, shared, jobs, workers, done, counts)


def _run_in_pool(fn: Callable[[object, object], object], shared: object, jobs: Sequence,
                 workers: int, done: Callable[[], None] | None,
                 counts: SampleCounts | None) -> list:
    # fork, named: the workers inherit ``shared`` and ``counts`` without a copy (Python 3.14
    # turns the default to forkserver); they run only the simulation, never the parent's
    # progress threads
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), initializer=_start,
                               initargs=(fn, shared, counts), mp_context=get_context("fork"))
    finished = False
    try:
        # the first submit forks the workers: a Ctrl-C raised between a fork and the pool's
        # note of the child's pid left that worker running, unknown to shut_down, blocked on
        # the job queue forever and holding the terminal's output open; it waits until the
        # pool knows every worker
        with signals_deferred():
            futures = [pool.submit(_call, index, job) for index, job in enumerate(jobs)]
        pending = set(futures)
        while pending:
            ended, pending = wait(pending, return_when=FIRST_COMPLETED)  # (each as it ends)
            failed = [f for f in futures if f in ended and f.exception() is not None]
            if failed:
                failed[0].result()  # the first job's error (in job order), which stops the rest
            if done is not None:
                for _ in ended:
                    done()
        finished = True
        return [f.result() for f in futures]
    except BrokenProcessPool:
        raise SortedRLError(f"a worker process died (out of memory?): {len(jobs)} runs in "
                            f"{min(workers, len(jobs))} processes; try fewer --workers") from None
    finally:
        shut_down(pool, stop=not finished)  # an error, Ctrl-C or SIGTERM: the workers stop now
