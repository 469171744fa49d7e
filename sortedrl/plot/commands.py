"""The ``plot`` and ``report`` commands, added to the ``sortedrl`` CLI by :func:`register`.

They live here rather than in ``sortedrl/cli.py`` so that the plotting code (and plotly) is
imported only by the commands that need it.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sortedrl.cli_common import FORCE, err, print_notes, user_errors
from sortedrl.outputs import Outputs, write_text
from sortedrl.progress import Phases
from sortedrl.timeline_file import NAMES


def plot(
    rundir: Path = typer.Argument(..., help="run directory (summary.json, timeline.npz or .jsonl)"),
    out: Path = typer.Option(None, "--out", help="HTML file, FILE.html (default RUNDIR/timeline.html)"),
    perfetto: Path = typer.Option(None, "--perfetto",
                                  help="also write the timeline as Chrome trace-event JSON"),
    force: bool = FORCE,
) -> None:
    """Plot one run's timeline as a self-contained HTML page (works offline)."""
    from sortedrl.plot.inputs import check_dir, load_run
    from sortedrl.plot.lanes import lanes
    from sortedrl.plot.page import check_html_out
    from sortedrl.plot.perfetto import perfetto_json
    from sortedrl.plot.timeline_plot import timeline_page

    check_dir(rundir, "a run directory")  # before --out's default, RUNDIR/timeline.html
    outs = Outputs("plot", force, inputs=[rundir / "summary.json", *(rundir / n for n in NAMES)])
    out = outs.file(out, "--out", default=rundir / "timeline.html")
    check_html_out(out, "--out", "plot")
    perfetto = outs.file(perfetto, "--perfetto")
    with Phases(err) as progress:
        progress.phase(f"reading {rundir}")
        tl, summary = load_run(rundir)
        progress.phase("drawing the timeline")
        ln = lanes(tl)  # the span table, built once for the page and the trace
        files = {out: write_text(timeline_page(tl, summary, ln))}
        if perfetto is not None:
            progress.phase("building the Perfetto trace")
            files[perfetto] = write_text(perfetto_json(tl, ln))
        outs.write(files, progress.file)  # all built first: a failure leaves nothing half-written
    print_notes(outs)
    if perfetto is not None:
        typer.echo(f"wrote {perfetto} (open it in ui.perfetto.dev or chrome://tracing)")
    typer.echo(f"wrote {out}")


def report(
    dirs: list[Path] = typer.Argument(..., help="a compare or tune output directory, or two or "
                                                "more run directories (run, simulate) side by side"),
    out: Path = typer.Option(None, "--out", help="HTML file, FILE.html (default DIR/report.html; "
                                                 "needed with several runs)"),
    force: bool = FORCE,
) -> None:
    """Compare in one HTML page (works offline) the policies of a compare or tune directory, or
    two or more runs, real or simulated."""
    from sortedrl.plot.inputs import check_dir
    from sortedrl.plot.page import check_html_out
    from sortedrl.plot.report import report_inputs, report_page

    if len(dirs) > 1:
        report_runs(dirs, out, force)
        return
    dir = dirs[0]
    check_dir(dir, "a compare or tune directory")  # before --out's default, DIR/report.html
    outs = Outputs("report", force, inputs=report_inputs(dir))
    out = outs.file(out, "--out", default=dir / "report.html")
    check_html_out(out, "--out", "report")
    with Phases(err) as progress:
        progress.phase(f"reading {dir} and drawing the report")
        page = report_page(dir, out)
        outs.write({out: write_text(page)}, progress.file)
    print_notes(outs)
    typer.echo(f"wrote {out}")


def report_runs(dirs: list[Path], out: Path | None, force: bool) -> None:
    """``report RUN1 RUN2 ...``: the runs side by side in ``out`` (there is no default)."""
    from sortedrl.plot.inputs import PlotError
    from sortedrl.plot.page import check_html_out
    from sortedrl.plot.report_runs import check_runs, load_runs, runs_inputs, runs_page, unlike_note

    if out is None:
        raise PlotError(f"report of {len(dirs)} runs: give --out FILE.html (the default, "
                        "DIR/report.html, is for one compare or tune directory)")
    check_html_out(out, "--out", "report")
    check_runs(dirs)
    outs = Outputs("report", force, inputs=runs_inputs(dirs))
    outs.file(out, "--out")
    with Phases(err) as progress:
        progress.phase(f"reading {len(dirs)} runs and drawing the report")
        runs = load_runs(dirs)
        outs.write({out: write_text(runs_page(runs, out))}, progress.file)
    print_notes(outs)
    if note := unlike_note(runs):
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add ``plot`` and ``report`` to ``app``, with one-line errors."""
    app.command("plot")(user_errors(plot))
    app.command("report")(user_errors(report))
