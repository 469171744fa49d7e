"""``sortedrl calibrate``: measure the real engine and trainer, fit the cost model.

Measurements, each repeated ``repeats`` times:
- decode steps: B requests of a fixed prompt length with ``ignore_eos``, so that every step after
  the first decodes exactly B sequences holding a known number of KV tokens (a grid of batch
  sizes x contexts);
- prefills: the first step of a batch of new requests (a grid of prompt lengths x counts);
- updates: the runner's own update path (a GRPO step plus the per-update checkpoint write) on
  synthetic batches of several sizes;
- weight syncs: the runner's push of the trainer's weights into vLLM.
The fit is in :mod:`sortedrl.sim.profile`. Measurements go through the same engine adapter the
runner uses, so its per-step host overhead is part of what is fitted.
"""

from __future__ import annotations

import platform
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from sortedrl.realrun.model import check_model_dir
from sortedrl.sim.profile import FORMAT, decode_time, fit_decode, fit_prefill, fit_train

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
    from sortedrl.realrun.trainer import GRPOTrainer, Rollout

    model = check_model_dir(model_dir)
    tick = progress or (lambda n, note="": None)
    rng = random.Random(seed)
    max_len = max(CONTEXTS) + DECODE_STEPS + 8
    eng = VllmEngine(str(model), max_num_seqs=max_num_seqs, max_model_len=max(max_len, 128), seed=seed)
    vocab = eng.engine.model_config.get_vocab_size()
    clock = time.perf_counter
    decode, prefill = {"b": [], "s": [], "t": []}, {"n": [], "T": [], "P": [], "t": []}

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
                # step 0 prefills and yields token 1; step j decodes with prompt + j tokens each
                for j, t in enumerate(times[1:DECODE_STEPS], start=1):
                    decode["b"].append(b)
                    decode["s"].append(b * (ctx + j))
                    decode["t"].append(t)
                tick(1, f"decode B={b} ctx={ctx}")
        for n in (x for x in PREFILL_COUNTS if x <= max_num_seqs):
            for length in PREFILL_LENS:
                t = batch_run(n, length, 1)[0]
                if not keep:
                    continue
                prefill["n"].append(n)
                prefill["T"].append(n * length)
                prefill["P"].append(n * length * (length + 1) // 2)
                prefill["t"].append(t)
                tick(1, f"prefill {n} x {length}")

    trainer = GRPOTrainer(str(model), seed=seed)
    train = {"tokens": [], "t": []}
    sync_times = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for size in (4, 16, 64):
                for resp in (8, 32):
                    batch = [Rollout(i, i // 4, [1] + [rng.randrange(4, vocab) for _ in range(8)],
                                     [rng.randrange(4, vocab) for _ in range(resp)], [-1.0] * resp,
                                     [0] * resp, float(i % 2)) for i in range(size)]
                    t0 = clock()
                    trainer.update(batch, [1.0 if i % 2 else -1.0 for i in range(size)], 0)
                    trainer.save(str(Path(tmp) / "trainer.pt"))  # the runner checkpoints every update
                    torch.save(trainer.state_dict(), Path(tmp) / "engine.pt")
                    train["t"].append(clock() - t0)
                    train["tokens"].append(size * (9 + resp))
                    tick(1, f"update {size} x {resp}")
            for _ in range(5):
                t0 = clock()
                eng.load_weights(trainer.state_dict(), 1)
                _ = {k: v.clone() for k, v in trainer.state_dict().items()}  # the runner keeps a copy
                sync_times.append(clock() - t0)
            tick(1, "sync")
    kv_tokens = int(eng.engine.vllm_config.cache_config.num_gpu_blocks or 0) * int(
        eng.engine.vllm_config.cache_config.block_size)
    eng.close()

    d = fit_decode(decode["b"], decode["s"], decode["t"])
    dv = {k: v["value"] for k, v in d["terms"].items()}
    p = fit_prefill(prefill["T"], prefill["P"], prefill["t"],
                    decode_time(dv, prefill["n"], prefill["T"]))
    tr = fit_train(train["tokens"], train["t"])
    sync_s = sorted(sync_times)[len(sync_times) // 2]
    costs = {**dv, **{k: v["value"] for k, v in p["terms"].items()},
             **{k: v["value"] for k, v in tr["terms"].items()}, "sync_s": sync_s,
             "prefill_in_step": True}
    return {
        "sortedrl_profile": FORMAT,
        "device": f"{platform.machine()} {platform.processor() or 'cpu'} ({torch.get_num_threads()} torch threads)",
        "model": str(model),
        "engine": "vllm-cpu" if not torch.cuda.is_available() else "vllm",
        "engine_version": vllm.__version__,
        "torch_version": torch.__version__,
        "engine_config": {"max_num_seqs": max_num_seqs, "kv_budget_tokens": kv_tokens or 10**7},
        "costs": costs,
        "fit": {"decode": d, "prefill": p, "train": tr,
                "sync": {"median": sync_s, "samples": len(sync_times),
                         "spread": max(sync_times) - min(sync_times)}},
        "grid": {"batches": list(BATCHES), "contexts": list(CONTEXTS), "decode_steps": DECODE_STEPS,
                 "prefill_lens": list(PREFILL_LENS), "prefill_counts": list(PREFILL_COUNTS),
                 "repeats": repeats},
    }
