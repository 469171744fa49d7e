"""An output that cannot be written is named as the user gave it. A writer that reported its own
failure (a trace's "cannot write") named the temporary copy the outputs had it build:
`error: /tmp/x/.t.parquet.tmp-wqs_bjfa.parquet: cannot write: ... File too large`. A file-size
limit (`ulimit -f`) makes the write fail part-way; nothing is left behind."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 20_000  # bytes: a few hundred samples' trace does not fit


def _small_files() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.parametrize("name", ["t.jsonl", "t.csv", "t.parquet"])
def test_a_trace_that_cannot_be_written_names_out(tmp_path, name) -> None:
    r = subprocess.run([sys.executable, "-m", "sortedrl", "trace", "synth", "math-16k", "--prompts",
                        "256", "--steps", "2", "--out", name], capture_output=True, text=True,
                       preexec_fn=_small_files, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    # (Parquet's reason is pyarrow's: "Error writing bytes to file. Detail: [errno 27] File too large")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"error: --out {name}: cannot write (") and r.stderr.endswith("File too large)\n")
    assert list(tmp_path.iterdir()) == []
