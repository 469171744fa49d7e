"""Trace reading and importing, as a fresh-eyes tester found them: integral floats (``10.0``,
pandas' ``to_json``) in a JSONL trace without metadata were refused against a placeholder cap of
1; a table import by prompt id dropped a prompt drawn twice in one step; the framework
importers' bad-JSON error lost its column and their summary counted samples read, not written;
a compressed trace was "not UTF-8 text"; and ``truncated`` could contradict ``finish_reason``."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces import read_trace
from sortedrl.traces.importers import import_framework

runner = CliRunner()
META_FULL = {"sortedrl_trace": 1, "max_response_len": 50, "group_size": 2}
META_SOURCE = {"sortedrl_trace": 1, "source": "mine"}  # neither cap nor group size


def _jsonl(path: Path, rows: list[dict], meta: dict | None = None) -> Path:
    lines = ([meta] if meta else []) + rows
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def _rows(**change: object) -> list[dict]:
    rows = [{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 10, "truncated": False},
            {"prompt_id": "a", "sample": 1, "prompt_len": 5, "response_len": 20, "truncated": False}]
    rows[int(change.pop("at", 0))].update(change)
    return rows


def _refused(args: list[str]) -> str:
    r = runner.invoke(app, [str(a) for a in args])
    assert "Traceback" not in r.output, r.output
    assert r.exit_code == 2, r.output
    return r.stderr


# -- 1: integral floats, with and without a metadata line ---------------------------------------


@pytest.mark.parametrize("meta", [None, META_SOURCE, META_FULL], ids=["none", "source", "full"])
@pytest.mark.parametrize("change", [{"response_len": 10.0}, {"at": 1, "response_len": 20.0},
                                    {"at": 1, "sample": 1.0}, {"prompt_len": 5.0}])
def test_an_integral_float_is_its_integer_with_or_without_metadata(tmp_path, meta, change):
    t = read_trace(_jsonl(tmp_path / "d.jsonl", _rows(**change), meta))
    assert (t.sample.tolist(), t.response_len.tolist(), t.prompt_len.tolist()) == ([0, 1], [10, 20], [5, 5])
    cap = 50 if meta is META_FULL else 20  # inferred from the floats as from ints
    assert (t.meta.max_response_len, t.meta.group_size) == (cap, 2)


def test_the_tester_s_repro_reads(tmp_path):
    path = _jsonl(tmp_path / "d.jsonl", _rows(response_len=10.0))
    r = runner.invoke(app, ["trace", "stats", str(path), "--json"])
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["count"], json.loads(r.stdout)["groups"]) == (2, 1)


def test_a_parquet_float_column_without_metadata_infers_alike(tmp_path):
    rows = _rows()
    table = pa.table({k: [r[k] for r in rows] for k in rows[0]})
    table = table.set_column(1, "sample", pa.array([0.0, 1.0]))
    table = table.set_column(3, "response_len", pa.array([10.0, 20.0]))
    pq.write_table(table, tmp_path / "d.parquet")
    t = read_trace(tmp_path / "d.parquet")
    assert (t.meta.max_response_len, t.meta.group_size, t.response_len.tolist()) == (20, 2, [10, 20])


@pytest.mark.parametrize("meta", [None, META_FULL], ids=["none", "full"])
def test_a_fraction_is_still_refused_by_its_line(tmp_path, meta):
    path = _jsonl(tmp_path / "d.jsonl", _rows(at=1, response_len=20.5), meta)
    line = 3 if meta else 2
    assert _refused(["trace", "stats", path]) == (
        f"error: {path}: line {line}: field 'response_len': 20.5 is not an integer\n")


def test_a_csv_cell_must_be_an_integer_literal(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("prompt_id,sample,prompt_len,response_len,truncated\na,0,5,10.0,false\na,1,5,3,false\n")
    assert _refused(["trace", "stats", path]) == (
        f"error: {path}: line 2: field 'response_len': '10.0' is not an integer\n")


# -- 2: a table import splits a group of k x n rows as the framework importers do ---------------

TABLE = "pid,p,r\na,5,10\nb,6,3\na,5,11\na,5,12\nb,6,4\na,5,13\nc,7,1\n"


def _import(tmp_path: Path, table: str, *extra: str):
    src = tmp_path / "tab.csv"
    src.write_text(table)
    out = tmp_path / "out.jsonl"
    r = runner.invoke(app, ["trace", "import", str(src), "--prompt-len-col", "p", "--response-len-col",
                            "r", "--prompt-id-col", "pid", *extra, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return r, read_trace(out)


def test_a_prompt_drawn_twice_in_one_step_is_split_and_another_size_dropped(tmp_path):
    r, t = _import(tmp_path, TABLE, "--group-size", "2")
    assert t.prompt_id.tolist() == ["a", "a", "a#2", "a#2", "b", "b"]
    assert t.response_len.tolist() == [10, 11, 12, 13, 3, 4]  # in table order
    assert t.sample.tolist() == [0, 1] * 3
    assert r.stderr.splitlines() == [
        "note: split 1 prompt group holding a multiple of --group-size 2 rows (a prompt drawn more "
        "than once in one step) into groups of 2, in table order (the second named ID#2, the third ID#3, "
        "skipping the ids its step has)",
        "note: dropped 1 prompt group (1 row) whose size is not a multiple of --group-size 2 (a "
        "filtered or aborted sample?)"]
    assert r.stdout == f"wrote {tmp_path / 'out.jsonl'}: 7 rows read, 3 prompts x 2, 1 row dropped, 0 clipped\n"


def test_a_split_is_within_a_step(tmp_path):
    table = "s,pid,p,r\n0,a,5,1\n0,a,5,2\n1,a,5,3\n1,a,5,4\n1,a,5,5\n1,a,5,6\n"
    r, t = _import(tmp_path, table, "--group-size", "2", "--step-col", "s")
    assert (t.step.tolist(), t.prompt_id.tolist()) == ([0, 0, 1, 1, 1, 1], ["a", "a", "a", "a", "a#2", "a#2"])
    assert r.stderr.startswith("note: split 1 prompt group holding a multiple")


def test_a_split_name_skips_an_id_its_step_already_has(tmp_path):
    # 'a' drawn three times in step 0 beside a prompt the table itself calls 'a#2' (it was
    # refused: duplicate (prompt_id, sample) = ('a#2', 0) in step 0); in step 1 'a#2' is free
    table = ("s,pid,p,r\n" + "".join(f"0,a,5,{n}\n" for n in range(1, 7)) + "0,a#2,6,7\n0,a#2,6,8\n"
             + "1,a,5,9\n1,a,5,10\n1,a,5,11\n1,a,5,12\n")
    r, t = _import(tmp_path, table, "--group-size", "2", "--step-col", "s")
    assert t.prompt_id.tolist() == ["a", "a", "a#3", "a#3", "a#4", "a#4", "a#2", "a#2",
                                    "a", "a", "a#2", "a#2"]
    assert t.response_len.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
    assert r.stderr.startswith("note: split 2 prompt groups holding a multiple")


def test_with_the_default_group_size_the_note_says_to_give_one(tmp_path):
    r, t = _import(tmp_path, "pid,p,r\na,5,1\na,5,2\nb,6,3\n")
    assert t.prompt_id.tolist() == ["a", "a#2", "b"]
    assert r.stderr.splitlines() == [
        "note: split 1 prompt group of several rows into groups of 1 (--group-size 1): give "
        "--group-size N if a prompt's rows are its group"]


# -- 3 and 4: the framework importers' bad JSON and their summary -------------------------------


def test_a_dump_cut_mid_line_names_the_column(tmp_path):
    dump = tmp_path / "vd"
    dump.mkdir()
    (dump / "3.jsonl").write_text('{"input": "sort 1 =", "output": "1", "score": 1, "step": 3}\n'
                                  '{"input": "sort 2 =", "outp')
    assert _refused(["trace", "import", dump, "--from", "verl", "--out", tmp_path / "v.jsonl"]) == (
        f"error: {dump / '3.jsonl'}: line 2: bad JSON: Unterminated string starting at (column 23)\n")


def _nemo_row(first_token: int, response: int) -> dict:
    ids = [first_token, first_token + 1, first_token + 2] + list(range(response))
    return {"input_lengths": [3 + response], "token_ids": [ids],
            "token_loss_mask": [[0] * 3 + [1] * response], "rewards": [1.0]}


def test_the_summary_counts_samples_written_and_says_how_many_were_dropped(tmp_path):
    rows = ([_nemo_row(100, 2 + i) for i in range(4)] + [_nemo_row(110, 3 + i) for i in range(4)]
            + [_nemo_row(120, 1 + i) for i in range(3)])  # the third prompt's group is short
    dump = _jsonl(tmp_path / "train_data_step2.jsonl", rows)
    out = tmp_path / "n.jsonl"
    r = runner.invoke(app, ["trace", "import", str(dump), "--from", "nemo-rl", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert len(read_trace(out)) == 8
    assert r.stdout == (f"wrote {out}: 8 samples of 11 read (3 dropped in groups whose size is not a "
                        "multiple of 4) from 1 nemo-rl file(s), 2 groups x 4 over 1 step(s), cap 6 tokens\n")
    assert r.stderr == ("note: dropped 1 group (3 samples) whose size is not a multiple of the group "
                        "size 4 (a filtered or aborted sample)\n")
    out.unlink()
    r = runner.invoke(app, ["trace", "import", str(_jsonl(dump, rows[:8])), "--from", "nemo-rl",
                            "--out", str(out)])
    assert r.stdout == (f"wrote {out}: 8 samples from 1 nemo-rl file(s), 2 groups x 4 over 1 step(s), "
                        "cap 6 tokens\n")


# -- 5: a compressed trace is named as trace import names it ------------------------------------

PLAIN = b'{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 10, "truncated": false}\n'


def _zip(data: bytes) -> bytes:
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("t.jsonl", data)
    return buf.getvalue()


COMPRESSORS = {"gz": ("gzip", gzip.compress), "bz2": ("bzip2", bz2.compress),
               "xz": ("xz", lzma.compress), "zip": ("zip", _zip),
               "zst": ("zstd", lambda d: b"\x28\xb5\x2f\xfd\x20\x00\x00\x00\x80\xff" + d)}


@pytest.mark.parametrize("ext", COMPRESSORS)
def test_a_compressed_trace_is_named(tmp_path, ext):
    kind, compress = COMPRESSORS[ext]
    path = tmp_path / f"t.jsonl.{ext}"
    path.write_bytes(compress(PLAIN * 50))
    want = f"error: {path}: {kind}-compressed: decompress it first (a trace is JSONL, CSV or Parquet)\n"
    assert _refused(["trace", "stats", path]) == want
    assert _refused(["simulate", "--trace", path, "--policy", "sync", "--out", tmp_path / "o"]) == want
    with pytest.raises(TraceError) as e:  # a framework dump (--from) alike
        import_framework("verl", path)
    assert str(e.value) == f"{path}: {kind}-compressed: decompress it first"


def test_the_content_names_it_whatever_the_file_name(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_bytes(gzip.compress(PLAIN))
    assert _refused(["trace", "stats", path]) == (
        f"error: {path}: gzip-compressed: decompress it first (a trace is JSONL, CSV or Parquet)\n")


# -- 6: truncated means finish reason length -----------------------------------------------------


@pytest.mark.parametrize("truncated, reason", [(True, "stop"), (False, "length"), (True, "abort")])
def test_truncated_contradicting_the_finish_reason_is_refused(tmp_path, truncated, reason):
    rows = [dict(r, finish_reason="stop") for r in _rows()]
    rows[1].update(truncated=truncated, finish_reason=reason)
    path = _jsonl(tmp_path / "t.jsonl", rows, META_FULL)
    assert _refused(["trace", "stats", path]) == (
        f"error: {path}: line 3: field 'truncated': {str(truncated).lower()} contradicts field "
        f"'finish_reason': '{reason}' (truncated means finish reason 'length')\n")


def test_the_contradiction_names_a_csv_line_and_a_parquet_row(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("prompt_id,sample,prompt_len,response_len,truncated,finish_reason\n"
                   "a,0,5,10,false,stop\na,1,5,20,true,stop\n")
    assert _refused(["trace", "stats", csv]) == (
        f"error: {csv}: line 3: field 'truncated': true contradicts field 'finish_reason': 'stop' "
        "(truncated means finish reason 'length')\n")
    rows = [dict(r, finish_reason="stop") for r in _rows()]
    rows[1]["finish_reason"] = "length"
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "t.parquet")
    assert _refused(["trace", "stats", tmp_path / "t.parquet"]) == (
        f"error: {tmp_path / 't.parquet'}: row 2: field 'truncated': false contradicts field "
        "'finish_reason': 'length' (truncated means finish reason 'length')\n")


def test_consistent_rows_and_a_trace_without_finish_reasons_read(tmp_path):
    rows = [dict(r, finish_reason=f) for r, f in zip(_rows(at=1, truncated=True), ["abort", "length"],
                                                      strict=True)]
    t = read_trace(_jsonl(tmp_path / "t.jsonl", rows, META_FULL))
    assert (t.truncated.tolist(), t.finish_reason.tolist()) == ([False, True], ["abort", "length"])
    t = read_trace(_jsonl(tmp_path / "u.jsonl", _rows(at=1, truncated=True), META_FULL))
    assert t.finish_reason is None and t.truncated.tolist() == [False, True]  # (below the cap: allowed)


def test_a_tool_output_beyond_32_bits_is_refused_with_its_line(tmp_path):
    """A turn's tool_tokens of 3e9 was read, then the run ended in an OverflowError traceback
    (lengths are 32-bit in a run): it is refused as any length above 2**31 - 1 is."""
    rows = [{"prompt_id": "a", "sample": 0, "prompt_len": 5, "response_len": 3, "truncated": False,
             "turns": [{"gen": 1, "tool_s": 1.0, "tool_tokens": 3_000_000_000}, {"gen": 2, "tool_s": 0.0, "tool_tokens": 0}]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = CliRunner().invoke(app, ["trace", "stats", str(path)])
    assert (r.exit_code, r.stderr) == (2, f"error: {path}: line 1: field 'turns': turn 1: 'tool_tokens': 3,000,000,000 "
                                          "is above 2,147,483,647, the largest length (lengths are 32-bit in a run)\n")


def test_an_import_without_a_cap_says_how_many_responses_it_marked_truncated(tmp_path):
    """Without --max-response-len the longest response is taken as the cap: several responses at
    that length (a pile-up, as a real cap makes) are all marked truncated, and a note says so;
    one longest response alone is not said."""
    table = tmp_path / "t.csv"
    table.write_text("p,r\n5,10\n5,40\n5,40\n5,40\n5,7\n5,8\n5,9\n5,11\n")
    out = tmp_path / "t.jsonl"
    r = CliRunner().invoke(app, ["trace", "import", str(table), "--prompt-len-col", "p", "--response-len-col", "r",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stderr == ("note: no --max-response-len: the longest response, 40 tokens, is taken as the run's cap, "
                        "so the 3 responses of that length (37.5% of 8) are marked truncated (finish reason "
                        "length); give the run's cap if it was larger\n")
    r = CliRunner().invoke(app, ["trace", "import", str(table), "--prompt-len-col", "p", "--response-len-col", "r",
                                 "--max-response-len", "64", "--out", str(out), "--force"])
    assert r.exit_code == 0 and r.stderr == "", r.output
    table.write_text("p,r\n5,10\n5,40\n5,7\n5,8\n")
    r = CliRunner().invoke(app, ["trace", "import", str(table), "--prompt-len-col", "p", "--response-len-col", "r",
                                 "--out", str(out), "--force"])
    assert r.exit_code == 0 and r.stderr == "", r.output
