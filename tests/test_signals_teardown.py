"""A Ctrl-C after a command has ended, while the interpreter tears down (freeing a large run's
arrays takes tenths of a second), ended a complete run with exit 130 and no error line, or
with a KeyboardInterrupt traceback from a finalizer. The console entry now ignores Ctrl-C,
SIGTERM and SIGHUP once the command has ended, its exit code kept; the same signal a second
time ends it at once (a teardown that hangs stays stoppable). The teardown is stood in for by an
exit handler that sends the process the signal, as a user's lands there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import default_stop_signals

ROOT = Path(__file__).resolve().parents[1]


SCRIPT = """
import atexit, os, signal, sys, time
import sortedrl.cli as cli

def teardown():
    for _ in range({times}):
        os.kill(os.getpid(), signal.{signal})
        time.sleep(0.2)  # (a pending signal is handled between bytecodes: this runs some)
    print("teardown done", flush=True)

def app():  # a command that has printed its table and ends with its exit code
    atexit.register(teardown)
    print("table", flush=True)
    raise SystemExit({code})

cli.app = app
sys.argv = ["sortedrl", "simulate"]
cli.main()
"""


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("code", [0, 2])
def test_a_signal_in_the_teardown_keeps_the_commands_exit(signal, code) -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(signal=signal, code=code, times=1)],
                       capture_output=True, preexec_fn=default_stop_signals, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (code, "table\nteardown done\n", "")


@pytest.mark.parametrize("signal, number", [("SIGINT", 2), ("SIGTERM", 15), ("SIGHUP", 1)])
def test_the_same_signal_twice_in_the_teardown_ends_it_at_once(signal, number) -> None:
    r = subprocess.run([sys.executable, "-c", SCRIPT.format(signal=signal, code=0, times=2)],
                       capture_output=True, preexec_fn=default_stop_signals, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (128 + number, "table\n", "")


LATE = """
import os, signal, sys, time
import sortedrl.cli as cli

class Late:  # freed with the script's globals, near the interpreter's very end
    def __del__(self):
        os.kill(os.getpid(), signal.{signal})
        time.sleep(0.2)
        os.write(1, b"freed\\n")

keep = Late()

def app():
    print("table", flush=True)
    raise SystemExit(0)

cli.app = app
sys.argv = ["sortedrl", "simulate"]
cli.main()
"""


@pytest.mark.parametrize("signal", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_at_the_very_end_of_the_teardown_keeps_the_exit(signal) -> None:
    # Python puts the handlers it set back to the default near its end: a handler of ours there
    # let the signal end a finished run by itself (exit -2, no line); ignored, it stays ignored
    r = subprocess.run([sys.executable, "-c", LATE.format(signal=signal)], capture_output=True, preexec_fn=default_stop_signals,
                       text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (0, "table\nfreed\n", "")
