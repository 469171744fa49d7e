"""How steady this host runs the same engine work: the noise floor under `validate`'s targets.

One process builds a vLLM engine on a model (``--model``, e.g. the widened 3.89M model that
``bench/validate_cpu.py`` builds in its ``--out``) and runs the same work ``--rounds`` times (8 prompts of 64 tokens, 150
decode steps each, ``ignore_eos``), each round followed by three probes of the CPU alone: a
pure-Python loop, a matmul that fits in L2 (192 x 1,536 on 8 rows, as one of the model's MLPs)
and a 64 MiB sum (memory bandwidth). For each it prints the median (ms), the relative median
absolute deviation and the spread (max - min over the median), and the VM's steal time over the
whole run (``/proc/stat``). If the engine's spread is far above the probes', the engine's own
time moves with something the probes do not load (a calibration and a run minutes apart cannot
agree more closely than that); prints figures, asserts nothing.

    python bench/engine_jitter.py --model runs/validate-cpu/model [--rounds 20]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402


def steal() -> tuple[int, int]:
    """(steal, total) jiffies of all CPUs since boot."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    return fields[7], sum(fields)


def engine_work(model: str):
    from sortedrl.realrun.engine import VllmEngine

    eng = VllmEngine(model, max_num_seqs=16, max_model_len=600, seed=0, warm_tokens=128)
    vocab = eng.engine.model_config.get_vocab_size()

    def work() -> None:
        rng = random.Random(1)  # the same prompts every round
        for k in range(8):
            prompt = [rng.randrange(4, vocab) for _ in range(64)]
            eng.add(k, f"r{time.perf_counter()}-{k}", prompt, 0, 150, 1.0, rng.randrange(2**31), ignore_eos=True)
        while eng.has_unfinished():
            eng.step(time.perf_counter)

    return work


def probes() -> dict:
    weights = np.random.default_rng(0).random((192, 1536), dtype=np.float32)
    rows = np.random.default_rng(1).random((8, 192), dtype=np.float32)
    big = np.random.default_rng(2).random(64 * 2**20 // 8)

    def loop() -> None:
        s = 0
        for i in range(300_000):
            s += i

    def matmul() -> None:
        for _ in range(600):
            rows @ weights

    def stream() -> None:
        for _ in range(6):
            big.sum()

    return {"python loop": loop, "L2 matmul": matmul, "64 MiB sum": stream}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    jobs = {"engine (150 steps x 8)": engine_work(a.model), **probes()}
    for job in jobs.values():
        job()  # warm-up, not timed
    times: dict[str, list[float]] = {name: [] for name in jobs}
    s0 = steal()
    for _ in range(a.rounds):
        for name, job in jobs.items():
            t0 = time.perf_counter()
            job()
            times[name].append(time.perf_counter() - t0)
    s1 = steal()
    print(f"{a.rounds} rounds, load {os.getloadavg()[0]:.1f}, steal {100 * (s1[0] - s0[0]) / max(1, s1[1] - s0[1]):.2f}% "
          "of the CPU time meanwhile")
    for name, ts in times.items():
        m = statistics.median(ts)
        mad = statistics.median(abs(t - m) for t in ts) / m
        print(f"{name:>24}: median {1e3 * m:8.1f} ms, relative MAD {100 * mad:5.1f}%, "
              f"spread {100 * (max(ts) - min(ts)) / m:5.1f}%")


if __name__ == "__main__":
    main()
