"""Error lines that named the wrong thing: a directory given as a trace file's --out said
"unknown trace format ''", a file given as a model's --out said only "Not a directory", and a
table import's --group-size 0 named the library's argument (group_size), not the option."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args, line", [
    (["trace", "synth", "math-16k", "--out", "{d}"],
     "--out {d}: is a directory; give a trace file's name (.jsonl, .csv, .parquet)"),
    (["trace", "import", "t.csv", "--prompt-len-col", "p", "--response-len-col", "r", "--group-size", "0",
      "--out", "{d}/o.jsonl"], "--group-size must be >= 1, got 0"),
    (["trace", "import", "t.csv", "--prompt-len-col", "p", "--response-len-col", "r", "--max-response-len",
      "-5", "--out", "{d}/o.jsonl"], "--max-response-len must be >= 1, got -5"),
    (["model", "init", "--out", "{d}/afile", "--warmup-steps", "0"],
     "--out {d}/afile: exists and is not a directory (a model is a directory of files)"),
])
def test_the_error_names_the_option_and_what_is_wrong(tmp_path, args, line):
    (tmp_path / "afile").write_text("mine")
    r = runner.invoke(app, [a.format(d=tmp_path) for a in args])
    assert (r.exit_code, r.stderr) == (2, f"error: {line.format(d=tmp_path)}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]
    assert (tmp_path / "afile").read_text() == "mine"


def test_another_of_our_files_given_to_cluster_is_named_for_what_it_is(tmp_path):
    """A trace model given to --cluster said "unknown field 'sortedrl_trace_model' (known: ...36
    names)", a JSONL trace named .json "not valid JSON (Extra data ...)"."""
    from sortedrl.traces.io import BUNDLED

    model = tmp_path / "m.json"
    assert runner.invoke(app, ["trace", "fit", "math-16k", "--out", str(model)]).exit_code == 0
    trace = tmp_path / "t.json"
    trace.write_bytes((BUNDLED / "math-16k.jsonl").read_bytes())
    for given, line in (
            (model, f"{model}: is a trace model (`sortedrl trace fit`), not a cluster file or profile; "
                    "give it to --trace-model"),
            (trace, f"{trace}: is a trace (JSON lines), not a cluster file or profile; give it to --trace")):
        r = runner.invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--cluster", str(given),
                                "--out", str(tmp_path / "run")])
        assert (r.exit_code, r.stderr) == (2, f"error: {line}\n")
        assert not (tmp_path / "run").exists()
