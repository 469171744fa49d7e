"""The fast trace readers (pyarrow) agree with the standard-library ones on every file: the same
trace, or a hand-back (None, or an error the slow path then names by line), never another value."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from sortedrl.errors import TraceError
from sortedrl.traces import Trace, _fast, _text, read_trace, write_trace
from sortedrl.traces.synth import synthesize
from tests.test_traces_io import _small, traces

META = '{"sortedrl_trace": 1, "max_response_len": 100, "group_size": 2, "source": "t"}'
ROWS = ['{"prompt_id": "a", "sample": 0, "prompt_len": 3, "response_len": 5, "truncated": false}',
        '{"prompt_id": "a", "sample": 1, "prompt_len": 3, "response_len": 7, "truncated": true}']
HEADER = "prompt_id,sample,prompt_len,response_len,truncated"


def _slow(path: Path) -> Trace | str:
    """The reference reader's trace, or its error message."""
    reader = _text.read_jsonl if path.suffix == ".jsonl" else _text.read_csv
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            return reader(path, f)
    except TraceError as e:
        return str(e)


def _fast_read(path: Path) -> Trace | str | None:
    reader = _fast.read_jsonl_fast if path.suffix == ".jsonl" else _fast.read_csv_fast
    try:
        return reader(path, path.read_bytes())
    except TraceError as e:
        return str(e)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(trace=traces(), fmt=st.sampled_from(["jsonl", "csv"]))
def test_fast_path_gives_the_reference_trace(tmp_path: Path, trace: Trace, fmt: str) -> None:
    path = tmp_path / f"t.{fmt}"
    write_trace(trace, path)
    fast = _fast_read(path)
    # which path read it (pytest --hypothesis-show-statistics): a hand-back passes here, so the
    # fast path's own reading is asserted on fixed files below, where it must not hand back
    event(f"{fmt}: {'handed back' if fast is None else 'read by the fast path'}")
    assert fast is None or fast == trace
    assert read_trace(path) == trace


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_fast_path_reads_every_optional_column(tmp_path: Path, fmt: str) -> None:
    trace = _small(step=[0, 0, 1, 1], reward=[1.0, 0.0, -2.5, 1e300],
                   finish_reason=["stop", "length", "stop", "stop"])
    path = tmp_path / f"t.{fmt}"
    write_trace(trace, path)
    fast = _fast_read(path)
    assert isinstance(fast, Trace) and fast == trace  # not handed back: the fast path read it
    assert fast.reward.tobytes() == trace.reward.tobytes()


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_fast_path_takes_the_usual_file(tmp_path: Path, fmt: str) -> None:
    trace = synthesize("math-16k", prompts=50, group_size=4, steps=2)
    path = tmp_path / f"t.{fmt}"
    write_trace(trace, path)
    if fmt == "parquet":
        assert read_trace(path) == trace
        return
    fast = _fast_read(path)
    assert isinstance(fast, Trace) and fast == trace  # not handed back: the fast path read it


ODD_JSONL = {
    "blank line": [META, ROWS[0], "", ROWS[1]],
    "two objects on a line": [META, ROWS[0] + ROWS[1]],
    "float length": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": 7.0')],
    "bool as int": [META, ROWS[0], ROWS[1].replace("true}", "1}")],
    "string length": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": "7"')],
    "negative": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": -7')],
    "null": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": null')],
    "missing field": [META, ROWS[0], ROWS[1].replace(', "truncated": true', "")],
    "extra field": [META, ROWS[0], ROWS[1].replace("true}", 'true, "x": 1}')],
    "duplicate key": [META, ROWS[0], ROWS[1].replace("true}", 'true, "sample": 1}')],
    "meta twice": [META, META, ROWS[0], ROWS[1]],
    "lone surrogate": [META, ROWS[0].replace('"a"', '"\\ud800"'), ROWS[1].replace('"a"', '"\\ud800"')],
    "NUL": [META, ROWS[0].replace('"a"', '"a\\u0000"'), ROWS[1].replace('"a"', '"a\\u0000"')],
    "above cap": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": 700')],
    "huge int": [META, ROWS[0], ROWS[1].replace('"response_len": 7', '"response_len": 99999999999999999999')],
    "no meta": [ROWS[0], ROWS[1]],
    "negative zero reward": [META, ROWS[0].replace("false}", 'false, "reward": -0}'),
                             ROWS[1].replace("true}", 'true, "reward": 1}')],
}
ODD_CSV = {
    "blank line": ["# sortedrl_trace " + META, HEADER, "a,0,3,5,false", "", "a,1,3,7,true"],
    "quoted field": ["# sortedrl_trace " + META, HEADER, '"a",0,3,5,false', "a,1,3,7,true"],
    "CRLF": ["# sortedrl_trace " + META + "\r", HEADER + "\r", "a,0,3,5,false\r", "a,1,3,7,true\r"],
    "short row": ["# sortedrl_trace " + META, HEADER, "a,0,3,5", "a,1,3,7,true"],
    "empty field": ["# sortedrl_trace " + META, HEADER, "a,0,3,,false", "a,1,3,7,true"],
    "NA length": ["# sortedrl_trace " + META, HEADER, "a,0,3,NA,false", "a,1,3,7,true"],
    "odd boolean": ["# sortedrl_trace " + META, HEADER, "a,0,3,5,tRuE", "a,1,3,7,yes"],
    "underscore int": ["# sortedrl_trace " + META, HEADER, "a,0,3,1_0,false", "a,1,3,7,true"],
    "plus int": ["# sortedrl_trace " + META, HEADER, "a,0,3,+5,false", "a,1,3,7,true"],
    "numeric ids": ["# sortedrl_trace " + META, HEADER, "007,0,3,5,false", "007,1,3,7,true"],
    "unknown column": ["# sortedrl_trace " + META, HEADER + ",x", "a,0,3,5,false,1", "a,1,3,7,true,1"],
    "no meta": [HEADER, "a,0,3,5,false", "a,1,3,7,true"],
    "bad meta": ["# sortedrl_trace {\"sortedrl_trace\": 2}", HEADER, "a,0,3,5,false"],
}


@pytest.mark.parametrize("case", list(ODD_JSONL) + [f"csv:{c}" for c in ODD_CSV])
def test_odd_files_read_the_same_both_ways(tmp_path: Path, case: str) -> None:
    if case.startswith("csv:"):
        path, lines = tmp_path / "t.csv", ODD_CSV[case[4:]]
    else:
        path, lines = tmp_path / "t.jsonl", ODD_JSONL[case]
    path.write_text("\n".join(lines) + ("" if "no meta" in case else "\n"), newline="")
    slow = _slow(path)
    fast = _fast_read(path)
    # the fast path gives the reference trace, or hands the file back (None or an error)
    assert fast is None or isinstance(fast, str) or (isinstance(slow, Trace) and fast == slow)
    try:
        got: Trace | str = read_trace(path)
    except TraceError as e:
        got = str(e)
    assert got == slow
