"""Helpers shared by the CLI tests of traces and outputs: a CliRunner call that must succeed,
small trace files written by hand or synthesised, an unknown preset's error, and a SIGINT that raises an exception of the
test's own (so pytest's Ctrl-C handling stays out of it)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.traces import synthesize, write_trace

runner = CliRunner()
# what an unknown --cluster preset's error says after the part of the name it could not read
PRESET_GRAMMAR = ("a preset is GPU-MODEL with GPU one of a100-80g, h100, h800, h20, h200, b200, mi300x and "
                  "MODEL one of qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-8b, qwen3-14b, qwen3-32b, qwen2.5-7b, "
                  "qwen2.5-32b, llama3.1-8b, llama3.1-70b, qwen3-30b-a3b, deepseek-v3 (optional suffixes "
                  "-tpN, -Ngpu, -Nseq and -disagg)")


def invoke_ok(args: list[str], **kw) -> str:
    """``sortedrl ARGS`` in process; it must exit 0. Its stdout."""
    r = runner.invoke(app, args, **kw)
    assert r.exit_code == 0 and r.exception is None, r.output[-2000:]
    return r.stdout


def import_error(tmp_path: Path, args: list) -> str:
    """The one ``error:`` line of a ``trace import`` refused with exit 2, having written no
    ``tmp_path / "t.jsonl"``."""
    out = tmp_path / "t.jsonl"
    r = runner.invoke(app, ["trace", "import", *map(str, args), "--out", str(out)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert not out.exists()
    return lines[0]


def four_sample_trace(path: Path, source: str) -> Path:
    """Four samples, two prompts of two, two at the 16,384 cap."""
    rows = [{"sortedrl_trace": 1, "max_response_len": 16384, "group_size": 2, "source": source}]
    for i, (p, r) in enumerate([(10, 16384), (12, 1200), (20, 345), (30, 16384)]):
        rows.append({"prompt_id": f"p{i // 2}", "sample": i % 2, "prompt_len": p,
                     "response_len": r, "truncated": r == 16384})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def fittable_trace(path: Path) -> Path:
    """A trace ``trace fit`` takes: 16 prompts of 2 over 2 steps."""
    write_trace(synthesize("math-16k", prompts=8, group_size=2, steps=2, seed=0), path)
    return path


class Interrupted(Exception):
    """What :func:`sigint_raises`'s SIGINT handler raises."""


@pytest.fixture
def sigint_raises():
    def handler(signum, frame):
        raise Interrupted

    before = signal.signal(signal.SIGINT, handler)
    yield
    signal.signal(signal.SIGINT, before)


def default_stop_signals() -> None:
    """A child's ``preexec_fn``: the stop signals as a terminal's process has them (a suite run in
    the background, as a non-interactive shell starts it, has Ctrl-C ignored, and a child inherits
    that)."""
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)
