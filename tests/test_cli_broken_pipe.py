"""A reader that stops reading (``sortedrl clusters | head -1``) ends a command quietly: nothing
on stderr and exit code 141 (128 + SIGPIPE, what a shell reports for ``cat`` or ``grep`` there),
for every command, ``--help`` and ``--version`` included; the files a command writes are written
in full first. Before, a command printed ``error: output: Broken pipe`` and exited 2 or 120 (the
interpreter's last flush failing too); those whose output rich prints, and ``--help``, exited 1.
A broken pipe that is not stdout's or stderr's is still an error, and any other failed write to
stdout (``> /dev/full``) is one ``error:`` line and exit 2, ``--help`` and ``--version`` included.

Each test but the last two starts a real ``sortedrl`` process with a real pipe (or ``/dev/full``)
for its stdout.
Which write meets the closed pipe must not depend on timing: either the reader is gone before
the process starts (``| true``), or the pipe holds one page and the output is several, so the
process is still writing when the reader, having read its first line, closes it (``| head -1``).

Run: pytest tests/test_cli_broken_pipe.py
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sortedrl import broken_pipe

ROOT = Path(__file__).resolve().parents[1]
READER_GONE = 141


def environment() -> dict:
    """This checkout's sortedrl, with stdout buffered as a user's is: under PYTHONUNBUFFERED,
    Python's text stdout drops what a partial write to a pipe left unwritten, without an error
    (the process is then not writing when the reader leaves)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("PYTHONUNBUFFERED", None)
    return env


def start(args: list[str], cwd: Path, stdout: int, stderr: int = subprocess.PIPE) -> subprocess.Popen:
    env = environment()
    return subprocess.Popen([sys.executable, "-m", "sortedrl", *args], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr)


def reader_gone_first(args: list[str], cwd: Path) -> tuple[int, str]:
    """``sortedrl ARGS | true``: the pipe's reader is closed before the process starts. Returns
    the exit code and stderr."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = start(args, cwd, write)
    finally:
        os.close(write)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err.decode()


def test_a_reader_that_leaves_after_one_line_ends_clusters_quietly(tmp_path):
    """``sortedrl clusters --json | head -1``, the reader leaving while the output is written."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, 4096)  # (one page: the least a pipe holds)
    held = fcntl.fcntl(write, fcntl.F_GETPIPE_SZ)
    try:
        proc = start(["clusters", "--json"], tmp_path, write)
    finally:
        os.close(write)
    line = b""
    while not line.endswith(b"\n") and (byte := os.read(read, 1)):
        line += byte
    os.close(read)
    _, err = proc.communicate(timeout=300)
    assert line == b"[\n"
    assert (proc.returncode, err.decode()) == (READER_GONE, "")
    # (the output is longer than the pipe holds, so the process was still writing it)
    everything = subprocess.run([sys.executable, "-m", "sortedrl", "clusters", "--json"],
                                cwd=tmp_path, env=environment(), capture_output=True,
                                check=True).stdout
    assert len(everything) > 2 * held


@pytest.mark.parametrize("args", [
    ["clusters"],
    ["policies"],  # (printed by rich, which exited 1 on its own)
    ["--version"],  # (printed while the options are parsed, before any command)
    ["--help"],
    ["trace", "--help"],
    ["export", "verl", "sync"],
    ["export", "areal", "async", "--group-size", "8", "--json"],
])
def test_a_reader_gone_before_the_output_ends_the_command_quietly(tmp_path, args):
    assert reader_gone_first(args, tmp_path) == (READER_GONE, "")


def test_an_export_of_a_tune_trial_to_a_reader_gone_is_quiet(tmp_path):
    tune = {"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
            "trials": [{"id": 0, "policy": "sync", "params": {"minibatches": 2}, "feasible": True}]}
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    assert reader_gone_first(["export", "verl", "tune.json"], tmp_path) == (READER_GONE, "")
    assert reader_gone_first(["export", "verl", "tune.json", "--json"], tmp_path) == (READER_GONE, "")


ONE_GPU_NOTE = (
    "note: on h100-llama3.1-8b-1gpu the trainer's weights, gradients and Adam state need 128 GB"
    ' a GPU (sharded over 1 trainer GPU of 80 GB), so the FP32 master weights and Adam state li'
    "ve in host memory and move in and out every update (+3.0 s an update, as verl's optimizer "
    'offload); more GPUs keep them on the GPUs')


def test_a_run_whose_reader_is_gone_writes_its_outputs_in_full(tmp_path):
    """The results are printed after the outputs are in place: ``simulate --out run | true``
    leaves the whole run directory and no scratch beside it."""
    args = ["simulate", "--synthetic", "math-16k", "--prompts", "16", "--steps", "2",
            "--policy", "sync", "--cluster", "h100-llama3.1-8b-1gpu", "--out", "run"]
    assert reader_gone_first(args, tmp_path) == (READER_GONE, ONE_GPU_NOTE + "\n")  # (stderr stays)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        ".sortedrl-run", "summary.json", "timeline.npz"]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["policy"] == "sync"


def test_an_error_line_whose_reader_is_gone_is_quiet(tmp_path):
    """``sortedrl clusters --bogus 2>&1 | true``: the error line has nowhere to go (before: a
    traceback to the closed pipe, exit 1)."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = start(["clusters", "--bogus"], tmp_path, subprocess.PIPE, stderr=write)
    finally:
        os.close(write)
    out, _ = proc.communicate(timeout=300)
    assert (proc.returncode, out) == (READER_GONE, b"")


@pytest.mark.parametrize("args", [
    ["--version"],  # (printed while the options are parsed: a 100-line traceback, exit 1)
    ["--help"],
    ["simulate", "--help"],
    ["trace", "--help"],
    ["clusters"],  # (a command: already so)
    ["policies"],
])
def test_a_full_disk_on_stdout_is_one_error_line_and_exit_2(tmp_path, args):
    """``sortedrl --version > /dev/full``: every write fails with ENOSPC. As a command reports
    it: one line, exit 2, and nothing more at the interpreter's last flush."""
    with open("/dev/full", "wb") as full:
        proc = start(args, tmp_path, full.fileno())
    _, err = proc.communicate(timeout=300)
    assert (proc.returncode, err.decode()) == (2, "error: output: No space left on device\n")


def test_stdout_and_stderr_on_a_full_disk_exit_2_quietly(tmp_path):
    with open("/dev/full", "wb") as full:
        proc = start(["--version"], tmp_path, full.fileno(), stderr=full.fileno())
    proc.communicate(timeout=300)
    assert proc.returncode == 2


@contextlib.contextmanager
def on_pipes():
    """sys.stdout and sys.stderr on real pipes whose readers are open; yields their readers.
    (Set in the test itself: pytest puts its own capture back between a fixture and the test.)"""
    ends = [os.pipe(), os.pipe()]
    streams = [open(write, "w") for _, write in ends]
    before = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = streams
    try:
        yield [read for read, _ in ends]
    finally:
        sys.stdout, sys.stderr = before
        for stream in streams:
            stream.close()
        for read, _ in ends:
            with contextlib.suppress(OSError):  # (closed by the test)
                os.close(read)


def test_a_broken_pipe_that_is_not_stdouts_is_an_error():
    """The readers of stdout and stderr are still there: the error goes on to be reported."""
    with on_pipes():
        assert broken_pipe.gone_streams() == []
        broken_pipe.exit_if_reader_gone(BrokenPipeError(32, "Broken pipe"))  # (returns)


def test_stdout_whose_reader_left_is_pointed_at_devnull_and_the_exit_is_141():
    with on_pipes() as readers:
        os.close(readers[0])
        assert broken_pipe.gone_streams() == [sys.stdout]
        broken_pipe.exit_if_reader_gone(OSError(5, "Input/output error"))  # (not a broken pipe)
        with pytest.raises(SystemExit) as e:
            broken_pipe.exit_if_reader_gone(BrokenPipeError(32, "Broken pipe"))
        assert e.value.code == READER_GONE
        assert os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
        sys.stdout.write("the interpreter's last flush\n")
        sys.stdout.flush()  # (nowhere to fail now)
