"""A run directory's marker records a trace (and a cluster file) by its resolved path (an audit,
det41).

The marker held `--trace` as typed, so the same file given relative and then absolute was
refused on a re-run ("holds a run with other options"), while another file of the same relative
name, from another directory, was taken for the previous run and replaced without a word. Now
the path is resolved: the same file however typed is the same run, another file is another. A
marker written before (a path as typed) is the same run when that path, from the current
directory, reaches the file; otherwise the re-run is refused as before. Bundled traces and
synthetic presets are recorded as they were.

Run: pytest tests/test_run_marker_paths.py
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.outputs import MARKER
from sortedrl.traces import write_trace
from sortedrl.traces.io import BUNDLED
from sortedrl.traces.synth import synthesize

runner = CliRunner()
CLUSTER = "h100-llama3.1-8b-2gpu"
COMMANDS = {
    "simulate": ["simulate", "--policy", "sync"],
    "compare": ["compare", "--policy", "sync", "--policy", "sortedrl"],
    "tune": ["tune", "--policy", "sync", "--budget", "1"],
}


@pytest.fixture()
def two_dirs(tmp_path, monkeypatch):
    """Directories a/ and b/, each with its own t.jsonl (different traces), and the run
    directory's absolute path; the current directory is a/."""
    for name, seed in (("a", 1), ("b", 2)):
        (tmp_path / name).mkdir()
        write_trace(synthesize("logic-8k", prompts=8, group_size=2, steps=1, seed=seed),
                    tmp_path / name / "t.jsonl")
    monkeypatch.chdir(tmp_path / "a")
    return tmp_path, tmp_path / "run"


def invoke(command: str, trace: str, out, *extra: str):
    return runner.invoke(app, [*COMMANDS[command], "--trace", trace, "--cluster", CLUSTER,
                               "--out", str(out), *extra])


def source(out) -> str:
    return json.loads((out / MARKER).read_text())["source"]


@pytest.mark.parametrize("command", COMMANDS)
def test_the_same_file_relative_then_absolute_is_the_same_run(two_dirs, command):
    root, out = two_dirs
    first = invoke(command, "t.jsonl", out)
    assert first.exit_code == 0, first.output
    assert source(out) == str(root / "a" / "t.jsonl")
    again = invoke(command, str(root / "a" / "t.jsonl"), out)
    assert again.exit_code == 0, again.output
    assert f"note: replacing the previous `sortedrl {command}` run in {out}\n" in again.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_another_file_of_the_same_name_is_another_run(two_dirs, monkeypatch, command):
    root, out = two_dirs
    assert invoke(command, "t.jsonl", out).exit_code == 0
    monkeypatch.chdir(root / "b")
    r = invoke(command, "t.jsonl", out)
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == (f"error: {out} holds a `sortedrl {command}` run with other options (--trace: "
                        f"{root / 'a' / 't.jsonl'} then {root / 'b' / 't.jsonl'}); give "
                        "another directory to keep both, or --force to replace it\n")
    assert source(out) == str(root / "a" / "t.jsonl")  # (left as it was)


def test_a_marker_of_the_path_as_typed_is_read_from_the_current_directory(two_dirs, monkeypatch):
    """A marker written before the path was resolved: the same run where its path reaches the
    same file from here, refused (as any other options) where it reaches another or none."""
    root, out = two_dirs
    assert invoke("simulate", "t.jsonl", out).exit_code == 0
    marker = json.loads((out / MARKER).read_text())
    old = json.dumps({**marker, "source": "t.jsonl"}, sort_keys=True) + "\n"  # (as it was written)
    (out / MARKER).write_text(old)
    same = invoke("simulate", str(root / "a" / "t.jsonl"), out)
    assert same.exit_code == 0, same.output
    assert source(out) == str(root / "a" / "t.jsonl")  # (rewritten resolved)
    # its t.jsonl is another file (named resolved); there is none (named as typed)
    for where, previous in ((root / "b", root / "b" / "t.jsonl"), (root, "t.jsonl")):
        (out / MARKER).write_text(old)
        monkeypatch.chdir(where)
        r = invoke("simulate", str(root / "a" / "t.jsonl"), out)
        refused = (f"error: {out} holds a `sortedrl simulate` run with other options (--trace: {previous} "
                   f"then {root / 'a' / 't.jsonl'}); give another directory to keep both, or --force "
                   "to replace it\n")
        assert (r.exit_code, r.stderr) == (2, refused), r.output


def test_a_cluster_file_is_recorded_resolved_too(two_dirs):
    root, out = two_dirs
    (root / "a" / "c.json").write_text(json.dumps({"preset": CLUSTER}))
    args = [*COMMANDS["simulate"], "--trace", "t.jsonl", "--out", str(out)]
    assert runner.invoke(app, [*args, "--cluster", "c.json"]).exit_code == 0
    assert json.loads((out / MARKER).read_text())["cluster"] == str(root / "a" / "c.json")
    r = runner.invoke(app, [*args, "--cluster", str(root / "a" / "c.json")])
    assert r.exit_code == 0, r.output


def test_a_bundled_trace_and_a_preset_are_recorded_as_before(tmp_path):
    r = runner.invoke(app, [*COMMANDS["simulate"], "--trace", "math-16k", "--cluster", CLUSTER,
                            "--out", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert source(tmp_path / "m") == str(BUNDLED / "math-16k.jsonl")
    r = runner.invoke(app, [*COMMANDS["simulate"], "--synthetic", "logic-8k", "--prompts", "8",
                            "--group-size", "2", "--steps", "1", "--cluster", CLUSTER,
                            "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert source(tmp_path / "s") == "logic-8k"
