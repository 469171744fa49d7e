"""``sortedrl run``, ``calibrate --model`` and ``model init`` say what they are doing on a stderr
that is not a terminal: one line as the engines start and one per update (calibrate: per
measurement; model init: one per phase and one per tenth of its warm-start).

A tester's run under ``> run.log 2>&1`` printed nothing for minutes (the bar is drawn only on a
terminal), so a slow run could not be told from a hung one. The lines' code is driven here with a
fake clock and a StringIO; the commands are driven with the real runner's work replaced by a
stand-in (no vLLM), on CliRunner's stderr (not a terminal) and on a console that is one. A real
run's lines are asserted once, in test_realrun_first_hour's quiet run, and a real
``model init``'s there too.

Run: pytest tests/test_progress_lines.py
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.cli_common import LazyProgress
from sortedrl.realrun.progress_lines import CountLines, ModelInitLines, RunLines

FIX = Path(__file__).resolve().parent / "fixtures"
runner = CliRunner()


class Clock:
    """A clock that reads what the test set."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_runs_lines_count_updates_samples_and_seconds_from_the_start():
    clock, out = Clock(), io.StringIO()
    lines = RunLines(128, out, clock)
    clock.now += 0.4
    lines.starting(1, "cpu", False)
    clock.now += 41.3
    lines.updated(1, 32, 188)
    clock.now += 1_200.0
    lines.updated(4, 128, 1_138)
    assert out.getvalue().splitlines() == [
        "run: starting 1 vLLM engine and the trainer on cpu, 0 s elapsed",
        "run: update 1 done, 32 of 128 samples trained, 188 tokens generated, 42 s elapsed",
        "run: update 4 done, 128 of 128 samples trained, 1,138 tokens generated, 1,242 s elapsed",
    ]


def test_engines_on_ray_are_named_as_actors():
    out = io.StringIO()
    RunLines(8, out, Clock()).starting(2, "cuda", True)
    assert out.getvalue() == "run: starting 2 vLLM engines and the trainer on cuda as Ray actors, 0 s elapsed\n"


def test_a_counted_commands_lines_say_what_starts_and_how_many_are_done():
    clock, out = Clock(), io.StringIO()
    lines = CountLines("calibrate", 92, "measurements", out, clock)
    lines(0, "starting the vLLM engine for the step grid")
    clock.now += 30.0
    lines(1, "decode B=1 ctx=16")
    clock.now += 0.2
    lines(2, "prefill 16 x 96")
    lines.close()  # (nothing to take down, nothing printed)
    assert out.getvalue().splitlines() == [
        "calibrate: starting the vLLM engine for the step grid, 0 s elapsed",
        "calibrate: 1 of 92 measurements done (decode B=1 ctx=16), 30 s elapsed",
        "calibrate: 3 of 92 measurements done (prefill 16 x 96), 30 s elapsed",
    ]


def test_model_inits_lines_name_each_phase_and_each_tenth_of_the_warm_start():
    out = io.StringIO()
    lines = ModelInitLines(out)
    lines.phase("warm-starting the model: 300 supervised steps")
    for done in range(1, 301):
        lines.stepped(done, 300)
    assert out.getvalue().splitlines() == [
        "model init: warm-starting the model: 300 supervised steps",
        *(f"model init: {k} of 300 warm-start steps done" for k in range(30, 301, 30))]


@pytest.mark.parametrize("steps, said", [(4, [1, 2, 3, 4]), (15, [2, 3, 5, 6, 8, 9, 11, 12, 14, 15]),
                                         (1_000, list(range(100, 1_001, 100)))])
def test_a_warm_start_says_at_most_ten_counts_and_always_its_last(steps, said):
    out = io.StringIO()
    lines = ModelInitLines(out)
    for done in range(1, steps + 1):
        lines.stepped(done, steps)
    assert out.getvalue().splitlines() == [f"model init: {k:,} of {steps:,} warm-start steps done" for k in said]


# -- the commands: lines where stderr is no terminal, the bar and no line where it is ------------

SUMMARY = json.loads((FIX / "run-sync" / "summary.json").read_text())
ELAPSED = r"[0-9,]+ s elapsed"


@pytest.fixture
def fake_run(monkeypatch):
    """``run_real`` replaced: it says what a 2-update run would, and records what it was given."""
    from sortedrl.realrun import run as run_module

    given = {}

    def run_real(cfg, resume=False, progress=None, force=False, lines=None):
        given.update(progress=progress, lines=lines)
        if lines is not None:
            lines.starting(cfg.engines, cfg.device, cfg.on_ray)
            lines.updated(1, 32, 188)
            lines.updated(2, 64, 498)
        return SUMMARY

    monkeypatch.setattr(run_module, "run_real", run_real)
    return given


def _run(tmp_path: Path, *extra: str):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    return runner.invoke(app, ["run", "--model", str(model), "--policy", "sync", "--steps", "2",
                               "--out", str(tmp_path / "run"), *extra])


def test_run_prints_its_lines_on_a_stderr_that_is_no_terminal_and_stdout_stays_json(tmp_path, fake_run):
    r = _run(tmp_path, "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout) == SUMMARY  # (the lines are on stderr only)
    assert fake_run["progress"] is None and isinstance(fake_run["lines"], RunLines)
    expected = ["run: starting 1 vLLM engine and the trainer on cpu, ",
                "run: update 1 done, 32 of 64 samples trained, 188 tokens generated, ",
                "run: update 2 done, 64 of 64 samples trained, 498 tokens generated, "]
    got = r.stderr.splitlines()
    assert len(got) == len(expected), r.stderr
    for line, start in zip(got, expected, strict=True):
        assert re.fullmatch(re.escape(start) + ELAPSED, line), line


def test_run_on_a_terminal_has_the_bar_and_prints_no_line(tmp_path, fake_run, monkeypatch):
    from sortedrl.realrun import commands

    monkeypatch.setattr(commands, "err", Console(file=io.StringIO(), force_terminal=True))
    r = _run(tmp_path)
    assert r.exit_code == 0, r.output
    assert isinstance(fake_run["progress"], LazyProgress) and fake_run["lines"] is None
    assert r.stderr == ""  # (the bar shows after a second, on the terminal: this run took less)


def test_calibrate_model_prints_a_line_per_measurement_on_a_stderr_that_is_no_terminal(tmp_path, monkeypatch):
    from sortedrl.realrun import calibrate as calibrate_module

    def calibrate(model, progress=None, **kwargs):
        progress(0, "starting the vLLM engine for the step grid")
        progress(1, "decode B=1 ctx=16")
        profile = json.loads((FIX / "cpu-profile.json").read_text())  # (older: no noise, no form)
        profile["fit"]["noise"] = {"grid_rel_mad": 0.01, "runner_steps_dropped": 0, "repeat_spread": 0.02}
        profile["fit"]["train"]["form"] = "per_token"
        return profile

    monkeypatch.setattr(calibrate_module, "calibrate", calibrate)
    model, out = tmp_path / "model", tmp_path / "p.json"
    model.mkdir()
    r = runner.invoke(app, ["calibrate", "--model", str(model), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"wrote {out}: engine steps MAPE ")
    # 3 repeats of 18 decode and 9 prefill shapes and 3 runner runs, the updates, the shared host
    expected = ["calibrate: starting the vLLM engine for the step grid, ",
                "calibrate: 1 of 92 measurements done (decode B=1 ctx=16), "]
    got = r.stderr.splitlines()
    assert len(got) == len(expected), r.stderr
    for line, start in zip(got, expected, strict=True):
        assert re.fullmatch(re.escape(start) + ELAPSED, line), line


@pytest.fixture
def fake_init(monkeypatch):
    """``init_model`` replaced: it says what a 20-step warm-start would (no model is built), and
    records the lines it was given."""
    from sortedrl.realrun import model as model_module

    given = {}

    def init_model(out, lines=None, **kwargs):
        given["lines"] = lines
        if lines is not None:
            lines.phase("warm-starting the model: 20 supervised steps")
            for done in range(1, 21):
                lines.stepped(done, 20)
        return out

    monkeypatch.setattr(model_module, "init_model", init_model)
    return given


def test_model_init_prints_its_lines_on_a_stderr_that_is_no_terminal(tmp_path, fake_init):
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"wrote {tmp_path / 'm'}\n"  # (the lines are on stderr only)
    assert r.stderr.splitlines() == ["model init: warm-starting the model: 20 supervised steps",
                                     *(f"model init: {k} of 20 warm-start steps done" for k in range(2, 21, 2))]


def test_model_init_on_a_terminal_prints_no_line(tmp_path, fake_init, monkeypatch):
    from sortedrl.realrun import commands

    monkeypatch.setattr(commands, "err", Console(file=io.StringIO(), force_terminal=True))
    r = runner.invoke(app, ["model", "init", "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert fake_init["lines"] is None and r.stderr == ""
