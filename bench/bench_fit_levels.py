"""How well a profile fitted on some concurrency levels predicts the others' durations.

Reads ``vllm bench serve`` files (default: the recorded fixtures, tests/fixtures/vllm_bench),
fits the engine terms on every subset of levels named by ``--fit`` (default: each single level,
each pair, and all of them), and prints, per fit, the predicted duration error of every file and
the terms the fit flags as poorly determined. Prints figures, asserts nothing.

Run: python bench/bench_fit_levels.py [--dir DIR] [--cluster PRESET]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections import defaultdict
from pathlib import Path

from sortedrl.calibration.bench_file import read_bench
from sortedrl.calibration.vllm_bench import fit_bench, predict_duration
from sortedrl.sim.cluster import preset

HERE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_bench"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=HERE)
    ap.add_argument("--cluster", default="h100-llama3.1-8b-1gpu-32seq")
    a = ap.parse_args()
    cl = preset(a.cluster)
    runs = defaultdict(list)  # level -> its repeats
    for p in sorted(a.dir.glob("*.json")):
        r = read_bench(p)
        runs[r.concurrency].append(r)
    levels = sorted(runs)
    for c in levels:
        d = [r.duration_s for r in runs[c]]
        print(f"c{c}: {len(d)} file(s), duration median {statistics.median(d):.3f} s, "
              f"range {min(d):.3f}-{max(d):.3f} s")
    subsets = [(c,) for c in levels] + list(itertools.combinations(levels, 2)) + [tuple(levels)]
    print("fit on        " + "".join(f"{f'c{c}':>9}" for c in levels) + "  poorly determined")
    for sub in subsets:
        fit = fit_bench([r for c in sub for r in runs[c]], cl)
        lat = fit["latency_s"]
        errs = [100 * (statistics.median(predict_duration(r, fit["costs"], cl.max_num_seqs, lat) for r in runs[c])
                       / statistics.median(r.duration_s for r in runs[c]) - 1) for c in levels]
        label = "+".join(f"c{c}" for c in sub)
        print(f"{label:<13}" + "".join(f"{e:>+8.1f}%" for e in errs) + "  " + ", ".join(fit["uncertain"]))


if __name__ == "__main__":
    main()
