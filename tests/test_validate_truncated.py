"""``validate`` checks a real run's timeline against its summary.json as ``plot`` does.

A review found that ``validate`` accepted a timeline.jsonl cut at a line boundary (it still
parses) that ``plot`` refused: it replayed the whole trace.jsonl against three of the run's four
updates and reported the cut run's smaller makespan error (1.3% where the whole run's is 7.0%).
Both now make one check (:mod:`sortedrl.run_summary`) with one message, and agree on a run that
has not finished (no trace.jsonl yet) and on one whose summary.json was deleted.

Run: pytest tests/test_validate_truncated.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).resolve().parent / "fixtures"
RUN, PROFILE = FIX / "run-sync", FIX / "cpu-profile.json"
runner = CliRunner()


def copy_run(dest: Path, drop_lines: int = 0) -> Path:
    """The recorded run, its timeline.jsonl without its last ``drop_lines`` lines."""
    shutil.copytree(RUN, dest)
    if drop_lines:
        lines = (RUN / "timeline.jsonl").read_text().splitlines(keepends=True)
        (dest / "timeline.jsonl").write_text("".join(lines[:-drop_lines]))
    return dest


def validate(run: Path, *args: str):
    return runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), *args])


def plot(run: Path, out: Path):
    return runner.invoke(app, ["plot", str(run), "--out", str(out)])


def files(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


@pytest.mark.parametrize("drop, why", [
    # the last update, its spans and the sync after it: 3 train records where the summary has 4
    (3, "train records: 3, the summary's updates: 4"),
    # only the last sync: every update is there, the run ends 8 ms early
    (1, "it ends at 0.531 s, the summary's makespan is 0.539 s"),
])
def test_a_truncated_timeline_is_refused_as_plot_refuses_it(tmp_path, drop, why):
    run = copy_run(tmp_path / "run", drop)
    before = files(tmp_path)
    r = validate(run, "--plot", str(tmp_path / "v.html"))
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: {run / 'timeline.jsonl'}: does not match {run / 'summary.json'} ({why}): truncated? "
        "(write the run again)"]
    assert files(tmp_path) == before  # no validate.json, no overlay
    p = plot(run, tmp_path / "p.html")  # the same check; plot can draw the cut timeline, and says how
    assert p.exit_code == 2 and p.stderr.splitlines() == [
        r.stderr.splitlines()[0].replace("(write the run again)", "(write the run again, or delete "
                                         "summary.json to plot the timeline as it is)")]
    assert files(tmp_path) == before


def test_the_whole_run_still_validates_and_plots(tmp_path):
    run = copy_run(tmp_path / "run")
    r = validate(run, "--json")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)
    assert (v["updates_real"], v["updates_sim"]) == (4, 4)
    assert round(v["makespan_err_pct"], 1) == 7.0
    assert plot(run, tmp_path / "p.html").exit_code == 0


def test_without_summary_json_a_cut_timeline_is_still_refused_and_plot_draws_it(tmp_path):
    """validate replays the whole trace.jsonl, so the timeline must settle every sample of it,
    summary.json or not (deleting the summary validated a cut run: makespan error 1.3% where the
    whole run's is 7.0%); plot draws a timeline as it is."""
    run = copy_run(tmp_path / "run", 3)
    (run / "summary.json").unlink()
    before = files(tmp_path)
    r = validate(run, "--json")
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: {run / 'timeline.jsonl'}: trains or drops 96 samples, {run / 'trace.jsonl'} holds 128: "
        "truncated? (write the run again)"]
    assert files(tmp_path) == before
    assert plot(run, tmp_path / "p.html").exit_code == 0


def test_a_run_that_has_not_finished_is_refused_and_plot_draws_it(tmp_path):
    """A run still going, or interrupted, has appended to its timeline but not yet written
    trace.jsonl (written at its end, after summary.json): validate said it was not a run
    directory of `sortedrl run`."""
    run = copy_run(tmp_path / "run", 3)
    (run / "trace.jsonl").rename(run / "trace.partial.jsonl")
    (run / "summary.json").unlink()
    before = files(tmp_path)
    r = validate(run)
    assert r.exit_code == 2, r.output
    assert r.stderr == (f"error: {run}: missing trace.jsonl (the run has not finished: `sortedrl run` "
                        "writes it at its end; resume an interrupted run with --resume, or draw it "
                        "as it is with `sortedrl plot`)\n")
    assert files(tmp_path) == before
    # resumed after it wrote summary.json (a summary that no longer matches): the same
    shutil.copy(RUN / "summary.json", run / "summary.json")
    r2 = validate(run)
    assert r2.exit_code == 2 and r2.stderr == r.stderr
    # plot draws the run as it is, the summary set aside (not finished: it is not checked)
    p = plot(run, tmp_path / "p.html")
    assert p.exit_code == 0, p.output


def test_a_timeline_that_is_not_a_real_runs_without_a_trace_is_not_a_run_directory(tmp_path):
    run = copy_run(tmp_path / "run")
    (run / "trace.jsonl").unlink()
    meta, *rest = (run / "timeline.jsonl").read_text().splitlines(keepends=True)
    head = json.loads(meta)
    del head["backend"]
    (run / "timeline.jsonl").write_text(json.dumps(head) + "\n" + "".join(rest))
    r = validate(run)
    assert r.exit_code == 2
    assert r.stderr == f"error: {run}: missing trace.jsonl (not a run directory from sortedrl run?)\n"


@pytest.mark.parametrize("summary, message", [
    ([1, 2], "expected a JSON object (a run summary)"),
    ({"makespan_s": "0.5", "bubble_ratio": 0.7, "tokens_per_s": 1.0},
     "field 'makespan_s': expected a number, got '0.5' (delete the file to recompute the summary "
     "from the timeline)"),
])
def test_a_summary_json_validate_cannot_check_against_is_the_error_plot_gives(tmp_path, summary, message):
    run = copy_run(tmp_path / "run")
    (run / "summary.json").write_text(json.dumps(summary))
    before = files(tmp_path)
    r = validate(run)
    assert r.exit_code == 2
    assert r.stderr == f"error: {run / 'summary.json'}: {message}\n"
    p = plot(run, tmp_path / "p.html")
    assert p.exit_code == 2 and p.stderr == r.stderr
    assert files(tmp_path) == before
