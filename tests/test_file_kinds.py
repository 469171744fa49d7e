"""A file of sortedrl's own given where another kind goes (an audit of commands chained
together): a trace model re-saved with its keys sorted is still a trace model.

A trace model was told from a trace by ``"sortedrl_trace_model"`` in its first 200 bytes, so
``jq -S`` (the key then comes late) made it a JSONL trace whose first line, ``{``, was "bad
JSON". Now the key is looked up in the parsed object when the file is one JSON document.

Run: pytest tests/test_file_kinds.py
"""

from __future__ import annotations

import json
import subprocess

import pytest
from cli_helpers import fittable_trace, four_sample_trace, invoke_ok

from sortedrl.traces.model import is_trace_model

CLUSTER = ["--cluster", "h100-llama3.1-8b-2gpu"]


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
