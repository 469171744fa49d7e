"""What a user who installed the package meets outside a checkout: the version, ``python -m
sortedrl``, and the bundled traces reached by name from any directory."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import sortedrl
from sortedrl.traces.io import BUNDLED, bundled_names

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def sortedrl_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sortedrl", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True)


def test_version_is_the_packages_one_and_python_m_runs_the_cli(tmp_path):
    r = sortedrl_cmd("--version", cwd=tmp_path)
    assert (r.returncode, r.stdout, r.stderr) == (0, f"sortedrl {sortedrl.__version__}\n", "")
    # the metadata reads the same attribute (pyproject: dynamic version)
    assert importlib.metadata.version("sortedrl") == sortedrl.__version__


def test_bundled_traces_are_listed_in_the_help():
    assert bundled_names() == ["logic-8k", "math-16k"]
    assert all((BUNDLED / f"{n}.jsonl").is_file() for n in bundled_names())


def test_a_bundled_trace_by_name_from_another_directory_is_the_bundled_file(tmp_path):
    args = ("simulate", "--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu", "--json")
    by_name = sortedrl_cmd(*args, "--trace", "math-16k", "--out", "a", cwd=tmp_path)
    by_file = sortedrl_cmd(*args, "--trace", str(BUNDLED / "math-16k.jsonl"), "--out", "b", cwd=tmp_path)
    assert by_name.returncode == 0 and by_file.returncode == 0, by_name.stderr + by_file.stderr
    assert (tmp_path / "a/summary.json").read_bytes() == (tmp_path / "b/summary.json").read_bytes()
    assert json.loads(by_name.stdout)["makespan_s"] == json.loads(by_file.stdout)["makespan_s"]


def test_a_file_of_that_name_wins_and_an_unknown_name_is_no_such_file(tmp_path):
    (tmp_path / "math-16k").write_text("not a trace\n")
    r = sortedrl_cmd("simulate", "--policy", "sync", "--trace", "math-16k", cwd=tmp_path)
    note, error = r.stderr.splitlines()  # (a note that the file is read, then its one error)
    assert r.returncode == 2 and error.startswith("error: math-16k: "), r.stderr
    assert note == ("note: math-16k: reading the file in this directory, not the bundled trace of that "
                    "name (rename the file to reach the bundled one)")
    r = sortedrl_cmd("simulate", "--policy", "sync", "--trace", "math-1", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, "error: math-1: no such file\n")


def test_trace_stats_and_fit_reach_a_bundled_trace_by_name(tmp_path):
    by_name = sortedrl_cmd("trace", "stats", "logic-8k", "--json", cwd=tmp_path)
    by_file = sortedrl_cmd("trace", "stats", str(BUNDLED / "logic-8k.jsonl"), "--json", cwd=tmp_path)
    assert by_name.returncode == 0, by_name.stderr
    assert json.loads(by_name.stdout) == json.loads(by_file.stdout)
    r = sortedrl_cmd("trace", "fit", "math-16k", "--out", "m.json", cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "m.json").is_file(), r.stderr
    r = sortedrl_cmd("trace", "stats", "math-1", cwd=tmp_path)
    assert (r.returncode, r.stderr) == (2, "error: math-1: no such file\n")
