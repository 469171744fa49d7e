"""A compare's per-policy run directories (``C/on``) are known for what they are (an audit of
commands chained together).

They hold no marker of their own, so ``simulate --out C/on`` called one "not empty (files not
written by sortedrl)" and ``validate C/on`` asked for a trace.jsonl; and after ``simulate --out
C/on --force`` replaced one, ``report C`` drew compare.json's old numbers, rc 0. Now the checks
read the compare's marker in ``C``, and ``report`` refuses a run that is not the one compare.json
records. (``validate`` of a simulated run pointed at ``report``, which refuses a simulate run.)

Run: pytest tests/test_compare_parts.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import invoke_ok
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
SMALL = ["--synthetic", "math-16k", "--prompts", "4", "--group-size", "2", "--steps", "2",
         "--cluster", "h100-llama3.1-8b-2gpu"]
PROFILE = Path(__file__).resolve().parent / "fixtures" / "cpu-profile.json"


@pytest.fixture
def compared(tmp_path, monkeypatch):
    """``C``, a compare of on=sortedrl and sync, in the current directory (tmp_path)."""
    monkeypatch.chdir(tmp_path)
    invoke_ok(["compare", *SMALL, "--policy", "on=sortedrl", "--policy", "sync", "--out", "C"])
    return tmp_path / "C", PROFILE


def refused(args: list[str]) -> tuple[int, str, str]:
    r = runner.invoke(app, args)
    return r.exit_code, r.stdout, r.stderr


def test_simulate_into_a_compares_run_names_the_compare(compared):
    c, _ = compared
    before = (c / "on" / "summary.json").read_bytes()
    assert refused(["simulate", *SMALL, "--policy", "sync", "--out", "C/on"]) == (
        2, "", "error: --out C/on: is the 'on' run of the `sortedrl compare` run in C (its compare.json "
               "holds it too); give another directory, or --force to replace it\n")
    assert (c / "on" / "summary.json").read_bytes() == before


def test_validate_of_a_simulated_run_points_where_it_goes(compared):
    _, profile = compared
    invoke_ok(["simulate", *SMALL, "--policy", "sync", "--out", "A"])
    tail = ": validate replays a real run in the simulator (a simulated one has no real run to compare with: "
    assert refused(["validate", "C/on", "--profile", str(profile)]) == (
        2, "", f"error: C/on: one policy's run of the `sortedrl compare` in C, not a `sortedrl run`{tail}"
               "draw it with `sortedrl plot C/on`)\n")
    assert refused(["validate", "A", "--profile", str(profile)]) == (
        2, "", f"error: A: written by `sortedrl simulate`, not by `sortedrl run`{tail}draw it with "
               "`sortedrl plot A`)\n")
    assert refused(["validate", "C", "--profile", str(profile)]) == (
        2, "", f"error: C: written by `sortedrl compare`, not by `sortedrl run`{tail}report it with "
               "`sortedrl report C`)\n")
    assert refused(["report", "A"])[0] == 2  # (what the hint named before)
    invoke_ok(["plot", "A"])
    assert (compared[0].parent / "A" / "timeline.html").is_file()


def test_report_refuses_a_run_replaced_since_the_compare(compared):
    c, _ = compared
    invoke_ok(["report", "C"])
    (c / "report.html").unlink()
    invoke_ok(["simulate", *SMALL, "--policy", "partial", "--out", "C/on", "--force"])
    assert refused(["report", "C"]) == (
        2, "", "error: C/on/summary.json: not the run C/compare.json records for 'on' (replaced since?); "
               "re-run the compare, or draw that run alone with `sortedrl plot C/on`\n")
    assert not (c / "report.html").exists()


def test_export_of_a_compare_directory_says_how_to_export_one_of_its_runs(compared):
    """It was "unknown policy 'C'"."""
    assert refused(["export", "verl", "C"]) == (
        2, "", "error: C: a `sortedrl compare` directory, not a tune: export one of its runs by its policy's "
               "name and knobs (`sortedrl export FRAMEWORK NAME --set key=value`; the knobs are "
               "C/LABEL/summary.json's 'params'); its runs: on (sortedrl), sync (sync)\n")


def test_export_of_a_policy_name_wins_over_a_compare_directory_of_that_name(compared):
    """``compare --out sync`` then ``export verl sync`` was refused as a compare directory; the
    built-in policy's name wins (as it did before the compare check)."""
    invoke_ok(["compare", *SMALL, "--policy", "on=sortedrl", "--policy", "sync", "--out", "sync"])
    alone = runner.invoke(app, ["export", "verl", "sync"])
    assert alone.exit_code == 0, alone.stderr
    assert alone.stdout.startswith("# verl: sync ")


def test_the_compare_re_run_after_a_run_was_replaced_in_it(compared):
    """``report C`` says to re-run the compare after ``simulate --out C/on --force``; the re-run
    was refused, naming the replaced run's own marker as a file sortedrl did not write."""
    c, _ = compared
    before = (c / "compare.json").read_bytes()
    invoke_ok(["simulate", *SMALL, "--policy", "partial", "--out", "C/on", "--force"])
    invoke_ok(["compare", *SMALL, "--policy", "on=sortedrl", "--policy", "sync", "--out", "C"])
    assert (c / "compare.json").read_bytes() == before
    invoke_ok(["report", "C"])
