"""A stop whose exception is lost still stops the command before its outputs go in. A signal's
handler raises in whatever code runs when it lands; raised in a finalizer (or an at-fork hook,
or C code that cannot raise: a walk saw tune's Sobol sampler and its pool's fork) it is dropped
with "Exception ignored in ...", and the command ran on, replaced its previous outputs, exit 0.
The handlers note each signal, and the outputs are not committed after one: the command ends
with its one line and exit code. The lost exception is stood in for by a finalizer that sends
the process the signal in the middle of the simulation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import default_stop_signals

ROOT = Path(__file__).resolve().parents[1]

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

SCRIPT = """
import gc, os, signal, sys, time
import sortedrl.cli as cli

real = cli.run_simulation

class Finalized:
    def __del__(self):  # the handler's exception is raised here, and dropped
        os.kill(os.getpid(), signal.{signal})
        time.sleep(0.2)

def simulate(*args, **kwargs):
    Finalized()  # (freed at once)
    gc.collect()
    return real(*args, **kwargs)

cli.run_simulation = simulate
sys.argv = ["sortedrl", "simulate", "--trace", "math-16k", "--policy", "sync", "--cluster",
            "h100-llama3.1-8b-2gpu", "--out", "run", "--force"]
cli.main()
"""


@pytest.mark.parametrize("signal, line, code", [
    ("SIGINT", "error: interrupted (Ctrl-C)", 130), ("SIGTERM", "error: terminated (SIGTERM)", 143),
    ("SIGHUP", "error: terminated (SIGHUP)", 129)])
def test_a_lost_stop_keeps_the_previous_outputs(tmp_path, signal, line, code) -> None:
    run = tmp_path / "run"
    first = subprocess.run([sys.executable, "-m", "sortedrl", "simulate", "--trace", "math-16k",
                            "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu", "--out", str(run)],
                           capture_output=True, preexec_fn=default_stop_signals, text=True, cwd=tmp_path, env=ENV)
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    (run / "summary.json").write_text("{}\n")  # (a rerun that replaced it would write it anew)
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(signal=signal)], capture_output=True, preexec_fn=default_stop_signals,
                       text=True, cwd=tmp_path, env=ENV)
    assert "Exception ignored in" in r.stderr  # (Python's own report of the dropped exception)
    assert (r.returncode, r.stderr.splitlines()[-1]) == (code, line), r.stderr
    assert (run / "summary.json").read_text() == "{}\n"
    assert {p.name for p in run.iterdir()} == set(before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # (no staging copy left)
