"""Ctrl-C at any moment: one `error:` line, exit 130, and outputs whole (helper 106's audit).

The renames that put outputs in place hold the signals back (sortedrl.interrupts), so an
interrupt between two of them no longer leaves the previous output moved aside or its backup
behind; a model directory is built in a fresh hidden directory that a failure removes; and an
interrupt during start-up, option parsing or `trace fit` prints the same one line as elsewhere.
Interrupts are injected (a signal sent from inside a rename, a KeyboardInterrupt raised from an
import or a parse), so nothing here depends on timing.
"""

from __future__ import annotations

import builtins
import os
import signal
import threading
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

try:  # typer 0.2x carries its own click (as cli_common imports it)
    from typer._click.core import Command
except ImportError:  # pragma: no cover - older typer
    from click.core import Command

from sortedrl import cli_common, console
from sortedrl.cli import app
from sortedrl.outputs import Outputs, write_text
from sortedrl.realrun.model import save_aside
from tests.cli_helpers import Interrupted  # (the sigint_raises fixture: conftest.py)

runner = CliRunner()


def siblings(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("after", [1, 2, 3, 4])
def test_a_ctrl_c_between_the_renames_waits_until_the_outputs_are_in_place(tmp_path, monkeypatch,
                                                                            sigint_raises, after):
    """Two outputs replaced with --force: old a -> backup, tmp -> a, old b -> backup, ... A
    SIGINT sent from inside rename number ``after`` arrives only when every output is new and
    every backup gone (it used to leave `.a.old-PID` behind, or `a` moved aside for good)."""
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("old a")
    b.write_text("old b")
    outs = Outputs("test", force=True)
    outs.file(a, "--a")
    outs.file(b, "--b")
    real_rename, calls = os.rename, []

    def rename(src, dst):
        real_rename(src, dst)
        calls.append(dst)
        if len(calls) == after:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(Interrupted):
        outs.write({a: write_text("new a"), b: write_text("new b")})
    assert len(calls) == 4  # every rename ran before the interrupt was let through
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert siblings(tmp_path) == ["a.txt", "b.txt"]


def test_the_signal_handlers_are_restored_after_the_outputs_are_written(tmp_path):
    held = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = [signal.getsignal(s) for s in held]
    outs = Outputs("test")
    out = outs.file(tmp_path / "x.txt", "--out")
    outs.write({out: write_text("x")})
    assert [signal.getsignal(s) for s in held] == before


def test_a_signal_is_held_back_while_another_thread_runs(tmp_path, monkeypatch, sigint_raises):
    """A process-directed signal may be taken by any thread (a progress display's): it still
    waits for the renames (blocking it in the main thread alone did not)."""
    stop = threading.Event()
    busy = threading.Thread(target=stop.wait)
    busy.start()
    try:
        test_a_ctrl_c_between_the_renames_waits_until_the_outputs_are_in_place(tmp_path, monkeypatch, None, 1)
    finally:
        stop.set()
        busy.join()


def test_an_interrupted_model_save_leaves_nothing_and_a_stale_one_is_never_merged(tmp_path):
    out = tmp_path / "m"
    stale = tmp_path / ".m.tmp"  # what an interrupted save of an older version left
    stale.mkdir()
    (stale / "stale-marker").write_text("x")

    def interrupted(tmp):
        (tmp / "config.json").write_text("{}")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_aside(out, interrupted)
    assert siblings(tmp_path) == [".m.tmp"]  # nothing of this save is left

    def save(tmp):
        (tmp / "config.json").write_text("{}")

    save_aside(out, save)
    assert siblings(out) == ["config.json"]
    assert siblings(tmp_path) == [".m.tmp", "m"]


def test_a_ctrl_c_during_start_up_is_one_line(monkeypatch, capsys):
    real_import = builtins.__import__

    def importing(name, *args, **kwargs):
        if name == "sortedrl.cli":
            raise KeyboardInterrupt  # as if it came while NumPy or SimPy was being imported
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", importing)
    with pytest.raises(SystemExit) as e:
        console.main()
    assert e.value.code == 130
    assert capsys.readouterr().err == "error: interrupted (Ctrl-C)\n"


def test_a_ctrl_c_while_the_options_are_parsed_is_one_line(monkeypatch):
    """typer turns it into a silent exit 130; the command group says it."""
    monkeypatch.setattr(cli_common, "_interrupt_reported", False)

    def parse_args(self, ctx, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(Command, "parse_args", parse_args)
    r = runner.invoke(app, ["trace", "stats", "math-16k"])
    assert (r.exit_code, r.output) == (130, "error: interrupted (Ctrl-C)\n")


def test_a_ctrl_c_in_a_command_is_said_once(monkeypatch):
    monkeypatch.setattr(cli_common, "_interrupt_reported", False)

    def read_trace(path):
        raise KeyboardInterrupt

    monkeypatch.setattr("sortedrl.traces.commands.read_trace", read_trace)
    r = runner.invoke(app, ["trace", "stats", "math-16k"])
    assert (r.exit_code, r.output) == (130, "error: interrupted (Ctrl-C)\n")


def test_a_ctrl_c_in_trace_fit_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cli_common, "_interrupt_reported", False)

    def fit_trace(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("sortedrl.traces.fit.fit_trace", fit_trace)
    r = runner.invoke(app, ["trace", "fit", "math-16k", "--out", str(tmp_path / "m.json")])
    assert (r.exit_code, r.output) == (130, "error: interrupted (Ctrl-C)\n")
    assert siblings(tmp_path) == []


def test_the_console_script_is_the_one_that_catches_a_ctrl_c_during_start_up():
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"] == {"sortedrl": "sortedrl.console:main"}


def test_a_second_ctrl_c_goes_through_at_once(tmp_path, monkeypatch, sigint_raises):
    """A removal that hangs (a slow network disk) is not waited out by a user who presses
    Ctrl-C again: the second one interrupts it; the handlers are put back either way."""
    from sortedrl import interrupts

    held = [signal.getsignal(s) for s in interrupts.HELD]
    with pytest.raises(Interrupted):
        with interrupts.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            raise AssertionError("the second Ctrl-C did not go through")
    assert [signal.getsignal(s) for s in interrupts.HELD] == held


def test_the_same_app_run_twice_says_a_parse_time_ctrl_c_each_time(monkeypatch):
    def read_trace(path):
        raise KeyboardInterrupt

    monkeypatch.setattr("sortedrl.traces.commands.read_trace", read_trace)
    first = runner.invoke(app, ["trace", "stats", "math-16k"])
    assert (first.exit_code, first.output) == (130, "error: interrupted (Ctrl-C)\n")

    def parse_args(self, ctx, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(Command, "parse_args", parse_args)
    second = runner.invoke(app, ["trace", "stats", "math-16k"])
    assert (second.exit_code, second.output) == (130, "error: interrupted (Ctrl-C)\n")


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_ctrl_c_as_the_staging_copy_is_made_leaves_no_copy(tmp_path, monkeypatch, sigint_raises, kind):
    """The copy an output is built in was made by ``mkstemp``/``mkdtemp`` and named for removal
    only after: a Ctrl-C in between left `.x.txt.tmp-*` beside the output (a walk saw one)."""
    import tempfile

    made = "mkstemp" if kind == "file" else "mkdtemp"
    real = getattr(tempfile, made)

    def make_then_ctrl_c(*args, **kwargs):
        out = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return out

    outs = Outputs("test")
    if kind == "file":
        out = outs.file(tmp_path / "x.txt", "--out")
        what = write_text("x")
    else:
        out = outs.run_dir(tmp_path / "run", tmp_path / "run")
        what = {"a.txt": write_text("a")}
    monkeypatch.setattr(tempfile, made, make_then_ctrl_c)
    with pytest.raises(Interrupted):
        outs.write({out: what})
    assert siblings(tmp_path) == []


@pytest.mark.parametrize("stop, line, code", [
    (KeyboardInterrupt, "interrupted (Ctrl-C)", 130),
    (lambda: cli_common.Terminated(signal.SIGTERM), "terminated (SIGTERM)", 143)])
def test_a_stop_once_the_outputs_are_written_says_they_are_complete(tmp_path, monkeypatch, stop, line, code):
    """A Ctrl-C while the table prints, after the run directory was put in place: the bare
    `interrupted` line read as if nothing was written (the `wrote ...` line never came)."""
    monkeypatch.setattr(cli_common, "_interrupt_reported", False)

    def summary_text(*args, **kwargs):
        raise stop()

    monkeypatch.setattr("sortedrl.cli.summary_text", summary_text)
    out = tmp_path / "run"
    r = runner.invoke(app, ["simulate", "--policy", "sync", "--synthetic", "math-16k", "--prompts", "4", "--steps", "1",
                            "--out", str(out)])
    errors = [x for x in r.output.splitlines() if x.startswith("error:")]  # (after the warnings)
    assert (r.exit_code, errors) == (code, [f"error: {line}, after writing {out} (complete)"])
    assert (out / "summary.json").is_file()
    # the next command in this process starts with nothing written
    monkeypatch.setattr("sortedrl.traces.commands.read_trace", lambda path: summary_text())
    r = runner.invoke(app, ["trace", "stats", "math-16k"])
    assert (r.exit_code, r.output) == (code, f"error: {line}\n")


def test_a_ctrl_c_that_waited_for_the_outputs_to_go_in_says_they_are_complete(tmp_path, monkeypatch):
    """The renames hold Ctrl-C back and raise it once the outputs are in place: that stop came
    after them too (review: it said the bare line, the paths recorded only after the commit)."""
    from sortedrl import outputs_commit

    monkeypatch.setattr(cli_common, "_interrupt_reported", False)
    real = outputs_commit._renames

    def renames_then_ctrl_c(*args, **kwargs):
        real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)  # (held until the renames' block ends)

    monkeypatch.setattr(outputs_commit, "_renames", renames_then_ctrl_c)
    out = tmp_path / "run"
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # (a suite run in the
    try:  # background has Ctrl-C ignored: a terminal's Ctrl-C raises KeyboardInterrupt)
        r = runner.invoke(app, ["simulate", "--policy", "sync", "--synthetic", "math-16k", "--prompts",
                                "4", "--steps", "1", "--out", str(out)])
    finally:
        signal.signal(signal.SIGINT, before)
    errors = [x for x in r.output.splitlines() if x.startswith("error:")]
    assert (r.exit_code, errors) == (130, [f"error: interrupted (Ctrl-C), after writing {out} (complete)"])
    assert (out / "summary.json").is_file()
