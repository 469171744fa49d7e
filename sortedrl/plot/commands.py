"""The ``plot`` and ``report`` commands, added to the ``sortedrl`` CLI by :func:`register`.

They live here rather than in ``sortedrl/cli.py`` so that the plotting code (and plotly) is
imported only by the commands that need it, and so that ``cli.py`` can import this module without
a cycle: the error wrapper is passed in, or a local one equivalent to ``cli.user_errors`` is used.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import typer

from sortedrl.errors import SortedRLError

Wrap = Callable[[Callable], Callable]


def one_line_errors(fn: Callable) -> Callable:
    """Report a SortedRLError as one ``error:`` line on stderr and exit with its code (2)."""
    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> object:
        try:
            return fn(*args, **kwargs)
        except SortedRLError as e:
            typer.echo(f"error: {e}", err=True)
            raise typer.Exit(e.exit_code) from None
    return wrapper


def plot(
    rundir: Path = typer.Argument(..., help="run directory (summary.json, timeline.jsonl)"),
    out: Path = typer.Option(None, "--out", help="HTML file (default RUNDIR/timeline.html)"),
    perfetto: Path = typer.Option(None, "--perfetto",
                                  help="also write the timeline as Chrome trace-event JSON"),
) -> None:
    """Plot one run's timeline as a self-contained HTML page (works offline)."""
    from sortedrl.plot.inputs import load_run
    from sortedrl.plot.page import atomic_write
    from sortedrl.plot.perfetto import perfetto_json
    from sortedrl.plot.timeline_plot import timeline_page

    tl, summary = load_run(rundir)
    out = out or rundir / "timeline.html"
    files = {out: timeline_page(tl, summary)}
    if perfetto is not None:
        files[perfetto] = perfetto_json(tl)
    atomic_write(files)  # all built first: a failure leaves nothing half-written
    if perfetto is not None:
        typer.echo(f"wrote {perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    typer.echo(f"wrote {out}")


def report(
    dir: Path = typer.Argument(..., help="compare or tune output directory"),
    out: Path = typer.Option(None, "--out", help="HTML file (default DIR/report.html)"),
) -> None:
    """Compare the policies of a compare or tune directory in one HTML page (works offline)."""
    from sortedrl.plot.report import write_report

    typer.echo(f"wrote {write_report(dir, out)}")


def register(app: typer.Typer, wrap: Wrap | None = None) -> None:
    """Add ``plot`` and ``report`` to ``app``; ``wrap`` turns errors into exit codes."""
    wrap = wrap or one_line_errors
    app.command("plot")(wrap(plot))
    app.command("report")(wrap(report))
