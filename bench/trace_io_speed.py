"""Trace I/O speed: synthesise, write and read 1M samples in each format. Prints figures.

Wall seconds, and CPU seconds of this process beside them (the machine is shared: CPU time is
the steadier figure). Reading takes the fast path (pyarrow's parsers, ``traces/_fast.py``) for
these clean files; ``--slow`` times the standard-library reference readers instead.

Run: python bench/trace_io_speed.py [--samples 1000000]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from sortedrl.traces import _text
from sortedrl.traces.io import read_trace, write_trace
from sortedrl.traces.synth import synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    ap.add_argument("--slow", action="store_true", help="time the standard-library readers")
    args = ap.parse_args()
    n = args.samples
    read = _slow_read if args.slow else read_trace
    t0 = time.perf_counter()
    trace = synthesize("math-16k", prompts=max(1, n // 8), group_size=8)
    print(f"synthesize {len(trace):,} samples: {time.perf_counter() - t0:.2f} s")
    formats = ["jsonl", "csv"] + (["parquet"] if importlib.util.find_spec("pyarrow") else [])
    with tempfile.TemporaryDirectory() as d:
        for ext in formats:
            path = Path(d) / f"trace.{ext}"
            t0, c0 = time.perf_counter(), time.process_time()
            write_trace(trace, path)
            t1, c1 = time.perf_counter(), time.process_time()
            back = read(path)
            t2, c2 = time.perf_counter(), time.process_time()
            assert back == trace
            print(f"{ext:>8}: write {t1 - t0:.2f} s ({c1 - c0:.2f} s CPU), "
                  f"read {t2 - t1:.2f} s ({c2 - c1:.2f} s CPU), {path.stat().st_size / 1e6:.0f} MB")


def _slow_read(path: Path):
    if path.suffix == ".parquet":
        return read_trace(path)
    reader = _text.read_jsonl if path.suffix == ".jsonl" else _text.read_csv
    with open(path, encoding="utf-8-sig", newline="") as f:
        return reader(path, f)


if __name__ == "__main__":
    main()
