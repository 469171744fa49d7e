"""The ``sortedrl`` console script, light enough to catch a Ctrl-C during start-up.

The CLI imports NumPy, SimPy, typer and its commands before it parses a single option; a Ctrl-C
in that second printed a ``KeyboardInterrupt`` traceback from whichever import it hit. This
entry point imports the CLI inside a handler, so an interrupt at any moment ends with the one
line every command prints for it, and exit code 130.
"""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from sortedrl.terminal import normalise_columns

        normalise_columns()  # (before typer reads TERMINAL_WIDTH, and a console COLUMNS)
        from sortedrl.cli import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted (Ctrl-C)\n")
        sys.exit(130)
