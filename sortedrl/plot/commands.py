"""The ``plot`` and ``report`` commands, added to the ``sortedrl`` CLI by :func:`register`.

They live here rather than in ``sortedrl/cli.py`` so that the plotting code (and plotly) is
imported only by the commands that need it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sortedrl.cli_common import user_errors


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


def register(app: typer.Typer) -> None:
    """Add ``plot`` and ``report`` to ``app``, with one-line errors."""
    app.command("plot")(user_errors(plot))
    app.command("report")(user_errors(report))
