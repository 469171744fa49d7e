"""The HTML pages' outputs end in .html: ``plot --out``, ``report --out``, ``validate --plot``.

A review found ``plot --out x.png`` wrote an HTML page into x.png and said ``wrote x.png``
(``report --out`` and ``validate --plot`` the same). Each now refuses another ending with one
error line, checked before anything is read (here every input is broken, and the --out error
is the one given), as ``forecast --report``, ``calibrate --out`` and ``trace fit --out`` check
theirs.

Run: pytest tests/test_html_out.py
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).resolve().parent / "fixtures"
RUN, PROFILE = FIX / "run-sync", FIX / "cpu-profile.json"
runner = CliRunner()


def broken_run(dest: Path) -> Path:
    """The recorded run with a timeline that is not JSON: any command that read it would fail."""
    shutil.copytree(RUN, dest)
    (dest / "timeline.jsonl").write_text("{oops\n")
    return dest


@pytest.mark.parametrize("name", ["x.png", "x.json", "x", "x.html.txt", "x.htm"])
def test_plot_refuses_an_out_that_is_not_html(tmp_path, name):
    run = broken_run(tmp_path / "run")
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["plot", str(run), "--out", str(tmp_path / name)])
    assert r.exit_code == 2
    assert r.stderr == f"error: --out {tmp_path / name}: plot writes an HTML page (give a .html file)\n"
    assert r.stdout == "" and sorted(tmp_path.rglob("*")) == before


def test_report_refuses_an_out_that_is_not_html(tmp_path):
    root = tmp_path / "cmp"
    root.mkdir()
    (root / "compare.json").write_text("{oops")
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["report", str(root), "--out", str(tmp_path / "r.png")])
    assert r.exit_code == 2
    assert r.stderr == f"error: --out {tmp_path / 'r.png'}: report writes an HTML page (give a .html file)\n"
    assert sorted(tmp_path.rglob("*")) == before


def test_validate_refuses_a_plot_that_is_not_html_before_it_replays(tmp_path):
    run = broken_run(tmp_path / "run")
    before = sorted(tmp_path.rglob("*"))
    r = runner.invoke(app, ["validate", str(run), "--profile", str(PROFILE), "--plot", str(tmp_path / "v.png")])
    assert r.exit_code == 2
    assert r.stderr == (f"error: --plot {tmp_path / 'v.png'}: validate --plot writes an HTML page "
                        "(give a .html file)\n")
    assert sorted(tmp_path.rglob("*")) == before  # no validate.json either


def test_html_in_any_case_is_an_html_page(tmp_path):
    out = tmp_path / "Timeline.HTML"
    r = runner.invoke(app, ["plot", str(RUN), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"wrote {out}\n" and out.read_text().startswith("<!DOCTYPE html>")


def test_the_output_checks_before_it_keep_their_messages(tmp_path):
    """A directory given as --out is still 'is a directory', not a wrong ending."""
    r = runner.invoke(app, ["plot", str(RUN), "--out", str(tmp_path)])
    assert r.exit_code == 2 and r.stderr == f"error: --out {tmp_path}: is a directory, not a file\n"
