"""Errors that say what to give instead, for the inputs a new user mixes up: a compare or tune
directory given to ``plot``, a run directory given as ``--trace``, a CSV file named ``.jsonl``.

Each is one ``error:`` line, exit 2, as every bad input.

Run: pytest tests/test_wrong_input_hints.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sortedrl.cli import app
from tests.cli_helpers import runner

FIXTURE = Path(__file__).parent / "fixtures" / "run-sync"
SIM = ["--synthetic", "logic-8k", "--prompts", "4", "--group-size", "2", "--steps", "1"]


def refused(args: list[str]) -> str:
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    return line


def test_plot_of_a_compare_or_tune_directory_names_a_run_in_it_and_report(tmp_path):
    cmp = tmp_path / "cmp"
    r = runner.invoke(app, ["compare", *SIM, "--policy", "sync", "--policy", "partial", "--out", str(cmp)])
    assert r.exit_code == 0, r.output
    assert refused(["plot", str(cmp)]) == (
        f"error: {cmp}: no timeline.npz or timeline.jsonl (a `sortedrl compare` directory, one run per "
        f"policy: give one of them ({cmp / 'partial'}), or `sortedrl report {cmp}` for all of them)")
    tune = tmp_path / "tune"
    r = runner.invoke(app, ["tune", *SIM, "--policy", "sync", "--budget", "2", "--out", str(tune)])
    assert r.exit_code == 0, r.output
    assert refused(["plot", str(tune)]) == (
        f"error: {tune}: no timeline.npz or timeline.jsonl (a `sortedrl tune` directory, which keeps "
        f"no runs: `sortedrl report {tune}` shows it)")
    spaced = Path(shutil.copytree(tune, tmp_path / "odd dir's"))  # (the command shown is quoted)
    assert refused(["plot", str(spaced)]).endswith(
        f"`sortedrl report '{tmp_path}/odd dir'\"'\"'s'` shows it)")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(["plot", str(empty)]) == (
        f"error: {empty}: no timeline.npz or timeline.jsonl (a run directory is what `sortedrl "
        "simulate`, `run` or `compare` (DIR/LABEL) writes)")


def test_a_run_directory_given_as_a_trace_names_the_trace_it_holds(tmp_path):
    run = Path(shutil.copytree(FIXTURE, tmp_path / "real-sync"))
    out = tmp_path / "out"
    assert refused(["simulate", "--trace", str(run), "--policy", "sync", "--out", str(out)]) == (
        f"error: {run}: is a directory, not a trace file (it holds {run / 'trace.jsonl'}: give that)")
    assert not out.exists()


def test_a_csv_named_jsonl_is_said_to_read_like_csv(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text("prompt_id,sample,prompt_len,response_len,truncated\na,0,5,10,false\n")
    assert refused(["trace", "stats", str(trace)]) == (
        f"error: {trace}: line 1: bad JSON: Expecting value (column 1); it reads like a CSV header: "
        "a CSV trace's name ends in .csv")
    trace.write_text("hello\n")  # (not a CSV header: no hint)
    assert refused(["trace", "stats", str(trace)]) == f"error: {trace}: line 1: bad JSON: Expecting value (column 1)"
