"""A trace read from a pipe or a FIFO (``<(zcat run.jsonl.gz)``, ``/dev/stdin``, ``mkfifo``)
reads as the same file does: its bytes are read once and every reader parses them
(:mod:`sortedrl.streams`). A pipe read a second time was empty (``error: /dev/fd/63: empty
file``) and a FIFO opened a second time waited for a writer for good, so each command runs in a
subprocess with a timeout: a regression fails instead of hanging the suite.

Run: pytest tests/test_read_once_inputs.py
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sortedrl.traces import synthesize, write_trace

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 120  # a guard against a hang, not a timing: each command takes a few seconds
CLUSTER = ["--policy", "sync", "--cluster", "h100-llama3.1-8b-2gpu"]


def _cli(args: list[str], cwd: Path, stdin: bytes | None = None) -> tuple[int, str, str]:
    """``sortedrl ARGS`` in a subprocess (this checkout's package), with ``stdin`` piped."""
    r = subprocess.run([sys.executable, "-m", "sortedrl.cli", *args], cwd=cwd, input=stdin,
                       capture_output=True, timeout=WAIT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.returncode, r.stdout.decode(), r.stderr.decode()


class _Fifo:
    """A FIFO at ``path`` that a thread fills with ``data`` once, as ``cat f > fifo &`` does."""

    def __init__(self, path: Path, data: bytes) -> None:
        os.mkfifo(path)
        self.path = path
        self.thread = threading.Thread(target=self._write, args=(data,), daemon=True)
        self.thread.start()

    def _write(self, data: bytes) -> None:
        with open(self.path, "wb") as f:  # (waits for a reader)
            f.write(data)

    def close(self) -> None:
        """Let a writer that no reader came for finish (its open returns with this one)."""
        if self.thread.is_alive():
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
            self.thread.join(WAIT_S)
            os.close(fd)


@pytest.fixture
def small(tmp_path: Path) -> Path:
    t = synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=0)
    path = tmp_path / "file" / "t.jsonl"
    path.parent.mkdir()
    write_trace(t, path)
    return path


def _fifo(tmp_path: Path, name: str, data: bytes, request) -> Path:
    (tmp_path / "fifo").mkdir(exist_ok=True)
    fifo = _Fifo(tmp_path / "fifo" / name, data)
    request.addfinalizer(fifo.close)
    return fifo.path


def test_trace_stats_reads_a_fifo_and_stdin_as_the_file(tmp_path, small, request):
    code, want, err = _cli(["trace", "stats", str(small), "--json"], tmp_path)
    assert (code, err) == (0, "")
    fifo = _fifo(tmp_path, "t.jsonl", small.read_bytes(), request)
    assert _cli(["trace", "stats", str(fifo), "--json"], tmp_path) == (0, want, "")
    assert _cli(["trace", "stats", "/dev/stdin", "--json"], tmp_path, small.read_bytes()) == (0, want, "")
    assert json.loads(want)["count"] == 32


def test_a_fifo_without_an_extension_is_sniffed_from_its_bytes(tmp_path, small, request):
    """Parquet and CSV too: the format is told from the bytes already read."""
    for suffix in (".csv", ".parquet"):
        other = small.with_suffix(suffix)
        write_trace(synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=0), other)
        code, want, _ = _cli(["trace", "stats", str(other), "--json"], tmp_path)
        fifo = _fifo(tmp_path, f"noext{suffix[1:]}", other.read_bytes(), request)
        assert code == 0 and _cli(["trace", "stats", str(fifo), "--json"], tmp_path) == (0, want, "")


def test_simulate_reads_its_trace_from_a_fifo(tmp_path, small, request):
    code, _, err = _cli(["simulate", "--trace", str(small), *CLUSTER, "--out", "a"], tmp_path)
    assert code == 0, err
    fifo = _fifo(tmp_path, "t.jsonl", small.read_bytes(), request)
    code, out, err = _cli(["simulate", "--trace", str(fifo), *CLUSTER, "--out", "b"], tmp_path)
    assert code == 0, err
    assert out.endswith("wrote b/summary.json and b/timeline.npz\n")
    assert (json.loads((tmp_path / "b" / "summary.json").read_text())
            == json.loads((tmp_path / "a" / "summary.json").read_text()))


def test_a_piped_trace_rerun_into_its_out_is_the_same_run(tmp_path, small):
    """The marker records a piped trace by the hash of its bytes, not the
    ``/proc/PID/fd/pipe:[N]`` it resolves to, new each run: the second run is a rerun, not
    another run's directory refused."""
    for again in (False, True):
        code, out, err = _cli(["simulate", "--trace", "/dev/stdin", *CLUSTER, "--out", "p"], tmp_path,
                              small.read_bytes())
        assert (code, out.splitlines()[-1]) == (0, "wrote p/summary.json and p/timeline.npz"), err
        assert ("note: replacing the previous `sortedrl simulate` run in p" in err) == again
        assert json.loads((tmp_path / "p" / ".sortedrl-run").read_text())["source"] == _hashed(small)


def _hashed(path: Path) -> str:
    return "pipe sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _shell(line: str, cwd: Path) -> tuple[int, str, str]:
    """``line`` in bash, with ``S`` the sortedrl command (for ``<(cat t.jsonl)``)."""
    r = subprocess.run(["bash", "-c", f"S() {{ {sys.executable} -m sortedrl.cli \"$@\"; }}; {line}"], cwd=cwd,
                       capture_output=True, timeout=WAIT_S, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_a_process_substitution_is_named_by_its_metadata_and_told_apart_by_its_bytes(tmp_path):
    """``--trace <(cat a.jsonl)`` is ``/dev/fd/63``, as is the next one: the run was named
    ``runs/63-sync-...``, its summary's trace "63", and another trace piped in replaced it
    silently. Now it is named by the trace's own source (else ``pipe``), and its marker holds
    the hash of its bytes: another trace is a run with other options, the same one a re-run."""
    for name, seed in (("a", 0), ("b", 1)):
        write_trace(synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=seed), tmp_path / f"{name}.jsonl")
    (tmp_path / "c.jsonl").write_text("".join((tmp_path / "a.jsonl").read_text().splitlines(True)[1:]))
    run = tmp_path / "runs" / "synth_math-16k-sync-h100-llama3.1-8b-2gpu"
    simulate = "S simulate --policy sync --cluster h100-llama3.1-8b-2gpu --trace"
    code, out, err = _shell(f"{simulate} <(cat a.jsonl)", tmp_path)
    assert (code, out.splitlines()[-1]) == (
        0, f"wrote {run.relative_to(tmp_path)}/summary.json and {run.relative_to(tmp_path)}/timeline.npz"), err
    first = (run / "summary.json").read_bytes()
    assert json.loads(first)["trace"] == "synth:math-16k"
    assert json.loads((run / ".sortedrl-run").read_text())["source"] == _hashed(tmp_path / "a.jsonl")
    assert _shell(f"{simulate} <(cat b.jsonl)", tmp_path) == (
        2, "", f"error: {run.relative_to(tmp_path)} holds a `sortedrl simulate` run with other options "
        f"(--trace: {_hashed(tmp_path / 'a.jsonl')[:24]}... then {_hashed(tmp_path / 'b.jsonl')[:24]}...); "
        "give --out DIR to keep both, or --force to replace it\n")
    assert (run / "summary.json").read_bytes() == first
    code, _, err = _shell(f"{simulate} <(cat a.jsonl)", tmp_path)
    assert code == 0 and f"note: replacing the previous `sortedrl simulate` run in {run.relative_to(tmp_path)}\n" in err
    assert (run / "summary.json").read_bytes() == first
    code, _, err = _shell(f"{simulate} <(cat c.jsonl) --json", tmp_path)  # (no metadata line)
    assert code == 0, err
    headless = tmp_path / "runs" / "pipe-sync-h100-llama3.1-8b-2gpu"
    assert json.loads((headless / "summary.json").read_text())["trace"] == "pipe"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == [headless.name, run.name]


def test_trace_fit_from_stdin_and_a_model_from_a_fifo(tmp_path, small, request):
    """``trace fit /dev/stdin``; then ``simulate --trace-model`` and ``forecast --trace-model``
    read the model from a FIFO each (peeked at as a model, then loaded: one read)."""
    code, _, err = _cli(["trace", "fit", str(small), "--out", "a.json", "--json"], tmp_path)
    assert code == 0, err
    code, out, err = _cli(["trace", "fit", "/dev/stdin", "--out", "b.json", "--json"], tmp_path,
                          small.read_bytes())
    assert code == 0, err
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert (a.pop("source"), b.pop("source")) == ("t.jsonl", "stdin")
    assert a == b and json.loads(out)["mu0"] == b["mu0"]
    model = (tmp_path / "a.json").read_bytes()
    fifo = _fifo(tmp_path, "m.json", model, request)
    code, out, err = _cli(["simulate", "--trace-model", str(fifo), "--steps", "2", *CLUSTER,
                           "--out", "s"], tmp_path)
    assert (code, out.splitlines()[-1]) == (0, "wrote s/summary.json and s/timeline.npz"), err
    fifo = _fifo(tmp_path, "m2.json", model, request)
    code, out, err = _cli(["forecast", "--trace-model", str(fifo), "--steps", "2", *CLUSTER,
                           "--json"], tmp_path)
    assert code == 0, err
    assert [r["policy"] for r in json.loads(out)] == ["sync"]


JSON_NOT_CSV = ("JSON, not a CSV: --drift-from reads a W&B \"Export CSV\" of the response length "
                "(a metrics JSONL goes to `calibrate --from-metrics`)\n")


def test_one_read_once_input_given_to_two_options_reaches_both(tmp_path, small, request):
    """``trace fit ff --drift-from ff``: the FIFO was read for the trace, then opened again for
    --drift-from and waited for a writer for good; ``/dev/stdin`` twice read as empty. Both
    readers now get the same bytes: here a trace, which --drift-from refuses as not a CSV."""
    assert _fifo(tmp_path, "t.jsonl", small.read_bytes(), request) == tmp_path / "fifo" / "t.jsonl"
    assert _cli(["trace", "fit", "fifo/t.jsonl", "--drift-from", "fifo/t.jsonl", "--out", "f.json"],
                tmp_path) == (2, "", "error: fifo/t.jsonl: " + JSON_NOT_CSV)
    assert _cli(["trace", "fit", "/dev/stdin", "--drift-from", "/dev/stdin", "--out", "f.json"],
                tmp_path, small.read_bytes()) == (2, "", "error: /dev/stdin: " + JSON_NOT_CSV)
    assert not (tmp_path / "f.json").exists()


def test_a_pipes_bytes_are_kept_for_every_reader(tmp_path):
    from sortedrl import streams

    r, w = os.pipe()
    os.write(w, b"a,b\n1,2\n")
    os.close(w)
    try:
        where = f"/dev/fd/{r}"
        assert [streams.peek(where), streams.take(where), streams.take(where), streams.take(f"/proc/self/fd/{r}")] \
            == [b"a,b\n1,2\n"] * 4
        assert streams.take(tmp_path) is None and streams.take(ROOT / "pyproject.toml") is None
    finally:
        os.close(r)


def test_forecast_reads_a_trace_from_stdin(tmp_path, small):
    code, want, err = _cli(["forecast", "--trace", str(small), *CLUSTER, "--json"], tmp_path)
    assert code == 0 and "a step of t.jsonl has 16 samples" in err
    got = _cli(["forecast", "--trace", "/dev/stdin", *CLUSTER, "--json"], tmp_path, small.read_bytes())
    assert got == (0, want, err.replace("t.jsonl", "stdin"))


def test_an_empty_or_compressed_pipe_is_one_error_line(tmp_path):
    assert _cli(["trace", "stats", "/dev/stdin"], tmp_path, b"") == (
        2, "", "error: /dev/stdin: empty file\n")
    assert _cli(["trace", "stats", "/dev/stdin"], tmp_path, b"\x1f\x8b\x08\x00") == (
        2, "", "error: /dev/stdin: gzip-compressed: decompress it first (a trace is JSONL, CSV or Parquet)\n")


def _sourced(path: Path, source: str) -> Path:
    """``path``, a small trace whose metadata line's ``source`` is ``source``."""
    write_trace(synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=0), path)
    lines = path.read_text().splitlines(True)
    path.write_text(json.dumps({**json.loads(lines[0]), "source": source}) + "\n" + "".join(lines[1:]))
    return path


def test_a_piped_traces_default_run_directory_is_a_bounded_safe_name(tmp_path):
    """A metadata source of 300 characters made ``runs/xxx...-sync-...``: "File name too long";
    a source ``../`` made ``runs/-sync-...`` (read as an option). The trace's part of the name
    is at most 64 characters and never starts with '-' or '.' (a file's stem as a pipe's)."""
    _sourced(tmp_path / "long.jsonl", "x" * 300)
    _sourced(tmp_path / "up.jsonl", "../")
    simulate = "S simulate --policy sync --cluster h100-llama3.1-8b-2gpu --trace"
    for trace, name in (("long", "x" * 64), ("up", "pipe")):
        code, out, err = _shell(f"{simulate} <(cat {trace}.jsonl)", tmp_path)
        run = f"runs/{name}-sync-h100-llama3.1-8b-2gpu"
        assert (code, out.splitlines()[-1]) == (0, f"wrote {run}/summary.json and {run}/timeline.npz"), err
    (tmp_path / "-..jsonl").write_bytes((tmp_path / "up.jsonl").read_bytes())
    code, out, err = _shell(f"{simulate} ./-..jsonl", tmp_path)
    run = "runs/run-sync-h100-llama3.1-8b-2gpu"  # (a stem with no name in it)
    assert (code, out.splitlines()[-1]) == (0, f"wrote {run}/summary.json and {run}/timeline.npz"), err


def test_a_pipe_recorded_by_an_older_sortedrl_is_refused_saying_why(tmp_path):
    """A marker written before a pipe was recorded by its bytes holds ``/dev/fd/63``: the same
    command was refused as a run with other options ("--trace: /dev/fd/63 then pipe
    sha256:..."). It is still refused (the old trace cannot be checked), saying why."""
    write_trace(synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=0), tmp_path / "a.jsonl")
    simulate = "S simulate --policy sync --cluster h100-llama3.1-8b-2gpu --out p --trace"
    assert _shell(f"{simulate} <(cat a.jsonl)", tmp_path)[0] == 0
    marker = tmp_path / "p" / ".sortedrl-run"
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "source": "/dev/fd/63"}))
    assert _shell(f"{simulate} <(cat a.jsonl)", tmp_path) == (
        2, "", "error: p holds a `sortedrl simulate` run whose piped trace was recorded without its content "
        "(by an older sortedrl), so it cannot be told from this one; give --force to replace it, or another "
        "directory to keep both\n")
    code, _, err = _shell(f"{simulate} <(cat a.jsonl) --seed 1", tmp_path)  # (another option too: named)
    assert (code, err.splitlines()[-1]) == (2, (
        "error: p holds a `sortedrl simulate` run with other options (--seed: 0 then 1; --trace: /dev/fd/63 "
        f"then {_hashed(tmp_path / 'a.jsonl')[:24]}...); give another directory to keep both, or --force to replace it"))
    code, _, err = _shell(f"{simulate} <(cat a.jsonl) --force", tmp_path)
    assert code == 0 and "note: replacing p (--force)" in err
