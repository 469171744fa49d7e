"""An empty path on the command line is named as given (``--out ''`` was reported as ``--out .``)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args, message", [
    (["simulate", "--trace", "math-16k", "--policy", "sync", "--out", ""],
     "--out: an empty path (an unset shell variable?); give a file or directory name"),
    (["simulate", "--trace", "math-16k", "--policy", "sync", "--out="],
     "--out: an empty path (an unset shell variable?); give a file or directory name"),
    (["compare", "--trace", "", "--policy", "sync", "--out", "c"],
     "--trace: an empty path (an unset shell variable?); give a file or directory name"),
    (["report", ""], "report: an empty path argument (an unset shell variable?); give a file or directory name"),
    (["trace", "stats", ""], "trace stats: an empty path argument (an unset shell variable?); give a file or directory name"),
])
def test_an_empty_path_is_one_error_naming_its_option(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, args)
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {message}\n")
    assert list(tmp_path.iterdir()) == []


def test_an_empty_value_of_another_option_keeps_its_own_error(tmp_path, monkeypatch):
    """Only paths are judged before the command runs: ``--set ''`` gets compare's own error, and
    calibrate's file lists keep theirs (they take every name after the option)."""
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["compare", "--trace", "math-16k", "--policy", "sync", "--set", "", "--out", "c"])
    assert (r.exit_code, r.stderr) == (2, "error: --set '': compare needs LABEL.key=value (labels: sync)\n")
    r = runner.invoke(app, ["calibrate", "--from-metrics", "m.csv", "", "--cluster", "h100-llama3.1-8b",
                            "--out", "p.json"])
    assert (r.exit_code, r.stderr) == (2, "error: --from-metrics: an empty file name (an unset shell variable?); "
                                          "give FILE ... after it\n")
    r = runner.invoke(app, ["calibrate", "--from-metrics", "m.csv", "--cluster", "h100-llama3.1-8b", "--out", ""])
    assert (r.exit_code, r.stderr) == (2, "error: --out: an empty path (an unset shell variable?); give a file or "
                                          "directory name\n")


def test_help_an_unknown_option_and_the_words_after_dashes_are_left_to_click(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, ["report", "", "--help"])
    assert r.exit_code == 0 and "Usage:" in r.stdout
    r = runner.invoke(app, ["report", "--bogus", "", "x"])
    assert r.exit_code == 2 and "No such option: --bogus" in r.stderr, r.stderr
    r = runner.invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--", "--out", ""])
    assert r.exit_code == 2 and "unexpected extra argument" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []
