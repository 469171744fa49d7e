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
    runs = {r.concurrency: r for r in (read_bench(p) for p in sorted(a.dir.glob("*.json")))}
    levels = sorted(runs)
    subsets = [(c,) for c in levels] + list(itertools.combinations(levels, 2)) + [tuple(levels)]
    print("fit on        " + "".join(f"{f'c{c}':>9}" for c in levels) + "  poorly determined")
    for sub in subsets:
        fit = fit_bench([runs[c] for c in sub], cl)
        errs = [100 * (predict_duration(runs[c], fit["costs"], cl.max_num_seqs) / runs[c].duration_s - 1)
                for c in levels]
        label = "+".join(f"c{c}" for c in sub)
        print(f"{label:<13}" + "".join(f"{e:>+8.1f}%" for e in errs) + "  " + ", ".join(fit["uncertain"]))


if __name__ == "__main__":
    main()
