"""SIGTERM and SIGHUP from the process's first moment: during the CLI's imports (before its own
handlers are in) one ended the process without a word (exit -15); it is one `error:` line and
exit 128 + the signal's number now, as Ctrl-C there is. A hang-up that is ignored when the
command starts (`nohup sortedrl ...`) stays ignored: the CLI's handler ended such a run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import default_stop_signals

ROOT = Path(__file__).resolve().parents[1]


DURING_IMPORTS = """
import builtins, os, signal, sys
real = builtins.__import__

def importing(name, *args, **kwargs):
    if name == "sortedrl.cli":  # as if it came while NumPy or SimPy was being imported
        os.kill(os.getpid(), signal.{signal})
    return real(name, *args, **kwargs)

builtins.__import__ = importing
sys.argv = ["sortedrl", "--version"]
from sortedrl.console import main
main()
"""


@pytest.mark.parametrize("signal, number", [("SIGTERM", 15), ("SIGHUP", 1)])
def test_a_signal_during_the_imports_is_one_line(signal, number) -> None:
    r = subprocess.run([sys.executable, "-c", DURING_IMPORTS.format(signal=signal)],
                       capture_output=True, preexec_fn=default_stop_signals, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (128 + number, "", f"error: terminated ({signal})\n")


NOHUP = """
import signal, sys
signal.signal(signal.SIGHUP, signal.SIG_IGN)  # as nohup leaves it
from sortedrl import console
from sortedrl.cli_common import end_cleanly_on_termination
from sortedrl.interrupts import ignore_once_done
for step in (lambda: None, end_cleanly_on_termination, ignore_once_done):
    step()
    print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN,
          callable(signal.getsignal(signal.SIGTERM)))
"""


def test_a_hang_up_ignored_at_the_start_stays_ignored() -> None:
    r = subprocess.run([sys.executable, "-c", NOHUP], capture_output=True, preexec_fn=default_stop_signals, text=True, cwd=ROOT)
    assert (r.returncode, r.stdout, r.stderr) == (0, "True False\nTrue True\nTrue True\n", "")


def test_a_hang_up_during_the_imports_under_nohup_is_let_be() -> None:
    import signal

    from sortedrl import __version__

    r = subprocess.run([sys.executable, "-c", DURING_IMPORTS.format(signal="SIGHUP")],
                       capture_output=True, text=True, cwd=ROOT,
                       preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    assert (r.returncode, r.stdout, r.stderr) == (0, f"sortedrl {__version__}\n", "")
