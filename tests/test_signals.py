"""SIGTERM and SIGHUP (``timeout``, ``kill``, a closed terminal) stop a command as Ctrl-C does:
one ``error: terminated (SIGTERM)`` line, exit 128 + the signal, and nothing left behind: no run
directory, no ``.RUN.scratch-*`` directory beside it, no worker process, no scratch directory in
``$TMPDIR``. (Before, only Ctrl-C ran the clean-up: a SIGTERM left the scratch directory.)

Each test starts a real ``sortedrl`` process and signals it once its run is under way.

Run: pytest tests/test_signals.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sortedrl.traces.model import TraceModel

ROOT = Path(__file__).resolve().parents[1]
BIG = ["--synthetic", "math-16k", "--prompts", "4096", "--steps", "64"]  # 2M samples: about 10 s (8 Dec)
MODEL = TraceModel(max_response_len=16384, group_size=16, prompts_per_step=64, mu0=7.5,
                   sigma_between=0.5, sigma_within=0.5, drift=0.0, runaway_share=0.02,
                   prompt_median=200.0, prompt_sigma=0.3, prompt_min=16, prompt_max=1024,
                   pass_alpha=1.0, pass_beta=1.0, source="test")


def start(work: Path, args: list[str]) -> subprocess.Popen:
    """``sortedrl ARGS`` in ``work``, with ``work/tmp`` as its $TMPDIR."""
    (work / "tmp").mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "TMPDIR": str(work / "tmp")}
    return subprocess.Popen([sys.executable, "-m", "sortedrl.cli", *args], cwd=work, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)


def wait_for(proc: subprocess.Popen, ready, what: str) -> None:
    deadline = time.monotonic() + 300
    while not ready():
        assert proc.poll() is None, f"ended before {what}: {proc.stderr.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, f"no {what} in 300 s"
        time.sleep(0.05)


def workers(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in children.read_text().split()] if children.exists() else []


def gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def stop(proc: subprocess.Popen, signum: int, work: Path) -> None:
    """Send ``signum``; check the exit code, the one line, and that nothing is left."""
    kids = workers(proc.pid)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr.decode()[-2000:]
    assert stderr.decode() == f"error: terminated ({name})\n"
    assert [p.name for p in work.iterdir()] == ["tmp"]  # no run directory, no .run.scratch-*
    assert list((work / "tmp").iterdir()) == []  # no worker's scratch
    assert all(gone(k) for k in kids), [k for k in kids if not gone(k)]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_mid_simulation_is_one_line_and_leaves_no_scratch(tmp_path, signum):
    proc = start(tmp_path, ["simulate", *BIG, "--policy", "sortedrl", "--out", "run"])
    # the scratch directory is made as the simulation starts (after the trace is drawn)
    wait_for(proc, lambda: any(p.name.startswith(".run.scratch-") for p in tmp_path.iterdir()),
             "scratch directory")
    stop(proc, signum, tmp_path)


def test_compare_stops_its_workers(tmp_path):
    proc = start(tmp_path, ["compare", *BIG, "--policy", "sortedrl", "--policy", "sync",
                            "--policy", "partial", "--workers", "2", "--out", "run"])
    wait_for(proc, lambda: len(workers(proc.pid)) == 2, "worker processes")
    stop(proc, signal.SIGTERM, tmp_path)


@pytest.mark.parametrize("command", [
    ["forecast", "--trace-model", "{model}", "--steps", "300", "--policy", "sync", "--policy",
     "sortedrl", "--seeds", "4"],
    ["tune", *BIG, "--policy", "sortedrl", "--param", "sortedrl.oversubscribe=1:3", "--budget", "8",
     "--out", "run"],
])
def test_workers_stopped_mid_run_remove_their_scratch(tmp_path, command):
    """forecast's and tune's workers keep each run's timeline in $TMPDIR: a worker that the
    parent stops removes its own."""
    model = tmp_path / "m.json"
    model.write_text(MODEL.to_json())
    work = tmp_path / "work"
    proc = start(work, [*(a.format(model=model) for a in command), "--workers", "2"])
    wait_for(proc, lambda: len(list((work / "tmp").iterdir())) == 2, "both workers' scratch")
    stop(proc, signal.SIGTERM, work)


STOP_BEFORE_INITIALIZER = """
import os, signal, sys, threading, time
from sortedrl import parallel
from sortedrl.cli_common import Terminated, end_cleanly_on_termination
from sortedrl.tune import executors

end_cleanly_on_termination()
slow = lambda real: lambda *args: (time.sleep(60), real(*args))  # widen fork -> initializer
parallel._start, executors._init = slow(parallel._start), slow(executors._init)
threading.Timer(3.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    if sys.argv[1] == "run_jobs":
        parallel.run_jobs(lambda shared, job: job, None, [1, 2, 3], workers=2)
    else:
        pool = executors.LocalProcesses(None, None, 0, 2)
        try:
            pool.map([1, 2, 3], lambda n: None)
        finally:
            pool.close()
except Terminated as e:
    print(f"error: {e}", file=sys.stderr)
"""


@pytest.mark.parametrize("pool", ["run_jobs", "tune"])
def test_workers_stopped_before_their_initializer_print_nothing(tmp_path, pool):
    # A SIGTERM to the parent while its workers are between the fork and their initializer: the
    # workers already have the workers' handlers (they printed a traceback with the parent's
    # handler, which made this file's tests fail now and then under load).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", STOP_BEFORE_INITIALIZER, pool], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr) == (0, "error: terminated (SIGTERM)\n")
