"""`trace import` of a table, the options it takes, and `trace fit`'s printing, on input a second
audit found misread: options a source does not read were ignored without a word, lengths past
32 bits were taken (and a huge one called "not a positive integer"), a column given twice was
read silently, a Parquet or gzip table said "not UTF-8 text", and `trace fit` printed token
counts without thousands separators. Each bad input is one `error:` line naming the file, line
(row) and column, exit 2, and no output file."""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces.io import read_trace
from tests.test_trace_import_bad_input2 import _import, _one_error

runner = CliRunner()
FIXTURES = Path(__file__).parent / "fixtures" / "frameworks"
COLS = ["--prompt-len-col", "p", "--response-len-col", "r"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


# -- 4. options the source does not read --------------------------------------------------------

TABLE_ONLY = [
    ("--group-size", "4", "a framework's dump gives its own groups"),
    ("--prompt-len-col", "x", "a framework's dump is read in its own layout"),
    ("--response-len-col", "y", "a framework's dump is read in its own layout"),
]


@pytest.mark.parametrize(("flag", "value", "why"), TABLE_ONLY)
def test_table_options_are_refused_with_from(tmp_path, flag, value, why) -> None:
    """Was: ignored (while --decode-tps and --prompt-len were refused)."""
    assert _one_error(tmp_path, [FIXTURES / "nemo_rl_logs", "--from", "nemo-rl", flag, value]) == (
        f"error: {flag}: only for a table import, without --from ({why}); remove it")


TOKENIZER = ("error: --tokenizer: only for --from verl or trl (their dumps hold text; the others "
             "hold token counts); remove it")


def test_tokenizer_is_refused_where_it_is_not_read(tmp_path) -> None:
    assert _one_error(tmp_path, [FIXTURES / "nemo_rl_logs", "--from", "nemo-rl",
                                 "--tokenizer", tmp_path]) == TOKENIZER
    f = _write(tmp_path, "t.csv", "p,r\n1,2\n")
    assert _one_error(tmp_path, [f, *COLS, "--tokenizer", tmp_path]) == TOKENIZER


def test_trl_and_areal_options_are_refused_for_a_table(tmp_path) -> None:
    f = _write(tmp_path, "t.csv", "p,r\n1,2\n")
    assert _one_error(tmp_path, [f, *COLS, "--reward-columns", "r=1"]) == (
        "error: --reward-columns: only for --from trl (it names the reward-function columns of "
        "TRL's completions table); remove it")
    assert _one_error(tmp_path, [f, *COLS, "--decode-tps", "5"]) == (
        "error: --decode-tps: only for --from areal (it stands in for the token counts AReaL "
        "does not log); remove it")


def test_unknown_framework_is_named_before_the_options(tmp_path) -> None:
    assert _one_error(tmp_path, [tmp_path, "--from", "openrlhf", "--tokenizer", tmp_path]) == (
        "error: --from 'openrlhf': unknown framework; known: verl, slime, nemo-rl, trl, areal, "
        "nemo-gym")


def test_group_size_still_reads_a_table(tmp_path) -> None:
    f = _write(tmp_path, "t.csv", "p,r\n1,2\n1,3\n1,4\n")
    r, out = _import(tmp_path, [f, *COLS, "--group-size", "2"])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"wrote {out}: 3 rows read, 1 prompt x 2, 1 row dropped, 0 clipped\n"
    assert read_trace(out).meta.group_size == 2


# -- 5. lengths past 32 bits -------------------------------------------------------------------

ABOVE = "is above 2,147,483,647, the largest length (lengths are 32-bit in a run)"


@pytest.mark.parametrize(("cell", "shown"), [("99999999999999", "99,999,999,999,999"),
                                             ("2147483648", "2,147,483,648"),
                                             ("2.147483648e9", "2,147,483,648")])
def test_csv_length_above_32_bits_says_so(tmp_path, cell, shown) -> None:
    """Was: up to 2**40 taken; above it, "is not a positive integer" (untrue)."""
    f = _write(tmp_path, "t.csv", f"p,r\n5,6\n5,{cell}\n")
    assert _one_error(tmp_path, [f, *COLS]) == f"error: {f}: line 3: column 'r': {shown} {ABOVE}"


def test_jsonl_length_above_32_bits_says_so_and_the_largest_is_read(tmp_path) -> None:
    f = _write(tmp_path, "t.jsonl", '{"p": 2147483648, "r": 3}\n')
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: line 1: column 'p': 2,147,483,648 {ABOVE}")
    f.write_text('{"p": 2147483647, "r": 2147483647}\n')
    r, out = _import(tmp_path, [f, *COLS])
    assert r.exit_code == 0, r.output
    assert read_trace(out).meta.max_response_len == 2_147_483_647


# -- 6. a column given twice ----------------------------------------------------------------------


def test_csv_column_given_twice_is_an_error(tmp_path) -> None:
    """Was: the first of the two read, silently."""
    f = _write(tmp_path, "t.csv", "p,r,r\n10,20,30\n")
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: line 1: column 'r' appears twice (rename one of them)")


def test_jsonl_key_given_twice_is_an_error(tmp_path) -> None:
    """Was: the last of the two read, silently."""
    f = _write(tmp_path, "t.jsonl", '{"p": 1, "r": 2}\n{"p": 1, "r": 2, "r": 5}\n')
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: line 2: column 'r' appears twice (rename one of them)")


def test_a_column_not_read_may_be_given_twice(tmp_path) -> None:
    """Only the two length columns are read: a trailing comma's blank names, or another column
    given twice (in a nested object too), change nothing."""
    for name, text in (("t.csv", "p,r,,\n1,2,,\n"),
                       ("t.jsonl", '{"p": 1, "r": 2, "x": 1, "x": 2, "m": {"a": 1, "a": 2}}\n')):
        r, out = _import(tmp_path, [_write(tmp_path, name, text), *COLS, "--force"])
        assert r.exit_code == 0, r.output
        assert read_trace(out).response_len.tolist() == [2]


# -- 7. Parquet and compressed tables ---------------------------------------------------------


def _parquet(tmp_path: Path, arrays: list, names: list[str]) -> Path:
    f = tmp_path / "requests.parquet"
    pq.write_table(pa.Table.from_arrays(arrays, names=names), f)
    return f


def test_parquet_table_is_read(tmp_path) -> None:
    """Was: `not UTF-8 text (byte 274)`. pyarrow is a core dependency: the table is read."""
    f = _parquet(tmp_path, [pa.array([10, 20, 30, 40]), pa.array([5.0, 7.0, 9.0, 3.0]),
                            pa.array(["a", "b", "c", "d"])], ["p", "r", "text"])
    r, out = _import(tmp_path, [f, *COLS, "--group-size", "2"])
    assert r.exit_code == 0 and r.stderr == "", r.output
    trace = read_trace(out)
    assert trace.prompt_len.tolist() == [10, 20, 30, 40]
    assert trace.response_len.tolist() == [5, 7, 9, 3]
    assert trace.meta.max_response_len == 9 and trace.meta.source == "requests.parquet"


def test_parquet_table_errors_name_the_row_and_column(tmp_path) -> None:
    f = _parquet(tmp_path, [pa.array([1, 2]), pa.array([3, None])], ["p", "r"])
    assert _one_error(tmp_path, [f, *COLS]) == f"error: {f}: row 2: column 'r' is null"
    f = _parquet(tmp_path, [pa.array([1, 2]), pa.array([3, 0])], ["p", "r"])
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: row 2: column 'r': 0 is not a positive integer")
    f = _parquet(tmp_path, [pa.array([1]), pa.array([2**31])], ["p", "r"])
    assert _one_error(tmp_path, [f, *COLS]) == f"error: {f}: row 1: column 'r': 2,147,483,648 {ABOVE}"
    f = _parquet(tmp_path, [pa.array([1]), pa.array([2])], ["p", "len"])
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: no column 'r'; available columns: 'p', 'len'")
    f = _parquet(tmp_path, [pa.array([1]), pa.array([2]), pa.array([3])], ["p", "r", "r"])
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: column 'r' appears twice (rename one of them)")


def test_truncated_parquet_is_one_error_line(tmp_path) -> None:
    f = _parquet(tmp_path, [pa.array([1]), pa.array([2])], ["p", "r"])
    f.write_bytes(f.read_bytes()[:20])
    assert _one_error(tmp_path, [f, *COLS]).startswith(f"error: {f}: not a Parquet file: ")


def test_gzip_table_says_decompress_it(tmp_path) -> None:
    """Was: `not UTF-8 text (byte 1)`."""
    f = tmp_path / "t.csv.gz"
    f.write_bytes(gzip.compress(b"p,r\n1,2\n"))
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: gzip-compressed: decompress it first (a table import reads CSV, JSONL or "
        "Parquet)")


@pytest.mark.parametrize("kind, compress", [
    ("xz", lambda b: lzma.compress(b)), ("bzip2", lambda b: bz2.compress(b)),
    ("zip", lambda b: _zipped(b)),
])
def test_each_compressed_table_says_decompress_it(tmp_path, kind, compress) -> None:
    # (the binary-head check let gzip through only: the others said 'not UTF-8 text (byte 0)')
    f = tmp_path / "t.csv.z"
    f.write_bytes(compress(b"p,r\n1,2\n"))
    assert _one_error(tmp_path, [f, *COLS]) == (
        f"error: {f}: {kind}-compressed: decompress it first (a table import reads CSV, JSONL or Parquet)")


def _zipped(data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("t.csv", data)
    return buf.getvalue()


def test_not_utf8_names_the_byte_of_the_file_past_a_bom(tmp_path) -> None:
    f = tmp_path / "t.csv"
    f.write_bytes(b"\xef\xbb\xbfp,r\n1,\xff\n")
    assert _one_error(tmp_path, [f, *COLS]) == f"error: {f}: not UTF-8 text (byte 9)"


# -- 9. trace fit's printing -----------------------------------------------------------------------


def test_trace_fit_prints_token_counts_with_thousands_separators(tmp_path) -> None:
    """Was `max_response_len │ 16384 │ tokens`; docs/metrics.md: counts and tokens are whole
    numbers with thousands separators."""
    t = tmp_path / "m.jsonl"
    r = runner.invoke(app, ["trace", "synth", "math-16k", "--prompts", "16", "--group-size", "4",
                            "--steps", "2", "--out", str(t)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["trace", "fit", str(t), "--out", str(tmp_path / "m.json")],
                      terminal_width=120)
    assert r.exit_code == 0, r.output
    row = next(line for line in r.stdout.splitlines() if "max_response_len" in line)
    assert row.split("│")[1:4] == [" max_response_len ", "  16,384 ", " tok                 "]
    assert "(128 samples vs 2,560" in r.stdout  # (the title wraps at the table's width)
