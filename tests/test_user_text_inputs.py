"""``trace import`` finds a CSV column named as its header spells it (spaces around it
included), and its error quotes the names it has; a directory named like a bundled trace does
not hide it (README: only a *file* of that name is read instead).

Run: pytest tests/test_user_text_inputs.py
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import BUNDLED, resolve_bundled

runner = CliRunner()


def _trace(path: Path, source: str) -> Path:
    """Four samples, two prompts of two, two at the 16,384 cap."""
    rows = [{"sortedrl_trace": 1, "max_response_len": 16384, "group_size": 2, "source": source}]
    for i, (p, r) in enumerate([(10, 16384), (12, 1200), (20, 345), (30, 16384)]):
        rows.append({"prompt_id": f"p{i // 2}", "sample": i % 2, "prompt_len": p,
                     "response_len": r, "truncated": r == 16384})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ok(args: list[str], **kw) -> str:
    r = runner.invoke(app, args, **kw)
    assert r.exit_code == 0 and r.exception is None, r.output[-2000:]
    return r.stdout


# -- a CSV header name with spaces around it ---------------------------------------------------


def test_a_column_named_as_the_csv_header_spells_it_is_found(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("arrived at, prompt tokens, gen tokens\n0,5,10\n1,6,12\n")
    out = tmp_path / "t.jsonl"
    stdout = _ok(["trace", "import", str(table), "--prompt-len-col", " prompt tokens",
                  "--response-len-col", "gen tokens", "--group-size", "2", "--out", str(out)])
    assert stdout == f"wrote {out}: 2 rows read, 1 prompts x 2, 0 rows dropped, 0 clipped\n"
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
    _trace(tmp_path / "logic-8k", "mine")  # a file of that name is read instead
    assert json.loads(_ok(["trace", "stats", "logic-8k", "--json"]))["source"] == "mine"
    mine = tmp_path / "math-16k"  # (a path, not a bare name: the directory itself)
    r = runner.invoke(app, ["trace", "stats", str(mine)])
    assert (r.exit_code, r.stderr) == (2, f"error: {mine}: is a directory, not a trace file\n")
