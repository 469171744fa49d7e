"""``profile show`` given a length trace or a JSON lines file instead of a profile: it said "not
valid JSON (Extra data: line 2 ...)"; it now says what the file is."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
PRESET = "h100-llama3.1-8b"


# -- 8. profile show of a trace ---------------------------------------------------------------------


HEADER = {"sortedrl_trace": 1, "max_response_len": 100, "group_size": 1, "source": "t"}
SAMPLE = {"prompt_id": "p0", "sample": 0, "prompt_len": 10, "response_len": 20, "truncated": False}


@pytest.mark.parametrize("name, text, kind", [
    ("t.jsonl", f"{json.dumps(HEADER)}\n{json.dumps(SAMPLE)}\n",
     "a length trace (JSON lines: its header line, then one sample a line)"),
    ("t.csv", f"# sortedrl_trace {json.dumps(HEADER)}\nprompt_id,sample,prompt_len,response_len\np0,0,10,20\n",
     "a length trace (CSV)"),
    ("m.jsonl", '{"step": 1, "a": 2}\n{"step": 2, "a": 3}\n', "JSON lines (one JSON object a line)"),
])
def test_profile_show_of_a_trace_or_json_lines_says_what_the_file_is(tmp_path, name, text, kind):
    path = tmp_path / name
    path.write_text(text)
    r = runner.invoke(app, ["profile", "show", str(path)])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == f"error: {path}: {kind}, not a profile (one JSON object; make one with `sortedrl calibrate`)\n"


def test_profile_show_of_other_broken_json_still_says_where(tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"sortedrl_profile": 1,\n')
    r = runner.invoke(app, ["profile", "show", str(path)])
    assert (r.exit_code, r.stderr) == (2, f"error: {path}: not valid JSON (Expecting property name enclosed in "
                                          "double quotes: line 2 column 1 (char 24))\n")
