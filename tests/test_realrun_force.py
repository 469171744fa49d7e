"""``sortedrl run --force`` keeps the run it replaces until the new one has a checkpoint.

It deleted the previous run before the new one started vLLM (minutes on a CPU), so a Ctrl-C in
those minutes left an empty RUNDIR: the finished run, its ``validate.json`` and the user's
``notes.txt`` in it gone, nothing to resume (a tester's report). Here the new run is stopped
where its engine would start (``_start_backend`` raising what Ctrl-C raises, or an error), on a
copy of a real run's directory (tests/fixtures/run-sync); the whole run to a checkpoint is
test_realrun's ``--force`` test, which checks the aside is gone after it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.realrun import run as run_module

RUN = Path(__file__).parent / "fixtures" / "run-sync"


def _files(top: Path) -> dict:
    return {p.relative_to(top): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("stop, code, line", [
    (KeyboardInterrupt, 130, "error: interrupted (Ctrl-C)"),
    (OSError(28, "No space left on device", "/dev/shm/vllm"), 2, "error: /dev/shm/vllm: No space left on device"),
])
def test_a_forced_run_stopped_before_its_first_checkpoint_puts_the_old_run_back(
        tiny_model, tmp_path, monkeypatch, stop, code, line):
    out = tmp_path / "run"
    shutil.copytree(RUN, out)
    (out / "validate.json").write_text("{}\n")  # what validate wrote into the run's directory
    before = _files(out)

    def engines_start(*args, **kwargs):
        assert not (out / "summary.json").exists() and (out / ".previous-run" / "summary.json").is_file()
        raise stop

    monkeypatch.setattr(run_module, "_start_backend", engines_start)
    r = CliRunner().invoke(app, ["run", "--model", tiny_model, "--out", str(out), "--policy", "sync",
                                 "--steps", "4", "--force"])
    assert r.exit_code == code and r.stderr.splitlines()[-1] == line, r.output
    assert _files(out) == before and not (out / ".previous-run").exists()


def test_force_refuses_a_file_no_run_writes_and_touches_nothing(tiny_model, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(RUN, out)
    (out / "notes.txt").write_text("keep me\n")
    before = _files(out)
    r = CliRunner().invoke(app, ["run", "--model", tiny_model, "--out", str(out), "--policy", "sync",
                                 "--steps", "4", "--force"])
    assert r.exit_code == 2 and r.stderr == (
        f"error: --out {out}: holds notes.txt, which `sortedrl run` does not write: --force replaces a "
        "run's files only (move it, or give another directory)\n"), r.output
    assert _files(out) == before


@pytest.mark.parametrize("args", [
    ["plot", "{run}", "--perfetto", "{run}/checkpoint/state.json", "--force"],
    ["plot", "{run}", "--out", "{run}/checkpoint.prev/x.html"],
    ["validate", "{run}", "--profile", str(Path(__file__).parent / "fixtures" / "cpu-profile.json"),
     "--plot", "{run}/checkpoint/x.html"],
    ["validate", "{run}", "--profile", str(Path(__file__).parent / "fixtures" / "cpu-profile.json"),
     "--out", "{run}/checkpoint.prev/validate.json"],
])
def test_no_output_goes_into_a_runs_checkpoint(tmp_path, args):
    """``plot --perfetto RUNDIR/checkpoint/state.json --force`` wrote over the checkpoint's state,
    and ``--resume`` then refused it (``field 'policy' is missing``)."""
    out = tmp_path / "run"
    shutil.copytree(RUN, out)
    for name in ("checkpoint", "checkpoint.prev"):
        (out / name).mkdir()
        (out / name / "state.json").write_text('{"the": "run\'s state"}\n')
    before = _files(out)
    argv = [a.format(run=out) for a in args]
    r = CliRunner().invoke(app, argv)
    where = argv[argv.index(next(a for a in argv if "/checkpoint" in a)) - 1]
    target = next(a for a in argv if "/checkpoint" in a)
    ckpt = out / Path(target).relative_to(out).parts[0]
    assert r.exit_code == 2 and r.stderr == (
        f"error: {where} {target}: would write into {ckpt}, a run's checkpoint (--resume reads it); "
        "write the output elsewhere\n"), r.output
    assert _files(out) == before
