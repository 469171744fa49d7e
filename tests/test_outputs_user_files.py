"""A run directory is replaced only when it holds nothing but sortedrl's files; links, inputs and
impossible splits are refused first (an audit of output safety, helper outsafe).

- Re-running a command into the same --out deleted the user's own files in it (notes, a folder
  of theirs) without --force: the marker was trusted and the contents never listed. The marker
  now lists what the command wrote; anything else is refused, named, as a directory of someone
  else's files is. `plot` and `report`'s default pages count as the run's; an old marker without
  the list is read by the names each command writes.
- An --out (or --perfetto, or plot's page) that is a symbolic link was replaced by a new local
  directory (or file), the link's target left alone: refused now; a linked parent still works.
- With the input trace inside --out, the first error suggested --force, which was then refused.

Run: pytest tests/test_outputs_user_files.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl import run_marker
from sortedrl.cli import app
from sortedrl.outputs import MARKER
from sortedrl.timeline_file import NAMES

runner = CliRunner()
SMALL = ["--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--steps", "2"]
SIM = ["simulate", *SMALL, "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]
CMP = ["compare", *SMALL, "--policy", "sync", "--policy", "a=sortedrl", "--cluster", "h100-llama3.1-8b-2gpu"]


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): ("dir" if p.is_dir() and not p.is_symlink() else
                                       "link" if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(root.rglob("*"))}


def ok(args: list[str]):
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    return r


def refused(args: list[str], message: str, root: Path) -> None:
    """``args`` fail with exactly ``message`` as one error line, and change nothing under root."""
    before = snapshot(root)
    r = runner.invoke(app, args)
    assert (r.exit_code, r.stderr) == (2, f"error: {message}\n"), r.output
    assert snapshot(root) == before


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# -- 1. the user's files in a previous run directory ------------------------------------------------


@pytest.mark.parametrize("mine, named", [("notes.txt", "notes.txt"), ("mydata/f", "mydata/"),
                                         ("mydata/", "mydata/")])
def test_a_rerun_keeps_the_users_files_unless_forced(ws, mine, named):
    ok([*SIM, "--out", "u/run"])
    target = ws / "u" / "run" / mine
    if mine.endswith("/"):
        target.mkdir()
    else:
        target.parent.mkdir(exist_ok=True)
        target.write_text("keep me")
    refused([*SIM, "--out", "u/run"],
            "--out u/run: not empty (a `sortedrl simulate` run and files not written by sortedrl: "
            f"{named}); give another directory, or --force to replace it, deleting them", ws)
    r = ok([*SIM, "--out", "u/run", "--force"])
    assert "note: replacing u/run (--force)" in r.stderr
    assert sorted(p.name for p in (ws / "u" / "run").iterdir()) == [MARKER, "summary.json", "timeline.npz"]


def test_a_default_run_directory_keeps_the_users_files_too(ws):
    ok([*SIM, "--json"])
    (run,) = (ws / "runs").iterdir()
    (run / "notes.txt").write_text("keep me")
    refused([*SIM, "--json"],
            f"--out runs/{run.name}: not empty (a `sortedrl simulate` run and files not written by "
            "sortedrl: notes.txt); give another directory, or --force to replace it, deleting them", ws)


def test_the_marker_lists_what_the_command_wrote(ws):
    ok([*SIM, "--out", "s"])
    ok([*CMP, "--out", "c", "--timeline", "jsonl"])
    assert json.loads((ws / "s" / MARKER).read_text())["files"] == ["summary.json", "timeline.npz"]
    assert json.loads((ws / "c" / MARKER).read_text())["files"] == [
        "a/", "a/summary.json", "a/timeline.jsonl", "compare.json", "sync/", "sync/summary.json",
        "sync/timeline.jsonl"]


def test_a_rerun_replaces_the_pages_plot_and_report_added(ws):
    # the README: re-running with the same options removes a timeline.html or report.html there
    ok([*SIM, "--out", "s"])
    ok(["plot", "s"])
    (ws / "s" / ".timeline.html.tmp-x1y2.html").write_text("")  # a killed plot's temporary
    r = ok([*SIM, "--out", "s"])
    # (the note names the pages it deletes with the run; a killed plot's temporary is not one)
    assert ("note: replacing the previous `sortedrl simulate` run in s, and the pages added to it "
            "(timeline.html)") in r.stderr.splitlines()
    assert sorted(p.name for p in (ws / "s").iterdir()) == [MARKER, "summary.json", "timeline.npz"]
    ok([*CMP, "--out", "c"])
    ok(["report", "c"])
    ok(["plot", "c/a"])
    r = ok([*CMP, "--out", "c"])
    assert ("note: replacing the previous `sortedrl compare` run in c, and the pages added to it "
            "(a/timeline.html, report.html)") in r.stderr.splitlines()
    assert sorted(str(p.relative_to(ws / "c")) for p in (ws / "c").rglob("*")) == [
        MARKER, "a", "a/summary.json", "a/timeline.npz", "compare.json", "sync", "sync/summary.json",
        "sync/timeline.npz"]


def test_a_users_file_in_a_policys_directory_is_named(ws):
    ok([*CMP, "--out", "c"])
    (ws / "c" / "a" / "mine.txt").write_text("keep me")
    refused([*CMP, "--out", "c"],
            "--out c: not empty (a `sortedrl compare` run and files not written by sortedrl: "
            "a/mine.txt); give another directory, or --force to replace it, deleting them", ws)


def test_a_users_file_in_a_tune_directory_is_named(ws):
    tune = ["tune", *SMALL, "--policy", "sync", "--budget", "1", "--out", "t"]
    ok(tune)
    (ws / "t" / "best.txt").write_text("keep me")
    refused(tune, "--out t: not empty (a `sortedrl tune` run and files not written by sortedrl: "
                  "best.txt); give another directory, or --force to replace it, deleting them", ws)


def _old_marker(run: Path) -> None:
    """The marker as written before it listed the files."""
    marker = json.loads((run / MARKER).read_text())
    del marker["files"]
    (run / MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n")


def test_an_old_marker_is_read_by_the_names_its_command_writes(ws):
    ok([*SIM, "--out", "s"])
    ok(["plot", "s"])
    _old_marker(ws / "s")
    assert "note: replacing the previous" in ok([*SIM, "--out", "s"]).stderr
    ok([*CMP, "--out", "c"])
    ok(["report", "c"])
    _old_marker(ws / "c")
    assert "note: replacing the previous" in ok([*CMP, "--out", "c"]).stderr
    _old_marker(ws / "c")
    (ws / "c" / "notes").mkdir()
    (ws / "c" / "notes" / "todo.txt").write_text("keep me")
    refused([*CMP, "--out", "c"],
            "--out c: not empty (a `sortedrl compare` run and files not written by sortedrl: "
            "notes/todo.txt); give another directory, or --force to replace it, deleting them", ws)
    _old_marker(ws / "s")
    (ws / "s" / "sub").mkdir()
    refused([*SIM, "--out", "s"],
            "--out s: not empty (a `sortedrl simulate` run and files not written by sortedrl: "
            "sub/); give another directory, or --force to replace it, deleting them", ws)


def test_the_timeline_names_are_the_ones_the_check_knows():
    assert run_marker._TIMELINES == NAMES


# -- 2. links -----------------------------------------------------------------------------------------


def test_an_out_that_is_a_link_is_refused(ws):
    (ws / "target").mkdir()
    (ws / "u").mkdir()
    (ws / "u" / "link").symlink_to("../target")
    for out in ("u/link", "u/link/"):
        refused([*SIM, "--out", out], "--out u/link: is a symbolic link to target; give the directory "
                                      "it points to, or another path", ws)
    (ws / "gone").symlink_to("nowhere")
    refused([*SIM, "--out", "gone"], "--out gone: is a symbolic link to nowhere; give the directory "
                                     "it points to, or another path", ws)
    (ws / "etc").symlink_to("/etc")
    refused([*SIM, "--out", "etc", "--force"], "--out etc: is a symbolic link to /etc; give the "
                                               "directory it points to, or another path", ws)


def test_a_linked_parent_is_followed(ws):
    (ws / "real").mkdir()
    (ws / "lp").symlink_to("real")
    ok([*SIM, "--out", "lp/run"])
    assert (ws / "lp").is_symlink()
    assert sorted(p.name for p in (ws / "real" / "run").iterdir()) == [MARKER, "summary.json", "timeline.npz"]


def test_a_file_output_that_is_a_link_is_refused(ws):
    ok([*SIM, "--out", "s"])
    (ws / "p.json").write_text("{}")
    (ws / "pl.json").symlink_to("p.json")
    refused([*SIM, "--out", "s2", "--perfetto", "pl.json", "--force"],
            "--perfetto pl.json: is a symbolic link to p.json; give the file it points to, or another "
            "path", ws)
    (ws / "page.html").write_text("")
    (ws / "s" / "timeline.html").symlink_to("../page.html")  # plot's own page, as a link
    refused(["plot", "s"], "--out s/timeline.html: is a symbolic link to page.html; give the file it "
                           "points to, or another path", ws)


# -- 5. an input inside --out -------------------------------------------------------------------------


def test_an_input_inside_out_is_the_first_error(ws):
    ok([*SIM, "--out", "s"])
    (ws / "s" / "trace.jsonl").write_text((Path(__file__).parents[1] / "sortedrl" / "traces" / "data"
                                           / "logic-8k.jsonl").read_text())
    for force in ([], ["--force"]):
        refused(["simulate", "--trace", "s/trace.jsonl", "--policy", "sync", "--out", "s", *force],
                f"--out s: holds the input {ws / 's' / 'trace.jsonl'}; write the output elsewhere", ws)


def test_files_a_file_browser_drops_do_not_block_a_rerun(ws):
    """Finder's .DS_Store and AppleDouble ._ files, Explorer's Thumbs.db and desktop.ini appear
    when someone looks at a run: they are not the user's work, and go with the run."""
    ok([*SIM, "--out", "u/run"])
    run = ws / "u" / "run"
    for name in (".DS_Store", "._summary.json", "Thumbs.db", "desktop.ini"):
        (run / name).write_bytes(b"\x00")
    ok([*SIM, "--out", "u/run"])
    assert not any((run / name).exists() for name in (".DS_Store", "._summary.json", "Thumbs.db", "desktop.ini"))
    assert (run / "summary.json").is_file()


def test_runs_rundir_behind_a_link_is_used_with_force_as_without(ws):
    """`sortedrl run` writes into a linked RUNDIR, and --force empties it in place (start_over):
    its --force check is made on the directory the link names, not refused as a link."""
    import shutil
    from types import SimpleNamespace

    from sortedrl.realrun.rundir import check_run_dir

    shutil.copytree(Path(__file__).parent / "fixtures" / "run-sync", ws / "big" / "run")
    (ws / "link").symlink_to("big/run")
    cfg = SimpleNamespace(model=str(ws / "model"), dataset=None)
    check_run_dir(cfg, ws / "link", resume=False, force=True, task="sort")  # no error
    with pytest.raises(Exception, match="holds a complete run|holds a run"):
        check_run_dir(cfg, ws / "link", resume=False, force=False, task="sort")


def test_a_directory_of_users_files_is_refused_naming_them(tmp_path, monkeypatch):
    """--out into a folder of the user's own (no run in it) names its first entry and how many
    more, and says --force deletes them; a previous run of another command with a user's file
    beside it names the file too."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "u" / "data").mkdir(parents=True)
    (tmp_path / "u" / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["simulate", "--trace", "logic-8k", "--policy", "sync", "--out", "u"])
    assert (r.exit_code, r.stderr) == (2, "error: --out u: not empty (files not written by sortedrl: data/ "
                                          "and 1 more); give another directory, or --force to replace "
                                          "it, deleting them\n")
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == ["data", "notes.txt"]
    ok = runner.invoke(app, ["simulate", "--trace", "logic-8k", "--policy", "sync", "--out", "s", "--json"])
    assert ok.exit_code == 0, ok.output
    (tmp_path / "s" / "notes.txt").write_text("mine")
    r = runner.invoke(app, ["compare", "--trace", "logic-8k", "--policy", "sync", "--out", "s"])
    assert (r.exit_code, r.stderr) == (2, "error: --out s: not empty (a `sortedrl simulate` run and files "
                                          "not written by sortedrl: notes.txt); give another directory, "
                                          "or --force to replace it, deleting them\n")
