"""Progress of runs in worker processes (``sortedrl.parallel_progress``): each worker writes its
run's samples generated to the job's counter while the run goes on, and the parent's bar counts
their sum, finished runs included (``compare --workers N`` sat at 0 until a whole policy ended).
No timing is asserted: the runs that must still be going wait on an event."""

from __future__ import annotations

import io
import threading
from multiprocessing import get_context

import pytest
from rich.console import Console

from sortedrl.compare import _simulate_spec, parse_specs, run_compare
from sortedrl.forecast import RunSource, run_forecast
from sortedrl.parallel import run_jobs
from sortedrl.parallel_progress import SampleCounts
from sortedrl.policies.registry import make_policy
from sortedrl.progress import Phases
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize
from tests.conftest import tiny_cluster

SPECS = ["sync", "sortedrl", "part=sortedrl"]
SETS = ["part.mode=partial"]


def small_trace():
    return synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)


def cluster():
    return tiny_cluster(engines=2, max_num_seqs=8, kv=40_000)


def fake_terminal() -> tuple[io.StringIO, Phases]:
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    return buf, Phases(console=console, delay=3600)  # (never drawn by itself: rendered below)


def rendered(bar: Phases, buf: io.StringIO) -> list[str]:
    bar.bar.console.print(bar.bar.get_renderable())
    return buf.getvalue().splitlines()


@pytest.mark.parametrize("workers", [1, 2])
def test_each_counter_ends_at_its_runs_samples(workers):
    trace = small_trace()
    counts = SampleCounts(len(SPECS))
    shared = (trace, cluster(), 1, "resample", None, counts)
    run_jobs(_simulate_spec, shared, parse_specs(SPECS, SETS), workers, counts=counts)
    assert list(counts.counts) == [len(trace)] * 3  # every sample of the trace generated
    assert counts.progress() == (3 * len(trace), None)


def test_compare_in_processes_counts_the_samples_of_all_its_runs():
    trace = small_trace()
    total = 3 * len(trace)
    buf, bar = fake_terminal()
    try:
        run_compare(trace, parse_specs(SPECS, SETS), cluster(), seed=1, progress=bar, workers=2)
        watched = bar.watched[0]
        assert list(watched.counts) == [len(trace)] * 3
        bar.unwatch()  # (the next phase's: a last, exact count)
        lines = rendered(bar, buf)
    finally:
        bar.close()
    assert lines[0] == "simulating 3 policies in 2 processes"  # (no one run's simulated time)
    assert f" {total:,}/{total:,} samples generated elapsed " in lines[1], lines


def test_forecast_in_processes_counts_the_samples_of_all_its_draws():
    trace = small_trace()
    buf, bar = fake_terminal()
    try:
        bar.phase("forecast: 2 simulated runs", total=2 * len(trace))
        run_forecast(RunSource(trace=trace), parse_specs(["sync", "sortedrl"], []), [cluster()],
                     seeds=1, progress=bar, workers=2)
        bar.unwatch()
        lines = rendered(bar, buf)
    finally:
        bar.close()
    assert lines[0] == "forecast: 2 simulated runs"
    assert f" {2 * len(trace):,}/{2 * len(trace):,} samples generated elapsed " in lines[1], lines


class _Run:
    """A run that has generated ``finished`` samples; its second poll sets ``polled`` (by then
    the first poll's count is written)."""

    def __init__(self, finished: int, polled) -> None:
        self.finished, self.polled, self.polls = finished, polled, 0

    def progress(self) -> tuple[int, float]:
        self.polls += 1
        if self.polls == 2:
            self.polled.set()
        return self.finished, 0.0


def _watched_then_wait(shared: tuple, job: int) -> int:
    counts, polled, go = shared
    if job == 0:  # a run still going until the parent has read its counter
        counts.watch(_Run(1234, polled), 5000)
        assert go.wait(60)
    return job


def _simulated_then_wait(shared: tuple, job: int) -> int:
    trace, counts, ran, go = shared
    if job == 0:
        simulate(trace, make_policy("sync", [], trace), cluster(), progress=counts)
        ran.set()
        assert go.wait(60)  # the job is not over until the parent has read its counter
    return job


def read_while_job_0_goes_on(fn, shared: tuple, counts: SampleCounts, ready, go) -> tuple:
    """Run jobs 0 and 1 in two workers (run_jobs on a thread, as the bar reads on its own);
    once job 0 says ``ready``, read the counters, then let it end. (The counters, the jobs'
    results.)"""
    out: list = []
    thread = threading.Thread(target=lambda: out.append(
        run_jobs(fn, shared, [0, 1], workers=2, counts=counts)))
    thread.start()
    try:
        assert ready.wait(60)
        seen = list(counts.counts)
    finally:
        go.set()
        thread.join()
    return seen, out


def test_a_workers_counter_moves_while_its_run_goes_on():
    fork = get_context("fork")
    polled, go = fork.Event(), fork.Event()
    counts = SampleCounts(2)
    seen, out = read_while_job_0_goes_on(_watched_then_wait, (counts, polled, go), counts,
                                         polled, go)
    assert seen == [1234, 0]  # read while job 0's run was still going
    assert out == [[0, 1]] and list(counts.counts) == [1234, 0]


def test_a_simulations_count_reaches_the_parent_before_its_job_ends():
    trace = small_trace()
    fork = get_context("fork")
    ran, go = fork.Event(), fork.Event()
    counts = SampleCounts(2)
    seen, out = read_while_job_0_goes_on(_simulated_then_wait, (trace, counts, ran, go), counts,
                                         ran, go)
    assert seen == [len(trace), 0]
    assert out == [[0, 1]]


def test_a_count_is_at_most_the_runs_samples_and_exact_once_unwatched():
    counts = SampleCounts(2)
    counts.job = 1
    counts.watch(_Run(7000, get_context("fork").Event()), 5000)
    counts(64)  # an update's samples: the watch counts them, not this
    counts(0, "summarising the timeline")  # the run has moved on: its last count
    assert list(counts.counts) == [0, 5000]
    assert counts.progress() == (5000, None)
