"""A file of sortedrl's own given where another kind goes (an audit of commands chained
together).

- A trace model was told from a trace by ``"sortedrl_trace_model"`` in its first 200 bytes, so
  ``jq -S`` (the key then comes late) made it a JSONL trace whose first line, ``{``, was "bad
  JSON". Now the key is looked up in the parsed object when the file is one JSON document.
- A profile, cluster file, trace model, ``tune.json``, ``compare.json``, ``validate.json``,
  ``summary.json`` or timeline given where a trace goes was a malformed trace ("line 1: bad
  JSON" of valid JSON, "unknown column '['", "not UTF-8 text"): it is said to be what it is,
  and where it goes.
- `simulate --trace-model PROFILE.json --steps 2` said "--steps: not with a trace file
  (PROFILE.json has its own steps)": the file's kind is said before the shape options now, as
  without them (and before an --out of another run is compared), by simulate, compare and tune.

Run: pytest tests/test_file_kinds.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import PRESET_GRAMMAR, fittable_trace, four_sample_trace, invoke_ok, runner

from sortedrl.cli import app
from sortedrl.traces.model import is_trace_model

CLUSTER = ["--cluster", "h100-llama3.1-8b-2gpu"]
ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures"
RUN_TRACE = "(a `sortedrl run` directory's trace is its trace.jsonl)"


@pytest.fixture
def model(tmp_path):
    invoke_ok(["trace", "fit", str(fittable_trace(tmp_path / "t.jsonl")), "--out", str(tmp_path / "m.json")])
    return tmp_path / "m.json"


def test_a_model_with_sorted_keys_is_a_model(tmp_path, model):
    body = json.loads(model.read_text())
    assert list(body)[0] == "sortedrl_trace_model" and list(sorted(body))[-1] != "sortedrl_trace_model"
    run = ["simulate", "--policy", "sync", *CLUSTER, "--steps", "2", "--json", "--trace-model"]
    want = invoke_ok([*run, str(model), "--out", str(tmp_path / "a")])
    for name, text in (("indented.json", json.dumps(body, sort_keys=True, indent=2)),
                       ("compact.json", json.dumps(body, sort_keys=True)),
                       ("jq.json", subprocess.run(["jq", "-S", ".", str(model)], capture_output=True,
                                                  text=True, check=True).stdout)):
        (tmp_path / name).write_text(text)
        assert text.index('"sortedrl_trace_model"') > 200
        assert is_trace_model(tmp_path / name)
        got = invoke_ok([*run, str(tmp_path / name), "--out", str(tmp_path / name.split(".")[0])])
        assert got == want


def test_a_trace_naming_the_key_is_still_a_trace(tmp_path):
    """A JSONL trace is never taken for a model, even with the key in its metadata's source."""
    trace = four_sample_trace(tmp_path / "t.jsonl", "x" * 300 + ' "sortedrl_trace_model"')
    assert not is_trace_model(trace)
    assert json.loads(invoke_ok(["trace", "stats", str(trace), "--json"]))["count"] == 4


def test_sortedrls_own_files_where_a_trace_goes_are_named(tmp_path, model):
    small = ["--synthetic", "math-16k", "--prompts", "4", "--group-size", "2", "--steps", "2", *CLUSTER]
    invoke_ok(["compare", *small, "--policy", "on=sortedrl", "--policy", "sync", "--out", str(tmp_path / "C")])
    invoke_ok(["tune", *small, "--policy", "sync", "--budget", "1", "--out", str(tmp_path / "T")])
    shutil.copytree(FIX / "run-sync", tmp_path / "real")
    invoke_ok(["validate", str(tmp_path / "real"), "--profile", str(FIX / "cpu-profile.json")])
    (tmp_path / "cl.json").write_text('{"preset": "h100-llama3.1-8b-2gpu"}')
    tune = "a `sortedrl tune` result (tune.json), not a trace; give it to `sortedrl export`, or its directory to `sortedrl report`"
    summary = f"a run's summary (summary.json), not a trace; give its directory to `sortedrl plot` {RUN_TRACE}"
    timeline = f"a run's timeline, not a trace; give its directory to `sortedrl plot` {RUN_TRACE}"
    cases = {
        FIX / "cpu-profile.json": "a calibrated profile (`sortedrl calibrate`), not a trace; give it to --cluster",
        tmp_path / "cl.json": "a cluster file, not a trace; give it to --cluster",
        model: "a trace model (`sortedrl trace fit`), not a trace; give it to --trace-model",
        tmp_path / "T" / "tune.json": tune,
        tmp_path / "C" / "compare.json": "a `sortedrl compare` result (compare.json), not a trace; give its "
                                         "directory to `sortedrl report`",
        tmp_path / "real" / "validate.json": "a `sortedrl validate` result (validate.json), not a trace",
        tmp_path / "C" / "on" / "summary.json": summary,
        tmp_path / "real" / "summary.json": summary,
        tmp_path / "C" / "on" / "timeline.npz": timeline,
        tmp_path / "real" / "timeline.jsonl": timeline,
    }
    for path, what in cases.items():
        for command in (["trace", "stats", str(path)], ["trace", "fit", str(path), "--out", str(tmp_path / "f.json")]):
            r = runner.invoke(app, command)
            assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {path}: is {what}\n"), command
    assert not (tmp_path / "f.json").exists()
    for run in (tmp_path / "C" / "on", tmp_path / "real"):  # (the timeline itself is "not a run directory")
        invoke_ok(["plot", str(run)])
        assert (run / "timeline.html").is_file()


def test_simulate_names_a_profile_given_to_trace(tmp_path):
    """In a real process, as typed (the profile read as a trace was "line 1: bad JSON")."""
    r = subprocess.run([sys.executable, "-m", "sortedrl.cli", "simulate", "--trace", str(FIX / "cpu-profile.json"),
                        "--policy", "sync", *CLUSTER, "--out", "s"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert (r.returncode, r.stdout, r.stderr) == (2, "", f"error: {FIX / 'cpu-profile.json'}: is a calibrated profile "
                                                  "(`sortedrl calibrate`), not a trace; give it to --cluster\n")
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("shape", [["--steps", "2"], ["--prompts", "4", "--group-size", "2"]])
@pytest.mark.parametrize("command", [["simulate", "--policy", "sync"], ["compare", "--policy", "sync"],
                                     ["tune", "--policy", "sync", "--budget", "1"]])
def test_a_profile_given_with_shape_options_is_named_before_them(tmp_path, command, shape):
    profile = FIX / "cpu-profile.json"
    invoke_ok(["simulate", "--synthetic", "math-16k", *shape, "--policy", "sync", *CLUSTER, "--out", str(tmp_path / "o")])
    for out in ([], ["--out", str(tmp_path / "o")]):  # (an --out holding another run: the profile first too)
        r = runner.invoke(app, [*command, "--trace-model", str(profile), *shape, *CLUSTER, *out])
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {profile}: is a calibrated profile "
                                                     "(`sortedrl calibrate`), not a trace; give it to --cluster\n")


def test_a_cluster_that_is_an_existing_file_or_directory_is_no_unknown_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fittable_trace(tmp_path / "t.jsonl")
    (tmp_path / "d").mkdir()
    run = ["simulate", "--trace", "t.jsonl", "--policy", "sync", "--out", "s", "--cluster"]
    for cluster, error in (("d", "d: is a directory, not a cluster file or preset"),
                           ("t.jsonl", 't.jsonl: not a cluster file (a cluster file or a profile is a .json '
                                       'file: {"preset": NAME, ...}) nor a preset\'s name')):
        r = runner.invoke(app, [*run, cluster])
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {error}\n")
    assert runner.invoke(app, [*run, "nope"]).stderr == f"error: unknown cluster preset 'nope' (unknown GPU 'nope'): {PRESET_GRAMMAR}\n"
    assert not (tmp_path / "s").exists()


ROW = '"prompt_id": "p", "sample": 0, "prompt_len": 3, "response_len": 4'
KNOWN = "(known: prompt_id, sample, prompt_len, response_len, truncated, step, reward, finish_reason, turns)"


@pytest.mark.parametrize(("extra", "error"), [
    ("", "missing required column 'truncated'"),
    (', "preset": "x"', f"line 1: unknown column 'preset' {KNOWN}"),
    (', "gpus": 1, "tp": 1', f"line 1: unknown column 'gpus' {KNOWN}"),
    (', "makespan_s": 1.0, "samples_total": 1', f"line 1: unknown column 'makespan_s' {KNOWN}"),
    (', "kind": "meta"', f"line 1: unknown column 'kind' {KNOWN}"),
])
def test_a_one_line_trace_is_a_trace_whatever_else_it_holds(tmp_path, extra, error):
    """A one-line JSONL trace is one JSON document: holding ``preset`` it was "a cluster file,
    not a trace", hiding what is wrong with it. An object holding a trace's columns is a row."""
    path = tmp_path / "one.jsonl"
    for lines in (1, 2):  # (two: JSONL, its first line read as a timeline's meta record)
        path.write_text(("{" + ROW + extra + "}\n") * lines)
        r = runner.invoke(app, ["trace", "stats", str(path)])
        assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {path}: {error}\n")
