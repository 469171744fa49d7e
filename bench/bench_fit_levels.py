"""How well a profile fitted on some concurrency levels predicts the others' durations.

Reads ``vllm bench serve`` files (default: the recorded fixtures, tests/fixtures/vllm_bench),
fits the engine terms on every subset of levels named by ``--fit`` (default: each single level,
each pair, and all of them), and prints, per fit, the predicted duration error of every file and
the terms the fit flags as poorly determined, and how many single-level and two-level fits predict
another level's median within 5% (the issue's acceptance); then the steps read off the tokens (the median gap
between two tokens of a request with no send, completion or admission in it, at the level's full
batch, and with one send in it), and the bound the repeats' noise sets: every file's
duration against ``K + T0 x steps`` (steps read off the tokens' arrival times, one line through
all files), and how many single-level predictions would hold within 5% with that exact per-step
cost ``T0`` and each level's own ``K``. Prints figures, asserts nothing.

``--host-schedule overlapped`` fits and replays in the schedule of a GPU server (the host work
beside the steps; docs/calibration.md), about 10x slower (its host work is searched).

Run: python bench/bench_fit_levels.py [--dir DIR] [--cluster PRESET] [--host-schedule serial|overlapped]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np

from sortedrl.calibration.bench_concurrency import engine_steps
from sortedrl.calibration.bench_file import read_bench
from sortedrl.calibration.vllm_bench import fit_bench, predict_duration
from sortedrl.sim.cluster import preset

HERE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "vllm_bench"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, default=HERE)
    ap.add_argument("--cluster", default="h100-llama3.1-8b-1gpu-32seq")
    ap.add_argument("--host-schedule", default="serial", choices=["serial", "overlapped"])
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
    pairs, twos = [], []
    for sub in subsets:
        fit = fit_bench([r for c in sub for r in runs[c]], cl, schedule=a.host_schedule)
        lat = fit["host_s"]
        errs = [100 * (statistics.median(predict_duration(r, fit["costs"], cl.max_num_seqs, lat, a.host_schedule)
                                         for r in runs[c])
                       / statistics.median(r.duration_s for r in runs[c]) - 1) for c in levels]
        label = "+".join(f"c{c}" for c in sub)
        print(f"{label:<13}" + "".join(f"{e:>+8.1f}%" for e in errs) + "  " + ", ".join(fit["uncertain"]))
        others = [abs(e) for c, e in zip(levels, errs, strict=True) if c not in sub]
        (pairs if len(sub) == 1 else twos if len(sub) == 2 else []).extend(others)
    for name, errs in (("single-level fits", pairs), ("two-level fits", twos)):
        if errs:
            print(f"{name}: {sum(e < 5 for e in errs)} of {len(errs)} predictions of another level within 5% "
                  f"(mean {statistics.mean(errs):.1f}%, worst {max(errs):.1f}%)")
    step_anatomy(runs, levels)
    noise_bound(runs, levels)


def step_anatomy(runs: dict, levels: list[int]) -> None:
    """Median gap between two tokens of a request, by what happened within it: nothing (no send,
    no completion, no admission; at the level's full batch), or one send (the batch one short)."""
    if not all(r.detailed and r.start_times is not None for c in levels for r in runs[c]):
        return
    plain, sent = {}, {}
    for c in levels:
        gaps = [_classified(r) for r in runs[c]]
        plain[c] = 1e3 * float(np.median(np.concatenate([g[(b == c) & (s == 0) & q] for g, b, s, q in gaps])))
        one = np.concatenate([g[(b == c - 1) & (s == 1)] for g, b, s, _ in gaps])
        sent[c] = 1e3 * float(np.median(one)) if len(one) else float("nan")
    slope, icpt = np.polyfit(levels, [plain[c] for c in levels], 1) if len(levels) > 1 else (0.0, plain[levels[0]])
    print("steps without a send, completion or admission, at the full batch: "
          + ", ".join(f"c{c} {plain[c]:.2f} ms" for c in levels)
          + f" (a line through them: {icpt:.3f} ms + {slope:.4f} ms x batch)")
    print("steps with one send, the batch one short: " + ", ".join(f"c{c} {sent[c]:.2f} ms" for c in levels))


def _classified(run) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every gap between two tokens of a request: its length, the requests running through all
    of it, the sends within it, and whether no request completed or was admitted within it."""
    first = run.start_times + run.ttfts
    toks = [f + np.concatenate([[0.0], np.cumsum(g)]) for f, g in zip(first, run.itls, strict=True)]
    last = np.array([t[-1] for t in toks])
    a = np.concatenate([t[:-1] for t in toks])[:, None]
    b = np.concatenate([t[1:] for t in toks])[:, None]
    eps = 1e-4  # the tokens of one step reach the client within about this
    running = ((first <= a + eps) & (last >= b - eps)).sum(axis=1)
    sends = ((run.start_times > a) & (run.start_times <= b)).sum(axis=1)
    quiet = ~(((last > a + eps) & (last < b - eps)) | ((first > a + eps) & (first < b - eps))).any(axis=1)
    return (b - a)[:, 0], running, sends, quiet


def noise_bound(runs: dict, levels: list[int]) -> None:
    files = [(r.duration_s, engine_steps(r)) for c in levels for r in runs[c]]
    if any(s is None for _, s in files):
        why = ("per-request latencies (--save-detailed)" if not all(r.detailed for c in levels for r in runs[c])
               else "every file's steps read off its tokens (some files' tokens came in merged chunks where "
                    "the count needs them one a chunk)")
        print(f"noise bound: needs {why}")
        return
    (k_all, t0), *_ = np.linalg.lstsq(np.array([[1.0, s] for _, s in files]), np.array([d for d, _ in files]),
                                       rcond=None)
    med = {c: statistics.median(r.duration_s for r in runs[c]) for c in levels}
    steps = {c: statistics.median(engine_steps(r) for r in runs[c]) for c in levels}
    off = ", ".join(f"c{c} {100 * (med[c] - k_all - t0 * steps[c]) / med[c]:+.1f}%" for c in levels)
    errs = [100 * ((med[a] - t0 * steps[a] + t0 * steps[b]) / med[b] - 1) for a in levels for b in levels if a != b]
    print(f"line through all files: duration = {k_all:.3f} s + {1e3 * t0:.3f} ms x steps; level medians off it: {off}")
    print(f"noise bound: with that per-step cost and each level's own constant, {sum(abs(e) < 5 for e in errs)} "
          f"of {len(errs)} single-level pairs within 5% (mean {statistics.mean(abs(e) for e in errs):.1f}%)")


if __name__ == "__main__":
    main()
