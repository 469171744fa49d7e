"""Trace files: exact round trips in every format, and one precise error per malformed input."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sortedrl.errors import TraceError
from sortedrl.traces import Trace, TraceMeta, _text, read_trace, write_trace
from sortedrl.traces.schema import FINISH_REASONS

FORMATS = ("jsonl", "csv", "parquet")
META = '{"sortedrl_trace": 1, "max_response_len": 100, "group_size": 2, "source": "t"}'
HEADER = "prompt_id,sample,prompt_len,response_len,truncated"

# -- hypothesis: random traces ---------------------------------------------------------------

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=8,
)


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    g = draw(st.integers(1, 4))
    with_step = draw(st.booleans())
    keys = draw(
        st.lists(
            st.tuples(st.integers(0, 3) if with_step else st.just(0), TEXT),
            min_size=1,
            max_size=6,
            unique=True,
        )
    )
    n = len(keys) * g
    cap = draw(st.integers(1, 2**31 - 1))  # (lengths are 32-bit in a run)
    ints = st.lists(st.integers(1, cap), min_size=n, max_size=n)
    cols: dict[str, object] = {
        "prompt_id": [k[1] for k in keys for _ in range(g)],
        "sample": [s for _ in keys for s in draw(st.permutations(range(g)))],
        "prompt_len": draw(st.lists(st.integers(1, 2**31 - 1), min_size=n, max_size=n)),
        "response_len": draw(ints),
        "truncated": draw(st.lists(st.booleans(), min_size=n, max_size=n)),
    }
    if with_step:
        cols["step"] = [k[0] for k in keys for _ in range(g)]
    if draw(st.booleans()):
        finite = st.floats(allow_nan=False, allow_infinity=False)
        cols["reward"] = draw(st.lists(finite, min_size=n, max_size=n))
    if draw(st.booleans()):
        # (any other value is refused; prompt_id carries the arbitrary text)
        reasons = st.sampled_from(FINISH_REASONS)
        cols["finish_reason"] = draw(st.lists(reasons, min_size=n, max_size=n))
        cols["truncated"] = [r == "length" for r in cols["finish_reason"]]  # (what truncated means)
    meta = TraceMeta(max_response_len=cap, group_size=g, source=draw(st.text(max_size=10)))
    return Trace.from_columns(cols, meta)


@pytest.mark.parametrize("fmt", FORMATS)
@settings(
    max_examples=int(os.environ.get("TRACE_EXAMPLES", "100")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(trace=traces())
def test_round_trip_is_exact(tmp_path: Path, fmt: str, trace: Trace) -> None:
    path = tmp_path / f"t.{fmt}"
    write_trace(trace, path)
    back = read_trace(path)
    assert back == trace
    assert (back.step is None) == (trace.step is None)
    assert (back.reward is None) == (trace.reward is None)
    assert (back.finish_reason is None) == (trace.finish_reason is None)
    if trace.reward is not None:  # bit-exact floats, signed zeros included
        assert back.reward.tobytes() == trace.reward.tobytes()


def _small(**extra: object) -> Trace:
    cols: dict[str, object] = {
        "prompt_id": ["a", "a", "b", "b"],
        "sample": [0, 1, 0, 1],
        "prompt_len": [5, 5, 7, 7],
        "response_len": [10, 100, 3, 4],
        "truncated": [False, True, False, False],
        **extra,
    }
    return Trace.from_columns(cols, TraceMeta(100, 2, "small"))


def test_optional_columns_written_only_when_present(tmp_path: Path) -> None:
    write_trace(_small(), tmp_path / "t.jsonl")
    lines = (tmp_path / "t.jsonl").read_text().splitlines()
    assert json.loads(lines[0]) == json.loads(
        '{"sortedrl_trace": 1, "max_response_len": 100, "group_size": 2, "source": "small"}'
    )
    assert set(json.loads(lines[1])) == {
        "prompt_id",
        "sample",
        "prompt_len",
        "response_len",
        "truncated",
    }
    write_trace(_small(reward=[0.1, 0.2, 1.0, 0.0]), tmp_path / "t.csv")
    lines = (tmp_path / "t.csv").read_text().splitlines()
    assert lines[0].startswith("# sortedrl_trace {")
    assert lines[1] == HEADER + ",reward"
    assert lines[2] == "a,0,5,10,false,0.1"


def test_files_without_metadata_are_inferred(tmp_path: Path) -> None:
    p = tmp_path / "plain.csv"
    p.write_text(f"{HEADER}\na,0,5,10,false\na,1,5,30,true\n")
    t = read_trace(p)
    assert t.meta == TraceMeta(max_response_len=30, group_size=2, source="plain.csv")
    q = tmp_path / "plain.jsonl"
    q.write_text(
        '{"prompt_id": "x", "sample": 0, "prompt_len": 1, "response_len": 7, "truncated": true}\n'
    )
    assert read_trace(q).meta == TraceMeta(7, 1, "plain.jsonl")


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_unknown_extension_is_detected_by_content(tmp_path: Path, fmt: str) -> None:
    t = _small(step=[0, 0, 1, 1])
    write_trace(t, tmp_path / f"t.{fmt}")
    os.rename(tmp_path / f"t.{fmt}", tmp_path / "t.data")
    assert read_trace(tmp_path / "t.data") == t


def test_parquet_metadata_lives_in_schema(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    write_trace(_small(), tmp_path / "t.parquet")
    md = pq.read_schema(tmp_path / "t.parquet").metadata
    assert json.loads(md[b"sortedrl_trace"])["group_size"] == 2


def test_parquet_without_pyarrow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    for op in (lambda p: write_trace(_small(), p), read_trace):
        with pytest.raises(TraceError, match=r"install the 'parquet' extra") as e:
            op(tmp_path / "t.parquet")
        assert str(e.value).startswith(f"{tmp_path / 't.parquet'}: Parquet needs pyarrow")
    assert not (tmp_path / "t.parquet").exists()


# -- atomic writes ---------------------------------------------------------------------------


def test_failed_write_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(trace: Trace, f: object) -> None:
        f.write("half a trace")  # type: ignore[attr-defined]
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_text, "write_jsonl", boom)
    with pytest.raises(RuntimeError):
        write_trace(_small(), tmp_path / "t.jsonl")
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "t.jsonl").write_text("old")
    with pytest.raises(RuntimeError):
        write_trace(_small(), tmp_path / "t.jsonl")
    assert [p.name for p in tmp_path.iterdir()] == ["t.jsonl"]
    assert (tmp_path / "t.jsonl").read_text() == "old"


def test_write_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as e:
        write_trace(_small(), tmp_path / "t.txt")
    assert (
        str(e.value)
        == f"{tmp_path / 't.txt'}: unknown trace format '.txt'; use one of .jsonl, .csv, .parquet"
    )
    with pytest.raises(TraceError, match=r"t.jsonl: cannot write: No such file or directory"):
        write_trace(_small(), tmp_path / "missing" / "t.jsonl")


# -- one test per malformed input ------------------------------------------------------------


def _err(tmp_path: Path, name: str, content: str) -> str:
    p = tmp_path / name
    p.write_text(content)
    with pytest.raises(TraceError) as e:
        read_trace(p)
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(f"{p}: ")
    return msg[len(f"{p}: ") :]


def _row(pid: str = "a", s: int = 0, pl: object = 5, rl: object = 10, tr: object = False) -> str:
    return json.dumps(
        {"prompt_id": pid, "sample": s, "prompt_len": pl, "response_len": rl, "truncated": tr}
    )


def test_missing_column(tmp_path: Path) -> None:
    assert _err(tmp_path, "t.csv", "prompt_id,sample,prompt_len,truncated\na,0,5,false\n") == (
        "missing required column 'response_len'"
    )
    content = (
        META + "\n" + '{"prompt_id": "a", "sample": 0, "response_len": 3, "truncated": false}\n'
    )
    assert _err(tmp_path, "t.jsonl", content) == "missing required column 'prompt_len'"


def test_row_missing_a_present_column(tmp_path: Path) -> None:
    rows = [_row(s=0), _row(s=1).replace(', "truncated": false', "")]
    assert _err(tmp_path, "t.jsonl", "\n".join([META, *rows]) + "\n") == (
        "line 3: missing field 'truncated' (present in line 2)"
    )
    bad = json.loads(_row(s=1))
    bad["reward"] = 1.0
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), json.dumps(bad)])) == (
        "line 3: field 'reward' is absent from line 2"
    )


def test_null_value(tmp_path: Path) -> None:
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), _row(s=1, rl=None)])) == (
        "line 3: field 'response_len' is null"
    )
    csv_text = f"# sortedrl_trace {META}\n{HEADER}\na,0,5,10,false\na,1,5,,false\n"
    assert _err(tmp_path, "t.csv", csv_text) == "line 4: field 'response_len' is empty"


def test_negative_length(tmp_path: Path) -> None:
    csv_text = f"# sortedrl_trace {META}\n{HEADER}\na,0,5,10,false\na,1,5,-3,false\n"
    assert _err(tmp_path, "t.csv", csv_text) == "line 4: field 'response_len': -3 is negative"
    content = "\n".join([META, _row(pl=0), _row(s=1)])
    assert _err(tmp_path, "t.jsonl", content) == "line 2: field 'prompt_len': 0 is below 1"


def test_non_integer_length(tmp_path: Path) -> None:
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), _row(s=1, rl=2.5)])) == (
        "line 3: field 'response_len': 2.5 is not an integer"
    )
    csv_text = f"{HEADER}\na,0,5,10,false\n\na,1,5,1e3,false\n"  # blank line 3 is skipped
    assert (
        _err(tmp_path, "t.csv", csv_text) == "line 4: field 'response_len': '1e3' is not an integer"
    )
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), _row(s=1, rl="7")])) == (
        "line 3: field 'response_len': '7' is not an integer"
    )
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), _row(s=1, tr="false")])) == (
        "line 3: field 'truncated': 'false' is not a boolean"
    )


def test_response_above_max(tmp_path: Path) -> None:
    assert _err(tmp_path, "t.jsonl", "\n".join([META, _row(), _row(s=1, rl=101)])) == (
        "line 3: field 'response_len': 101 is above max_response_len 100"
    )


LENGTH_LIMIT = "is above 2,147,483,647, the largest length (lengths are 32-bit in a run)"


@pytest.mark.parametrize("field", ["prompt_len", "response_len"])
def test_a_length_above_32_bits_names_its_line_in_every_text_format(tmp_path: Path, field: str) -> None:
    """Was an OverflowError traceback from the policy's view (int32), as `trace import` refuses."""
    meta = META.replace('"max_response_len": 100', '"max_response_len": 2147483647')
    big = {"pl": 2**31} if field == "prompt_len" else {"rl": 2**31}
    assert _err(tmp_path, "t.jsonl", "\n".join([meta, _row(), _row(s=1, **big)])) == (
        f"line 3: field '{field}': 2,147,483,648 {LENGTH_LIMIT}")
    row = "a,1,3000000000,10,false" if field == "prompt_len" else "a,1,5,3000000000,false"
    assert _err(tmp_path, "t.csv", f"{HEADER}\na,0,5,10,false\n{row}\n") == (
        f"line 3: field '{field}': 3,000,000,000 {LENGTH_LIMIT}")


def test_a_length_above_32_bits_names_its_parquet_row(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"prompt_id": ["a", "a"], "sample": [0, 1], "prompt_len": [5, 2**31 - 1],
                      "response_len": pa.array([10, 2**31], type=pa.int64()), "truncated": [False, False]})
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "n.parquet")
    assert str(e.value) == f"{tmp_path / 'n.parquet'}: row 2: field 'response_len': 2,147,483,648 {LENGTH_LIMIT}"


def test_a_cap_above_32_bits_is_refused_and_the_largest_lengths_are_read(tmp_path: Path) -> None:
    meta = META.replace('"max_response_len": 100', '"max_response_len": 2147483648')
    assert _err(tmp_path, "t.jsonl", "\n".join([meta, _row(), _row(s=1)])) == (
        f"metadata 'max_response_len': 2,147,483,648 {LENGTH_LIMIT}")
    top = 2**31 - 1
    (tmp_path / "ok.csv").write_text(f"{HEADER}\na,0,{top},{top},true\n")
    trace = read_trace(tmp_path / "ok.csv")
    assert (trace.prompt_len.tolist(), trace.response_len.tolist(), trace.meta.max_response_len) == (
        [top], [top], top)


def test_a_length_above_32_bits_is_one_error_line_in_simulate(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from sortedrl.cli import app

    trace = tmp_path / "t.csv"
    trace.write_text(f"{HEADER}\na,0,5,10,false\nb,0,5,3000000000,false\n")
    r = CliRunner().invoke(app, ["simulate", "--trace", str(trace), "--policy", "sync",
                                 "--out", str(tmp_path / "o")])
    assert (r.exit_code, r.stdout, r.stderr) == (
        2, "", f"error: {trace}: line 3: field 'response_len': 3,000,000,000 {LENGTH_LIMIT}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_empty_file(tmp_path: Path) -> None:
    for name in ("t.jsonl", "t.csv", "t.data"):
        assert _err(tmp_path, name, "") == "empty file"
    assert _err(tmp_path, "t.jsonl", "\n  \n") == "empty file"
    assert _err(tmp_path, "t.jsonl", META + "\n") == "no data rows after the metadata line"
    assert _err(tmp_path, "t.csv", f"# sortedrl_trace {META}\n{HEADER}\n") == (
        "no data rows after the header"
    )
    (tmp_path / "e.parquet").write_bytes(b"")
    with pytest.raises(TraceError, match=r"e\.parquet: empty file$"):
        read_trace(tmp_path / "e.parquet")


def test_bad_json_line(tmp_path: Path) -> None:
    content = "\n".join([META, _row(), '{"prompt_id": "a" "sample": 1}'])
    assert _err(tmp_path, "t.jsonl", content) == (
        "line 3: bad JSON: Expecting ',' delimiter (column 19)"
    )
    assert _err(tmp_path, "t.jsonl", "\n".join([META, "[1, 2]"])) == (
        "line 2: expected a JSON object, got list"
    )


def test_duplicate_prompt_sample(tmp_path: Path) -> None:
    csv_text = f"# sortedrl_trace {META}\n{HEADER}\na,0,5,10,false\na,0,5,11,false\n"
    assert _err(tmp_path, "t.csv", csv_text) == "line 4: duplicate (prompt_id, sample) = ('a', 0)"


def test_unknown_metadata_field(tmp_path: Path) -> None:
    meta = '{"sortedrl_trace": 1, "group_size": 2, "colour": "red"}'
    assert _err(tmp_path, "t.jsonl", "\n".join([meta, _row()])) == (
        "line 1: unknown metadata field 'colour' (known: max_response_len, group_size, source)"
    )
    assert _err(tmp_path, "t.csv", f"# sortedrl_trace {meta}\n{HEADER}\n") == (
        "line 1: unknown metadata field 'colour' (known: max_response_len, group_size, source)"
    )
    bad = '{"sortedrl_trace": 1, "group_size": "2"}'
    assert _err(tmp_path, "t.jsonl", "\n".join([bad, _row()])) == (
        "line 1: metadata 'group_size' must be a positive integer, got '2'"
    )
    assert _err(tmp_path, "t.jsonl", '{"sortedrl_trace": 2}\n' + _row()) == (
        "line 1: unsupported sortedrl_trace version 2 (expected 1)"
    )


def test_other_malformed_inputs(tmp_path: Path) -> None:
    assert _err(tmp_path, "t.csv", f"{HEADER},colour\na,0,5,10,false,red\n") == (
        "line 1: unknown column 'colour' (known: prompt_id, sample, prompt_len, response_len, "
        "truncated, step, reward, finish_reason, turn_gen, turn_tool_s, turn_tool_tokens)"
    )
    assert _err(tmp_path, "t.csv", f"{HEADER}\na,0,5,10,false\na,1,5,10\n") == (
        "line 3: expected 5 fields, got 4"
    )
    assert _err(tmp_path, "t.csv", f"{HEADER}\na,0,5,10,maybe\n") == (
        "line 2: field 'truncated': 'maybe' is not a boolean"
    )
    assert _err(tmp_path, "t.csv", f"# sortedrl_trace {META}\n{HEADER}\na,0,5,10,false\n") == (
        "prompt 'a' (first at line 3) has 1 sample, expected group_size 2"
    )
    assert _err(tmp_path, "t.csv", "# hello\n") == (
        "line 1: expected '# sortedrl_trace {...}' metadata or a header"
    )
    assert _err(tmp_path, "t.jsonl", "\n".join([_row(), META])) == (
        "line 2: metadata is only allowed on the first line"
    )
    with pytest.raises(TraceError, match=r"nothere\.jsonl: no such file$"):
        read_trace(tmp_path / "nothere.jsonl")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfd\x00")
    with pytest.raises(TraceError, match=r"bin\.csv: not UTF-8 text \(byte 0\)$"):
        read_trace(tmp_path / "bin.csv")
    (tmp_path / "bom.csv").write_bytes(b"\xff\xfe\x00")  # (UTF-16's byte-order mark: named so)
    with pytest.raises(TraceError, match=r"bom\.csv: UTF-16 text \(its byte-order mark\), not UTF-8: save it as UTF-8$"):
        read_trace(tmp_path / "bom.csv")
    good = (Path(__file__).parents[1] / "sortedrl" / "traces" / "data" / "math-16k.jsonl").read_bytes()
    (tmp_path / "late.jsonl").write_bytes(good[:300_000] + b"\xe9" + good[300_001:])
    with pytest.raises(TraceError) as e:  # (the offset was counted from the chunk being decoded)
        read_trace(tmp_path / "late.jsonl")
    assert str(e.value) == f"{tmp_path / 'late.jsonl'}: not UTF-8 text (byte 300000)"


def test_parquet_errors_name_rows(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "prompt_id": ["a", "a"],
            "sample": [0, 1],
            "prompt_len": [5, 5],
            "response_len": pa.array([10, None], type=pa.int64()),
            "truncated": [False, False],
        }
    )
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "n.parquet")
    assert str(e.value) == f"{tmp_path / 'n.parquet'}: row 2: field 'response_len' is null"
    table = table.set_column(3, "response_len", pa.array([10, -1], type=pa.int64()))
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(TraceError) as e:
        read_trace(tmp_path / "n.parquet")
    assert str(e.value) == f"{tmp_path / 'n.parquet'}: row 2: field 'response_len': -1 is negative"
    table = table.set_column(3, "response_len", pa.array([10, 2**64 - 1], type=pa.uint64()))
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(TraceError) as e:  # (it wrapped to -1, and was called negative)
        read_trace(tmp_path / "n.parquet")
    assert str(e.value) == (f"{tmp_path / 'n.parquet'}: row 2: field 'response_len': 18,446,744,073,"
                            "709,551,615 is above 2,147,483,647, the largest length (lengths are "
                            "32-bit in a run)")
    table = table.set_column(1, "sample", pa.array([0, 2**64 - 1], type=pa.uint64()))
    table = table.set_column(3, "response_len", pa.array([10, 10], type=pa.int64()))
    pq.write_table(table, tmp_path / "n.parquet")
    with pytest.raises(TraceError) as e:  # (not a length: past int64, it is out of range)
        read_trace(tmp_path / "n.parquet")
    assert str(e.value) == (f"{tmp_path / 'n.parquet'}: row 2: field 'sample': "
                            "18446744073709551615 is out of range")
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(TraceError, match=r"junk\.parquet: not a readable Parquet file"):
        read_trace(tmp_path / "junk.parquet")


def test_multiline_csv_fields_keep_line_numbers(tmp_path: Path) -> None:
    csv_text = f'{HEADER}\n"a\nb",0,5,10,false\n"c",0,5,-1,false\n'
    assert _err(tmp_path, "t.csv", csv_text) == "line 4: field 'response_len': -1 is negative"


def test_large_round_trip_is_exact(tmp_path: Path) -> None:
    # speed is measured in bench/trace_io_speed.py, not asserted here
    from sortedrl.traces import synthesize

    t = synthesize("math-16k", prompts=25_000, group_size=8)
    assert len(t) == 200_000
    for ext in ("jsonl", "csv"):
        write_trace(t, tmp_path / f"big.{ext}")
        back = read_trace(tmp_path / f"big.{ext}")
        assert back == t
        assert np.array_equal(back.reward, t.reward)


def test_owned_columns_in_canonical_order_are_kept_not_copied() -> None:
    # a file reader hands its arrays over (owned=True): a writable array already in canonical
    # order is the trace's own; anything else is copied, so the trace never shares a caller's
    meta = TraceMeta(100, 2, "own")
    cols = {"prompt_id": np.array(["a", "a", "b", "b"]), "sample": np.array([0, 1, 0, 1]),
            "prompt_len": np.array([5, 5, 7, 7]), "response_len": np.array([10, 100, 3, 4]),
            "truncated": np.zeros(4, dtype=bool)}
    owned = Trace.from_columns(dict(cols), meta, owned=True)
    assert all(getattr(owned, k) is v for k, v in cols.items())
    shared = Trace.from_columns(dict(cols), meta)
    assert not any(np.shares_memory(getattr(shared, k), v) for k, v in cols.items())
    assert shared == owned
    swapped = {k: v[[1, 0, 2, 3]] for k, v in cols.items()}  # samples 1, 0: not canonical
    reordered = Trace.from_columns(dict(swapped), meta, owned=True)
    assert reordered == owned
    assert not any(np.shares_memory(getattr(reordered, k), v) for k, v in swapped.items())
    frozen = cols["response_len"].copy()
    frozen.flags.writeable = False  # an Arrow buffer's view: copied, so the trace is writable
    kept = Trace.from_columns({**cols, "response_len": frozen}, meta, owned=True)
    assert kept.response_len.flags.writeable and not np.shares_memory(kept.response_len, frozen)


@pytest.mark.parametrize("ext", ["parquet", "jsonl", "csv"])
def test_read_trace_columns_are_writable_and_unshared(tmp_path: Path, ext: str) -> None:
    t = _small(step=[0, 0, 1, 1], reward=[1.0, 0.0, 0.5, 0.5],
               finish_reason=["stop", "length", "stop", "stop"])
    write_trace(t, tmp_path / f"t.{ext}")
    back = read_trace(tmp_path / f"t.{ext}")
    assert back == t
    cols = list(back.columns().values())
    assert all(c.flags.writeable for c in cols)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(cols) for b in cols[i + 1:])


def test_the_help_describes_each_bundled_trace_as_it_is() -> None:
    """The --trace help offered logic-8k beside math-16k with no word that it is one step without
    groups (a first simulate of it warned that no policy gets past its warm-up step)."""
    from sortedrl.traces.io import BUNDLED_SHAPES, bundled_names, resolve_bundled
    from sortedrl.traces.stats import trace_stats

    assert sorted(BUNDLED_SHAPES) == bundled_names()
    shapes = {}
    for name in bundled_names():
        s = trace_stats(read_trace(resolve_bundled(Path(name))))
        per_step = s["count"] // s["steps"]
        shapes[name] = (f"{s['steps']} step{'s' * (s['steps'] > 1)} of "
                        + (f"{per_step} samples" if s["group_size"] == 1
                           else f"{per_step // s['group_size']} prompts x {s['group_size']}"))
    assert shapes == BUNDLED_SHAPES
