"""Learning: the toy task's reward rises over a short real GRPO run.

Runs ``sortedrl run`` (sync policy) for ``--steps`` steps on a fresh tiny model, then prints the
reward per update, its average over the first and last fifths, and greedy exact-match accuracy
on 256 held-out problems before and after training. Prints figures, asserts nothing.

``--objective decoupled`` trains stale tokens with AReaL's decoupled loss (``sortedrl run
--objective``); ``--set key=value`` passes a policy knob (repeatable). The last line sums the
updates' stale, capped and clipped tokens.

Run: python bench/learning.py [--steps 100] [--prompts 16] [--group-size 8] [--lr 1e-3]
     [--policy sync] [--set key=value ...] [--objective bypass|decoupled] [--is-cap 2]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def accuracy(model, tok, problems) -> float:
    import torch

    right = 0
    with torch.no_grad():
        for p in problems:
            ids = tok(p.prompt, return_tensors="pt")["input_ids"]
            out = model.generate(ids, max_new_tokens=64, do_sample=False,
                                 eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
            body = out[0, ids.shape[1]:].tolist()
            if body and body[-1] == tok.eos_token_id:
                body = body[:-1]
            right += body == tok(p.answer, add_special_tokens=False)["input_ids"]
    return right / len(problems)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-steps", type=int, default=150)
    ap.add_argument("--policy", default="sync")
    ap.add_argument("--set", action="append", default=[], dest="sets")
    ap.add_argument("--objective", default="bypass", choices=("bypass", "decoupled"))
    ap.add_argument("--is-cap", type=float, default=2.0)
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    from sortedrl.realrun.checkpoint import load_tensors
    from sortedrl.realrun.model import init_model, load_tokenizer
    from sortedrl.realrun.run import RunConfig, run_real
    from sortedrl.realrun.task import SortTask

    work = Path(tempfile.mkdtemp())
    model = init_model(work / "tiny", warmup_steps=args.warmup_steps)
    tok = load_tokenizer(str(model))
    held_out = SortTask().problems(256, 12345)
    before = accuracy(AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32), tok, held_out)
    t0 = time.perf_counter()
    run_real(RunConfig(model=str(model), policy=args.policy, out=str(work / "run"), steps=args.steps,
                       prompts=args.prompts, group_size=args.group_size, lr=args.lr,
                       sets=args.sets, objective=args.objective, is_cap=args.is_cap))
    wall = time.perf_counter() - t0
    rows = [json.loads(x) for x in (work / "run" / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward_mean"] for r in rows]
    k = max(1, len(rewards) // 5)
    trained = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    trained.load_state_dict(load_tensors(work / "run" / "checkpoint" / "model.safetensors"))
    after = accuracy(trained, tok, held_out)
    print(f"{args.steps} steps x {args.prompts} prompts x {args.group_size} in {wall:.0f} s")
    print("reward per update:", " ".join(f"{r:.2f}" for r in rewards))
    print(f"mean reward: first {k} updates {sum(rewards[:k]) / k:.3f}, last {k} {sum(rewards[-k:]) / k:.3f}")
    print(f"held-out greedy exact match: before {before:.3f}, after {after:.3f}")
    total = sum(r["tokens"] for r in rows)
    clipped = sum(r["clip_fraction"] * r["tokens"] for r in rows)
    print(f"{args.objective}: trained tokens {total:,}, stale {sum(r['stale_tokens'] for r in rows):,}, "
          f"capped {sum(r['capped_tokens'] for r in rows):,}, clipped {clipped:,.0f}")


if __name__ == "__main__":
    main()
