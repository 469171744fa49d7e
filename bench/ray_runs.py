"""Wall time and tokens/s of real runs: one in-process engine (sync) against Ray actors.

Runs the same prompts (same task, steps, prompts, group size, seed) three ways and prints, for
each, the wall time of the whole command (start-up included), the run's makespan (the clock the
summary reports, from the first admission), generated tokens and ``tokens_per_s`` (useful tokens
per makespan second, docs/metrics.md):
- ``sync``, 1 engine, in-process (colocated);
- ``sortedrl``, 2 engine actors, colocated;
- ``async``, 2 engine actors + a trainer actor, disaggregated.

On this shared two-core machine, three actor processes compete for two cores, so this measures
the machinery's overheads more than any parallel speed-up. Prints figures; asserts nothing.

Run: PYTHONPATH=. OMP_NUM_THREADS=1 python bench/ray_runs.py [--model DIR] [--steps 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = [("sync, 1 engine in-process", ["--policy", "sync"]),
         ("sortedrl, 2 actors colocated", ["--policy", "sortedrl", "--engines", "2"]),
         ("async, 2 actors disaggregated", ["--policy", "async", "--engines", "2",
                                            "--placement", "disaggregated"])]


def cli(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "sortedrl.cli", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return done.stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=64)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ray-bench-"))
    model = args.model or str(work / "tiny")
    if not args.model:
        cli("model", "init", "--out", model)
    print(f"{'run':32} {'wall s':>8} {'makespan s':>11} {'generated':>10} {'tokens/s':>9} {'stale max':>9}")
    for name, extra in CASES:
        out = work / name.split(",")[0]
        t0 = time.perf_counter()
        s = json.loads(cli("run", "--model", model, "--steps", str(args.steps), "--prompts", str(args.prompts),
                           "--max-tokens", str(args.max_tokens), "--out", str(out), "--json", *extra))
        wall = time.perf_counter() - t0
        print(f"{name:32} {wall:8.1f} {s['makespan_s']:11.2f} {s['generated_tokens']:10d} "
              f"{s['tokens_per_s']:9.0f} {s['staleness_max']:9d}")


if __name__ == "__main__":
    main()
