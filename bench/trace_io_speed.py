"""Trace I/O speed: synthesise, write and read 1M samples in each format. Prints figures.

Run: python bench/trace_io_speed.py [--samples 1000000]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path

from sortedrl.traces.io import read_trace, write_trace
from sortedrl.traces.synth import synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    n = ap.parse_args().samples
    t0 = time.perf_counter()
    trace = synthesize("math-16k", prompts=max(1, n // 8), group_size=8)
    print(f"synthesize {len(trace):,} samples: {time.perf_counter() - t0:.2f} s")
    formats = ["jsonl", "csv"] + (["parquet"] if importlib.util.find_spec("pyarrow") else [])
    with tempfile.TemporaryDirectory() as d:
        for ext in formats:
            path = Path(d) / f"trace.{ext}"
            t0 = time.perf_counter()
            write_trace(trace, path)
            t1 = time.perf_counter()
            back = read_trace(path)
            t2 = time.perf_counter()
            assert back == trace
            print(f"{ext:>8}: write {t1 - t0:.2f} s, read {t2 - t1:.2f} s, "
                  f"{path.stat().st_size / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
