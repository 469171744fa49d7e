"""Write a verl ``rollout_data_dir`` dump whose lengths follow a synthetic trace, for trying the
import -> fit -> forecast -> tune -> export path of the README without a GPU run of one's own.

Each response is ``response_len`` sort-task words, each prompt ``prompt_len`` words, so the tiny
model's word-level tokenizer (``sortedrl model init``) counts them exactly. Prints what it wrote.

Run: python bench/verl_dump_example.py OUT_DIR [--preset math-16k] [--prompts 128] [--steps 1]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sortedrl.traces import synthesize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--preset", default="math-16k")
    ap.add_argument("--prompts", type=int, default=128)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    trace = synthesize(args.preset, prompts=args.prompts, steps=args.steps, seed=args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    digits = [str(d) for d in range(10)]
    by_step: dict[int, list[str]] = {}
    for i in range(len(trace)):
        prompt = "sort " + " ".join(digits[(i // trace.meta.group_size + k) % 10] for k in range(int(trace.prompt_len[i]) - 2))
        prompt += f" = {trace.prompt_id[i]}"  # the prompt id keeps prompts apart
        output = " ".join(digits[k % 10] for k in range(int(trace.response_len[i])))
        step = int(trace.step[i]) + 1  # verl's global_steps start at 1
        by_step.setdefault(step, []).append(json.dumps({
            "input": prompt, "output": output, "gts": "", "score": float(trace.reward[i]),
            "step": step}))
    for step, lines in by_step.items():
        (args.out / f"{step}.jsonl").write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}: {len(trace)} responses over {len(by_step)} step(s), "
          f"cap {trace.meta.max_response_len}")


if __name__ == "__main__":
    main()
