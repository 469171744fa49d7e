"""``trace import`` finds a CSV column named as its header spells it (spaces around it
included), and its error quotes the names it has; a directory named like a bundled trace does
not hide it (README: only a *file* of that name is read instead).

Run: pytest tests/test_user_text_inputs.py
"""

from __future__ import annotations

import json
from pathlib import Path

from sortedrl.cli import app
from sortedrl.traces.io import BUNDLED, resolve_bundled
from tests.cli_helpers import four_sample_trace as _trace
from tests.cli_helpers import invoke_ok as _ok
from tests.cli_helpers import runner

# -- a CSV header name with spaces around it ---------------------------------------------------


def test_a_column_named_as_the_csv_header_spells_it_is_found(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("arrived at, prompt tokens, gen tokens\n0,5,10\n1,6,12\n")
    out = tmp_path / "t.jsonl"
    stdout = _ok(["trace", "import", str(table), "--prompt-len-col", " prompt tokens",
                  "--response-len-col", "gen tokens", "--group-size", "2", "--out", str(out)])
    assert stdout == f"wrote {out}: 2 rows read, 1 prompt x 2, 0 rows dropped, 0 clipped\n"
    rows = [json.loads(line) for line in out.read_text().splitlines()[1:]]
    assert [(r["prompt_len"], r["response_len"]) for r in rows] == [(5, 10), (6, 12)]
    r = runner.invoke(app, ["trace", "import", str(table), "--prompt-len-col", "prompt_tokens",
                            "--response-len-col", "gen tokens", "--group-size", "2", "--out",
                            str(tmp_path / "u.jsonl")])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", (
        f"error: {table}: no column 'prompt_tokens'; available columns: 'arrived at', "
        "'prompt tokens', 'gen tokens'\n"))


# -- a directory does not hide the bundled trace of its name ----------------------------------


def test_a_directory_named_like_a_bundled_trace_does_not_hide_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "math-16k").mkdir()
    (tmp_path / "logic-8k.jsonl").mkdir()
    assert resolve_bundled(Path("math-16k")) == BUNDLED / "math-16k.jsonl"
    assert resolve_bundled(Path("logic-8k.jsonl")) == BUNDLED / "logic-8k.jsonl"
    want = _ok(["trace", "stats", str(BUNDLED / "math-16k.jsonl"), "--json"])
    assert _ok(["trace", "stats", "math-16k", "--json"]) == want
    _trace(tmp_path / "logic-8k", "mine")  # a file of that name is read instead, with a note
    r = runner.invoke(app, ["trace", "stats", "logic-8k", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["source"] == "mine"
    assert r.stderr.splitlines() == ["note: logic-8k: reading the file in this directory, not the "
                                     "bundled trace of that name (rename the file to reach the bundled one)"]
    r = runner.invoke(app, ["simulate", "--trace", "logic-8k", "--policy", "sync", "--out", "s"])
    assert r.exit_code == 0 and r.stderr.startswith("note: logic-8k: reading the file in this directory")
    mine = tmp_path / "math-16k"  # (a path, not a bare name: the directory itself)
    r = runner.invoke(app, ["trace", "stats", str(mine)])
    assert (r.exit_code, r.stderr) == (2, f"error: {mine}: is a directory, not a trace file\n")
