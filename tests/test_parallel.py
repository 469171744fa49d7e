"""Simulations in worker processes (``sortedrl.parallel``): the results of one process, in the
jobs' order; the first error stops the other workers; a worker that dies is one clear error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from multiprocessing import get_context
from pathlib import Path

import pytest

from sortedrl.errors import ConfigError, SortedRLError
from sortedrl.parallel import check_workers, run_jobs


def _square_slowly(shared: int, job: int) -> tuple[int, int]:
    time.sleep(0.02 * (job % 3))  # jobs end out of order
    return job, shared * job * job


@pytest.mark.parametrize("workers", [1, 2, 5])
def test_results_come_back_in_the_jobs_order(workers):
    ended = []
    out = run_jobs(_square_slowly, 3, list(range(7)), workers, done=lambda: ended.append(1))
    assert out == [(k, 3 * k * k) for k in range(7)]
    assert len(ended) == 7


def _wait_for_the_first(first_done, job: int) -> int:
    if job == 1:
        assert first_done.wait(60)  # set by done() for job 0, while this one is still going
    return job


def test_done_is_called_as_each_job_ends_not_once_all_have():
    """The pool was waited on until the first error or the last job: done() came for every job
    at the end, and a bar of finished runs sat at 0 until then."""
    first_done = get_context("fork").Event()
    out = run_jobs(_wait_for_the_first, first_done, [0, 1], workers=2, done=first_done.set)
    assert out == [0, 1]


def _fail_or_wait(pid_dir: str, job: int) -> int:
    with open(os.path.join(pid_dir, f"{job}.tmp"), "w") as fh:
        fh.write(str(os.getpid()))
    os.replace(os.path.join(pid_dir, f"{job}.tmp"), os.path.join(pid_dir, f"{job}.pid"))
    if job == 0:
        while len([n for n in os.listdir(pid_dir) if n.endswith(".pid")]) < 2:  # both started
            time.sleep(0.01)
        raise ConfigError("job 0: no such cluster")
    time.sleep(600)  # stopped by the error, long before this
    return job


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie is not running
        return fh.read().split()[2] != "Z"


def test_the_first_error_is_raised_and_stops_the_other_workers(tmp_path):
    with pytest.raises(ConfigError, match="job 0: no such cluster"):
        run_jobs(_fail_or_wait, str(tmp_path), [0, 1, 2, 3], workers=2)
    pids = {int(p.read_text()) for p in tmp_path.glob("*.pid")}
    assert len(pids) == 2 and os.getpid() not in pids  # two workers ran the jobs
    assert not any(map(_alive, pids))  # both stopped: no job ran its 600 s


def test_an_interrupt_while_the_pool_starts_its_manager_thread_stops_the_workers(monkeypatch):
    """The workers are forked before the pool's manager thread starts: a SIGTERM in between
    (tests/test_signals.py hit it once) left a thread that shutdown() cannot join, and its
    RuntimeError replaced the interrupt. Now the interrupt comes out, the workers ended."""
    from concurrent.futures import process

    forked = []
    launch = process.ProcessPoolExecutor._launch_processes

    def launched(self):
        launch(self)
        forked.extend(self._processes.values())

    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr(process.ProcessPoolExecutor, "_launch_processes", launched)
    monkeypatch.setattr(process._ExecutorManagerThread, "start", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_jobs(_square_slowly, 3, list(range(4)), workers=2)
    assert len(forked) == 2 and not any(p.is_alive() for p in forked)


# Ctrl-C as the second worker is forked: a tracer sends it when the worker's
# Process.start() returns, before the pool has noted the child's pid
_CTRL_C_AT_THE_SECOND_FORK = """
import os, signal, sys, time
from sortedrl.parallel import run_jobs

def job(shared, x):
    time.sleep(60)
    return x

starts = []

def at_start(frame, event, arg):
    if event == "return":
        starts.append(frame)
        if len(starts) == 2:
            os.kill(os.getpid(), signal.SIGINT)
    return at_start

def tracer(frame, event, arg):
    code = frame.f_code
    if code.co_name == "start" and code.co_filename.endswith("multiprocessing/process.py"):
        return at_start
    return None

def running_children():
    me = os.getpid()
    with open(f"/proc/{me}/task/{me}/children") as fh:
        pids = [int(x) for x in fh.read().split()]
    return [p for p in pids if open(f"/proc/{p}/stat").read().split()[2] != "Z"]

sys.settrace(tracer)
try:
    run_jobs(job, None, [1, 2], workers=2)
    print("not interrupted")
except KeyboardInterrupt:
    sys.settrace(None)
    left = running_children()
    for pid in left:  # (so that this test cannot hang on them)
        os.kill(pid, signal.SIGKILL)
    print(f"forked {len(starts)}, running {len(left)}")
"""


def test_a_ctrl_c_as_a_worker_is_forked_leaves_no_worker_running(tmp_path):
    """Between a worker's fork and the pool's note of its pid, a Ctrl-C left that worker
    running, blocked on the job queue for good and holding the parent's stdout and stderr
    open: a caller reading them to their end (the Ctrl-C test below, 2 of 11 suites on 5 Dec
    2026) hung. The interrupt now waits until the pool knows its workers, which it stops."""
    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "ctrl_c_at_fork.py"
    script.write_text(_CTRL_C_AT_THE_SECOND_FORK)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(root)},
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert (done.returncode, done.stdout, done.stderr) == (0, "forked 2, running 0\n", "")


def _die(shared: None, job: int) -> int:
    if job == 1:
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer would
    return job


def test_a_worker_that_dies_is_one_clear_error():
    with pytest.raises(SortedRLError, match=r"a worker process died \(out of memory\?\): 3 runs "
                                            r"in 2 processes; try fewer --workers"):
        run_jobs(_die, None, [0, 1, 2], workers=2)


def test_workers_must_be_at_least_one():
    check_workers(1)
    with pytest.raises(ConfigError, match="--workers 0: must be >= 1"):
        check_workers(0)


def _children(pid: int) -> list[int]:
    tasks = f"/proc/{pid}/task/{pid}/children"
    with open(tasks) as fh:
        return [int(x) for x in fh.read().split()]


def test_ctrl_c_stops_the_workers_exits_130_and_writes_nothing(tmp_path):
    """Ctrl-C during `compare --workers 2`: one line, exit 130, no run directory, no worker
    left running. (`update_batch=1024`, sortedrl's auto value before 5 Dec 2026, keeps the
    run about 20 s long, so that the signal lands mid-run: with the new default the run takes
    about 5 s, and under a loaded suite the signal could land as the run ended.)"""
    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "cmp"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sortedrl.cli", "compare", "--synthetic", "math-16k", "--prompts",
         "1024", "--steps", "20", "--policy", "sync", "--policy", "sortedrl", "--set",
         "sortedrl.update_batch=1024", "--workers", "2", "--out", str(out)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(root), "OMP_NUM_THREADS": "1"},
        # as a terminal's foreground job (a suite started with `&` has SIGINT ignored), in a
        # process group of its own, which Ctrl-C signals whole
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), start_new_session=True)
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 300  # a bound on a hung child only
        while len(workers) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
            workers = _children(proc.pid)
        assert len(workers) == 2, proc.communicate()
        os.killpg(proc.pid, signal.SIGINT)  # the parent and its workers, as a terminal does
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (proc.returncode, stdout, stderr) == (130, b"", b"error: interrupted (Ctrl-C)\n")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []
    assert not any(map(_alive, workers))


def test_stopping_a_pool_whose_worker_was_cut_off_mid_result_does_not_hang():
    """A worker stopped (Ctrl-C, SIGTERM) while it wrote its result left part of a message in
    the result pipe; the pool's manager thread read on, waiting for the rest, and shutdown()
    joined it for ever (`compare --workers 2`: 3 of 16 interrupts hung). The partial message is
    put there by hand; shut_down must return, the pool broken and its worker gone."""
    import struct
    import threading
    from concurrent.futures import ProcessPoolExecutor

    from sortedrl.parallel import shut_down

    pool = ProcessPoolExecutor(1, mp_context=get_context("fork"))
    assert pool.submit(abs, -3).result() == 3  # the worker and the manager thread run
    workers = list(pool._processes.values())
    writer = pool._result_queue._writer
    os.write(writer.fileno(), struct.pack("!i", 4096) + b"part of a pickled result")
    stopper = threading.Thread(target=shut_down, args=(pool, True), daemon=True)
    stopper.start()
    stopper.join(timeout=60)  # (a guard against a hang, not a timing: it returns at once)
    hung = stopper.is_alive()
    if hung:  # let the manager thread read on and end, so that the test process can exit
        os.write(writer.fileno(), b"\0" * 4096)
        stopper.join()
    assert not hung, "shut_down hung on a partial result in the pipe"
    assert not any(p.is_alive() for p in workers)
