"""The ``sortedrl`` console script, light enough to catch a Ctrl-C during start-up.

The CLI imports NumPy, SimPy, typer and its commands before it parses a single option; a Ctrl-C
in that second printed a ``KeyboardInterrupt`` traceback from whichever import it hit. This
entry point imports the CLI inside a handler, so an interrupt at any moment ends with the one
line every command prints for it, and exit code 130; a SIGTERM or SIGHUP there, likewise (exit
143 or 129), where it ended the process without a word.
"""

from __future__ import annotations

import signal
import sys

from sortedrl.interrupts import Terminated  # (light: the standard library's signal and threading)


def _stopped(signum: int, frame: object) -> None:
    raise Terminated(signum)


def main() -> None:
    for sig in (signal.SIGTERM, signal.SIGHUP):  # (one ignored, as under nohup, stays ignored)
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _stopped)
    try:
        from sortedrl.terminal import normalise_columns

        normalise_columns()  # (before typer reads TERMINAL_WIDTH, and a console COLUMNS)
        from sortedrl.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted (Ctrl-C)\n")
        sys.exit(130)
    except Terminated as e:  # (before the CLI's handlers: it was killed silently, exit -15)
        sys.stderr.write(f"error: {e}\n")
        sys.exit(e.exit_code)
