"""Side by side with Vidur 0.0.26 on one offline batch: wall seconds, whole process and loop.

The batch (the issue's): 256-token prompts, output lengths lognormal(median 700, sigma 1.0)
rounded and clipped to [1, 8192], every request at t=0, one engine (H100, Llama-3-8B, TP 1),
batch cap 256; 512 / 4,096 / 20,000 requests, and 1M for us alone (``--ours-only``).

Ours: ``sortedrl simulate --policy sync --cluster h100-llama3.1-8b-1gpu-256seq`` on the batch
written as a one-step trace of group size 1 (whole process: a subprocess, timeline included);
"loop" is the in-process ``simulate()`` call on the same trace (controller, engine, summary).

Vidur: ``python -m vidur.main`` in its own virtual environment (``--vidur-python``; never the
project's), with the vLLM replica scheduler, a static interval generator and a trace length
generator reading the same lengths from a CSV; "loop" is ``Simulator.run()`` timed by a small
driver around it. Vidur 0.0.26 takes its execution-time predictions, or the profiles to fit
them, from the Hugging Face Hub at run time; where the Hub cannot be reached it stops, and this
script says so and prints the figures published in the issue instead, labelled as such.

Prints figures; asserts nothing. Run:
  python bench/vidur_compare.py [--sizes 512,4096,20000] [--ours-only 1000000]
         [--vidur-python /work/vidur-venv/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.io import write_trace
from sortedrl.traces.schema import Trace, TraceMeta

PROMPT = 256
MEDIAN, SIGMA, CAP = 700, 1.0, 8192
CLUSTER = "h100-llama3.1-8b-1gpu-256seq"
# The figures for Vidur 0.0.26 on this batch: requests -> (whole process s, loop s).
PUBLISHED_VIDUR = {512: (10.1, 4.7), 4096: (32.6, 22.9), 20000: (113.9, 99.1)}

VIDUR_DRIVER = """
import json, sys, time
t0 = time.perf_counter()
from vidur.config import SimulationConfig
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds
config = SimulationConfig.create_from_cli_args()
set_seeds(config.seed)
t1 = time.perf_counter()
simulator = Simulator(config)
t2 = time.perf_counter()
simulator.run()
t3 = time.perf_counter()
print("VIDUR_TIMES " + json.dumps({"import_s": t1 - t0, "setup_s": t2 - t1, "loop_s": t3 - t2}))
"""


def batch_lengths(n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    drawn = rng.lognormal(np.log(MEDIAN), SIGMA, n)
    return np.clip(np.rint(drawn), 1, CAP).astype(np.int64)


def batch_trace(n: int) -> Trace:
    lengths = batch_lengths(n)
    cols = {
        "prompt_id": np.array([f"r{i}" for i in range(n)]),
        "sample": np.zeros(n, dtype=np.int64),
        "prompt_len": np.full(n, PROMPT, dtype=np.int64),
        "response_len": lengths,
        "truncated": lengths >= CAP,
        "step": np.zeros(n, dtype=np.int64),
    }
    return Trace.from_columns(cols, TraceMeta(CAP, 1, "vidur-batch"), name=f"batch{n}")


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    return time.perf_counter() - t0, done.returncode, done.stdout + done.stderr


def ours(n: int, tmp: Path) -> tuple[float, float]:
    """(whole process s, in-process simulate() s) for ``n`` requests."""
    trace = batch_trace(n)
    path = tmp / f"batch{n}.parquet"
    write_trace(trace, path)
    cmd = [sys.executable, "-m", "sortedrl.cli", "simulate", "--trace", str(path), "--policy",
           "sync", "--cluster", CLUSTER, "--out", str(tmp / f"run{n}"), "--json"]
    whole, rc, out = timed(cmd)
    if rc != 0:
        raise SystemExit(f"sortedrl simulate failed:\n{out[-2000:]}")
    policy = make_policy("sync", [], trace)
    t0 = time.perf_counter()
    simulate(trace, policy, preset(CLUSTER))
    return whole, time.perf_counter() - t0


def vidur(python: str, n: int, tmp: Path) -> tuple[float, float] | str:
    """(whole process s, loop s), or why Vidur did not run."""
    csv = tmp / f"vidur{n}.csv"
    csv.write_text("num_prefill_tokens,num_decode_tokens\n"
                   + "".join(f"{PROMPT},{d}\n" for d in batch_lengths(n).tolist()))
    cmd = [python, "-c", VIDUR_DRIVER,
           "--replica_config_model_name", "meta-llama/Llama-3-8B", "--replica_config_device", "h100",
           "--replica_config_tensor_parallel_size", "1", "--replica_config_num_pipeline_stages", "1",
           "--cluster_config_num_replicas", "1", "--replica_scheduler_config_type", "vllm",
           "--vllm_scheduler_config_batch_size_cap", "256",
           "--request_generator_config_type", "synthetic",
           "--synthetic_request_generator_config_num_requests", str(n),
           "--length_generator_config_type", "trace",
           "--trace_request_length_generator_config_trace_file", str(csv),
           "--trace_request_length_generator_config_max_tokens", str(PROMPT + CAP),
           "--interval_generator_config_type", "static",
           "--metrics_config_output_dir", str(tmp / f"vidur-out{n}")]
    whole, rc, out = timed(cmd, env={**os.environ, "PYTHONPATH": ""})
    marks = [line for line in out.splitlines() if line.startswith("VIDUR_TIMES ")]
    if rc != 0 or not marks:
        last = [line for line in out.splitlines() if line.strip()][-1:] or ["(no output)"]
        return f"exit {rc}: {last[0][:300]}"
    return whole, json.loads(marks[-1].split(" ", 1)[1])["loop_s"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="512,4096,20000")
    ap.add_argument("--ours-only", default="1000000", help="extra sizes run for us alone")
    ap.add_argument("--vidur-python", default="/work/vidur-venv/bin/python")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",") if x]
    extra = [int(x) for x in args.ours_only.split(",") if x]
    print(f"load {os.getloadavg()[0]:.1f} (1-min average, {os.cpu_count()} CPUs); seconds")
    print(f"{'requests':>9} {'vidur_whole':>12} {'vidur_loop':>11} {'ours_whole':>11} "
          f"{'ours_loop':>10}  vidur source")
    why = None
    with tempfile.TemporaryDirectory(prefix="vidur_compare-") as name:
        tmp = Path(name)
        for n in sizes + extra:
            whole, loop = ours(n, tmp)
            if n in extra:
                print(f"{n:>9} {'-':>12} {'-':>11} {whole:>11.2f} {loop:>10.2f}", flush=True)
                continue
            got = vidur(args.vidur_python, n, tmp) if Path(args.vidur_python).exists() else (
                f"{args.vidur_python} not found")
            if isinstance(got, str):
                why = why or got
                vw, vl = PUBLISHED_VIDUR.get(n, (float("nan"), float("nan")))
                source = "published in the issue (not run here)"
            else:
                (vw, vl), source = got, "measured here"
            print(f"{n:>9} {vw:>12.1f} {vl:>11.1f} {whole:>11.2f} {loop:>10.2f}  {source}",
                  flush=True)
    if why:
        print(f"\nvidur did not run here: {why}")


if __name__ == "__main__":
    main()
