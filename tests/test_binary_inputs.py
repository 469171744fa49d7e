"""A binary file given where a text input goes is refused from its first bytes, not read whole.

A model's weights given to --trace by mistake (`model.safetensors`, 16 GB) were read whole into
memory to say "not UTF-8 text", and `/dev/zero` was read forever. The first 64 KiB now decide:
a NUL byte (no JSON, JSONL or CSV input holds one) or bytes that are not UTF-8 are one error.
The files here are sparse: 64 GiB that take no disk, which a reader that read them whole could
not hold in this machine's memory (a regression fails with MemoryError, not a hang).

Run: pytest tests/test_binary_inputs.py
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
HUGE = 64 << 30  # bytes, sparse
ROW = b'{"prompt_id": 0, "sample": 0, "prompt_len": 8, "response_len": 4}\n'  # a trace's row, then NULs


def sparse(path, head: bytes) -> str:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(HUGE)
    return str(path)


def safetensors_head() -> bytes:  # the format's 8-byte little-endian header length, then its JSON
    header = b'{"__metadata__": {"format": "pt"}}'
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize("name, head, message", [
    ("model.safetensors", safetensors_head(), "binary data (a NUL byte at byte 1), not a JSONL or CSV trace"),
    ("weights.jsonl", ROW, f"binary data (a NUL byte at byte {len(ROW)}), not a JSONL or CSV trace"),
    ("blob.csv", b"prompt_id,sample\n\xff\xfe", "not UTF-8 text (byte 17)"),
])
def test_a_huge_binary_trace_is_refused_from_its_head(tmp_path, monkeypatch, name, head, message):
    monkeypatch.chdir(tmp_path)
    path = sparse(tmp_path / name, head)
    r = runner.invoke(app, ["simulate", "--trace", path, "--policy", "sync", "--out", "run"])
    assert (r.exit_code, r.stdout, r.stderr) == (2, "", f"error: {path}: {message}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # nothing written


def test_a_huge_binary_cluster_file_is_refused_from_its_head(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = sparse(tmp_path / "cluster.json", b'{"preset": "h100-llama3.1-8b"}')
    r = runner.invoke(app, ["simulate", "--synthetic", "math-16k", "--prompts", "4", "--policy", "sync",
                            "--cluster", path, "--out", "run"])
    assert (r.exit_code, r.stderr) == (2, f"error: {path}: binary data (a NUL byte at byte 30)\n")


def test_dev_zero_as_a_trace_ends_with_one_error(tmp_path):
    # an endless stream of NUL bytes: read to its end, it never ended
    assert os.path.exists("/dev/zero")
    r = subprocess.run([sys.executable, "-c", "from sortedrl.console import main; main()", "simulate",
                        "--trace", "/dev/zero", "--policy", "sync", "--out", str(tmp_path / "run")],
                       capture_output=True, text=True, timeout=300)
    assert (r.returncode, r.stdout, r.stderr) == (
        2, "", "error: /dev/zero: binary data (a NUL byte at byte 0), not text\n")
    assert not (tmp_path / "run").exists()


def test_a_piped_parquet_trace_is_still_read_whole(tmp_path):
    # Parquet holds NUL bytes: a pipe's bytes that start with its magic number are all read
    from sortedrl import streams
    from sortedrl.traces.io import read_trace, write_trace
    from sortedrl.traces.synth import synthesize

    trace = synthesize("math-16k", prompts=1000, group_size=8, steps=4, seed=0)
    path = tmp_path / "t.parquet"
    write_trace(trace, path)
    assert path.stat().st_size > streams.HEAD  # (more than the head)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat {path} > {fifo}"])
    try:
        got = read_trace(fifo)
    finally:
        writer.wait(timeout=60)
    assert got.response_len.tolist() == trace.response_len.tolist()
    assert got.prompt_id.tolist() == trace.prompt_id.tolist()


def test_a_piped_input_with_a_nul_byte_is_one_error_not_a_cut_one(tmp_path):
    # a read-once input's head with a NUL byte was handed on alone: the csv module, which takes
    # NUL bytes, read the first 64 KiB of a drift table as the whole of it
    from sortedrl import streams
    from sortedrl.errors import SortedRLError

    fifo, table = tmp_path / "fifo", tmp_path / "drift.csv"
    os.mkfifo(fifo)
    table.write_bytes(b"step,mean\x00\n" + b"".join(b"%d,%d\n" % (i, 1000 + i) for i in range(20000)))
    assert table.stat().st_size > streams.HEAD
    writer = subprocess.Popen(["sh", "-c", f"cat {table} > {fifo}"])
    try:
        with pytest.raises(SortedRLError) as err:
            streams.peek(fifo)
    finally:
        writer.kill()
        writer.wait(timeout=60)
    assert str(err.value) == f"{fifo}: binary data (a NUL byte at byte 9), not text"


@pytest.mark.parametrize("encoding, why", [
    ("utf-16", "UTF-16 text (its byte-order mark), not UTF-8: save it as UTF-8"),
    ("utf-16-le", "UTF-16 text (every other byte NUL), not UTF-8: save it as UTF-8"),
    ("utf-16-be", "UTF-16 text (every other byte NUL), not UTF-8: save it as UTF-8"),
])
def test_a_utf16_trace_is_named_as_such(tmp_path, monkeypatch, encoding, why):
    # Excel's "Unicode Text" and PowerShell's `>` write UTF-16: it said "binary data" or "not UTF-8"
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "t.csv"
    path.write_bytes("prompt_id,sample,prompt_len,response_len\na,0,10,20\n".encode(encoding))
    r = runner.invoke(app, ["simulate", "--trace", str(path), "--policy", "sync", "--out", "run"])
    assert (r.exit_code, r.stderr) == (2, f"error: {path}: {why}\n")


def test_a_piped_utf16_input_is_named_as_such(tmp_path):
    from sortedrl import streams
    from sortedrl.errors import SortedRLError

    fifo, table = tmp_path / "fifo", tmp_path / "t.csv"
    os.mkfifo(fifo)
    table.write_bytes("prompt_id,sample,prompt_len,response_len\na,0,10,20\n".encode("utf-16-le"))
    writer = subprocess.Popen(["sh", "-c", f"cat {table} > {fifo}"])
    try:
        with pytest.raises(SortedRLError) as err:
            streams.peek(fifo)
    finally:
        writer.wait(timeout=60)
    assert str(err.value) == f"{fifo}: UTF-16 text (every other byte NUL), not UTF-8: save it as UTF-8"
