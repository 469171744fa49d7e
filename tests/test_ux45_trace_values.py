"""A finish reason outside vLLM's three is refused; a truncated row below the cap is not.

A report (ux45): a trace row whose ``finish_reason`` was ``stopp`` (a typo) was read without a
word, and ``trace stats`` then took the row for a finished one. Now every reader (JSONL, CSV,
Parquet; the pyarrow fast paths and the standard-library ones) refuses any value but ``stop``,
``length`` and ``abort`` with one line naming the file, the line (Parquet: the row) and the
value. A ``truncated`` row below ``max_response_len`` is still accepted: an engine stops a
response below the cap at the model's context length, and slime's agent path marks such rows
(docs/traces.md), so the project's own importer writes them.

Run: pytest tests/test_ux45_trace_values.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.realrun.run_trace import ABORT
from sortedrl.traces import (
    Trace,
    TraceMeta,
    _fast,
    import_table,
    read_trace,
    synthesize,
    write_trace,
)
from sortedrl.traces.fit import fit_trace
from sortedrl.traces.model import generate
from sortedrl.traces.schema import FINISH_REASONS
from sortedrl.traces.synth import preset_names

FIX = Path(__file__).resolve().parent / "fixtures"
DATA = Path(__file__).resolve().parents[1] / "sortedrl" / "traces" / "data"
META = {"sortedrl_trace": 1, "max_response_len": 100, "group_size": 2, "source": "t"}
KNOWN = "(known: stop, length, abort)"


def _rows(reasons: list[str]) -> list[dict]:
    """One row per reason, groups of two; a ``length`` row at the cap, truncated."""
    return [{"prompt_id": f"p{i // 2}", "sample": i % 2, "prompt_len": 5,
             "response_len": 100 if r == "length" else 10 + i, "truncated": r == "length",
             "finish_reason": r} for i, r in enumerate(reasons)]


def _jsonl(path: Path, rows: list[dict], blank_after: int | None = None) -> Path:
    lines = [json.dumps(META)] + [json.dumps(r) for r in rows]
    if blank_after is not None:  # a blank line: the fast path hands the file back
        lines.insert(blank_after + 1, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def _csv(path: Path, rows: list[dict], quoted: bool = False) -> Path:
    head = "prompt_id,sample,prompt_len,response_len,truncated,finish_reason"
    q = '"' if quoted else ""  # a quoted field: the fast path hands the file back
    body = [f"{q}{r['prompt_id']}{q},{r['sample']},{r['prompt_len']},{r['response_len']},"
            f"{str(r['truncated']).lower()},{r['finish_reason']}" for r in rows]
    path.write_text("\n".join([f"# sortedrl_trace {json.dumps(META)}", head, *body]) + "\n")
    return path


def _parquet(path: Path, rows: list[dict], sample_type=pa.int64()) -> Path:
    """``sample_type`` other than int64: not what the writer writes, read by the slow path."""
    types = {"prompt_id": pa.string(), "sample": sample_type, "prompt_len": pa.int64(),
             "response_len": pa.int64(), "truncated": pa.bool_(), "finish_reason": pa.string()}
    table = pa.table({k: pa.array([r[k] for r in rows], type=t) for k, t in types.items()})
    pq.write_table(table.replace_schema_metadata({"sortedrl_trace": json.dumps(META)}), path)
    return path


REASONS = ["stop", "length", "abort", "stopp", "stop", "Stop"]  # row 4 is the first bad one

WRITERS = {
    # name: (write the file, the place the error names: data row 4 is JSONL line 5, CSV line 6)
    "jsonl": (lambda p: _jsonl(p / "t.jsonl", _rows(REASONS)), "line 5"),
    "jsonl-slow": (lambda p: _jsonl(p / "t.jsonl", _rows(REASONS), blank_after=1), "line 6"),
    "csv": (lambda p: _csv(p / "t.csv", _rows(REASONS)), "line 6"),
    "csv-slow": (lambda p: _csv(p / "t.csv", _rows(REASONS), quoted=True), "line 6"),
    "parquet": (lambda p: _parquet(p / "t.parquet", _rows(REASONS)), "row 4"),
    "parquet-slow": (lambda p: _parquet(p / "t.parquet", _rows(REASONS), pa.int32()), "row 4"),
}


@pytest.mark.parametrize("fmt", list(WRITERS))
def test_an_unknown_finish_reason_is_refused_in_every_format(tmp_path: Path, fmt: str) -> None:
    write, where = WRITERS[fmt]
    path = write(tmp_path)
    with pytest.raises(TraceError) as e:
        read_trace(path)
    assert str(e.value) == f"{path}: {where}: field 'finish_reason': unknown value 'stopp' {KNOWN}"


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "jsonl-slow", "csv-slow"])
def test_the_fast_path_refuses_it_too_or_hands_the_file_back(tmp_path: Path, fmt: str) -> None:
    """The pyarrow readers check the same columns in bulk (the same message, which the
    standard-library reader then gives by file line); a file they do not take they hand back."""
    write, where = WRITERS[fmt]
    path = write(tmp_path)
    read = _fast.read_jsonl_fast if path.suffix == ".jsonl" else _fast.read_csv_fast
    if fmt.endswith("-slow"):
        assert read(path, path.read_bytes()) is None
        return
    with pytest.raises(TraceError) as e:
        read(path, path.read_bytes())
    assert str(e.value) == f"{path}: {where}: field 'finish_reason': unknown value 'stopp' {KNOWN}"


@pytest.mark.parametrize("fmt", ["parquet", "parquet-slow"])
def test_both_parquet_cases_take_the_path_they_are_meant_to(tmp_path: Path, fmt: str) -> None:
    """``parquet``: every column of its type, converted in bulk (``arrow_columns``) and checked
    in bulk; ``parquet-slow``: an int32 ``sample``, converted value by value."""
    write, _ = WRITERS[fmt]
    table = pq.read_table(write(tmp_path))
    assert (_fast.arrow_columns(table) is None) == fmt.endswith("-slow")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_the_cli_says_it_in_one_error_line_exit_2(tmp_path: Path, fmt: str) -> None:
    write, where = WRITERS[fmt]
    path = write(tmp_path)
    r = CliRunner().invoke(app, ["trace", "stats", str(path)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.splitlines() == [
        f"error: {path}: {where}: field 'finish_reason': unknown value 'stopp' {KNOWN}"]


def test_every_value_is_checked_not_only_the_first_of_its_kind() -> None:
    """The check narrows the rows left reason by reason: the first bad row in file order is
    named, whichever reasons come before it."""
    n = 100_000
    reasons = np.array(["stop", "length", "abort", "stop"] * (n // 4))
    reasons[77_777], reasons[88_888] = "lenght", "aborted"
    cols = {"prompt_id": [f"p{i // 2}" for i in range(n)], "sample": np.arange(n) % 2,
            "prompt_len": np.full(n, 5), "response_len": np.full(n, 10),
            "truncated": np.zeros(n, dtype=bool), "finish_reason": reasons}
    with pytest.raises(TraceError) as e:
        Trace.from_columns(cols, TraceMeta(100, 2, "t"))
    assert str(e.value) == f"trace: row 77778: field 'finish_reason': unknown value 'lenght' {KNOWN}"


def test_the_accepted_values_are_vllms_three() -> None:
    assert FINISH_REASONS == ("stop", "length", "abort")
    assert ABORT in FINISH_REASONS  # what a real run writes for a row that never finished


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_each_accepted_value_reads_back(tmp_path: Path, ext: str) -> None:
    rows = _rows(["stop", "length", "abort", "stop"])
    rows[2].update(response_len=100, truncated=False)  # an abort row as a real run writes it
    trace = Trace.from_columns({k: [r[k] for r in rows] for k in rows[0]},
                               TraceMeta(100, 2, "t"))
    write_trace(trace, tmp_path / f"t.{ext}")
    back = read_trace(tmp_path / f"t.{ext}")
    assert back == trace
    assert back.finish_reason.tolist() == ["stop", "length", "abort", "stop"]


def test_the_bundled_traces_and_the_real_run_fixture_read() -> None:
    for path, reasons in [(DATA / "math-16k.jsonl", ["length", "stop"]),
                          (DATA / "logic-8k.jsonl", ["length", "stop"]),
                          (FIX / "run-sync" / "trace.jsonl", ["length", "stop"])]:
        assert sorted(set(read_trace(path).finish_reason.tolist())) == reasons, path


@pytest.mark.parametrize("preset", [*preset_names(), "model"])
def test_the_traces_the_project_writes_read_back(tmp_path: Path, preset: str) -> None:
    """synth (every preset, agentic ones with turns) and a trace model's draw, in each format."""
    if preset == "model":
        trace = generate(fit_trace(synthesize("math-16k", prompts=16, group_size=4, steps=2)),
                         steps=1)
    else:
        trace = synthesize(preset, prompts=4, group_size=2, steps=2, seed=0)
    assert set(trace.finish_reason.tolist()) <= {"stop", "length"}
    for ext in ("jsonl", "csv", "parquet"):
        write_trace(trace, tmp_path / f"t.{ext}")
        assert read_trace(tmp_path / f"t.{ext}") == trace, ext


def test_an_imported_table_reads_back(tmp_path: Path) -> None:
    (tmp_path / "req.csv").write_text("in,out\n" + "".join(f"{5 + i},{50 * (i + 1)}\n"
                                                           for i in range(4)))
    trace = import_table(tmp_path / "req.csv", "in", "out", group_size=2, max_response_len=150)
    assert trace.finish_reason.tolist() == ["stop", "stop", "length", "length"]
    write_trace(trace, tmp_path / "t.jsonl")
    assert read_trace(tmp_path / "t.jsonl") == trace


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_a_truncated_row_below_the_cap_is_accepted(tmp_path: Path, ext: str) -> None:
    """An engine's length limit below the cap (vLLM's context length, slime's agent path):
    not a contradiction, so not refused (docs/traces.md)."""
    rows = _rows(["stop", "length", "stop", "stop"])
    rows[1]["response_len"] = 60  # truncated at 60, below the cap of 100
    write = {"jsonl": _jsonl, "csv": _csv, "parquet": _parquet}[ext]
    trace = read_trace(write(tmp_path / f"t.{ext}", rows))
    assert trace.truncated.tolist() == [False, True, False, False]
    assert trace.response_len.tolist() == [10, 60, 12, 13]
    assert trace.meta.max_response_len == 100
