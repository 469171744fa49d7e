"""Runner overhead: tokens/s of bare vLLM against our runner's rollout of the same prompts.

Both generate the same prompts with the same per-request seeds on the same tiny model and engine
settings, so they sample identical tokens; the difference is our controller, policy, backend
bookkeeping and the timeline streamed to disk (flushed every step), as in ``sortedrl run``. The
window ends when the rollout has finished and the first update would start. Each is warmed up first, then measured ``--repeats`` times,
alternating; the medians are printed. Prints figures, asserts nothing.

Run: python bench/engine_overhead.py [--model DIR] [--prompts 64] [--group-size 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import zlib
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def bare(engine, prompts, max_tokens, seed_of) -> tuple[int, float]:
    from vllm import SamplingParams, TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        engine.add_request(f"b{i}-{t0}", TokensPrompt(prompt_token_ids=p), SamplingParams(
            max_tokens=max_tokens, temperature=1.0, top_p=1.0, seed=seed_of(i), logprobs=0,
            output_kind=RequestOutputKind.CUMULATIVE))
    tokens = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                tokens += len(out.outputs[0].token_ids)
    return tokens, time.perf_counter() - t0


def ours(vengine, prompts, grade, n, max_tokens, seed) -> tuple[int, float]:
    from types import SimpleNamespace

    from sortedrl.policies.controller import Controller
    from sortedrl.policies.registry import make_policy
    from sortedrl.realrun.backend import RealBackend
    from sortedrl.realrun.run import Appender, _ids
    from sortedrl.timeline import Timeline

    class NoTrain:  # the rollout is what is measured; the update is stubbed out of the window
        def update(self, batch, adv, version):
            return {}

        def state_dict(self):
            return {}

    groups = SimpleNamespace(prompts_per_step=len(prompts) // n, num_groups=len(prompts) // n,
                             meta=SimpleNamespace(group_size=n, max_response_len=max_tokens))
    tl = Timeline({})
    log = Appender(Path(tempfile.mkdtemp()) / "timeline.jsonl")  # the run's crash-safe log, too
    tl.sink = log
    backend = RealBackend(vengine, NoTrain(), prompts, grade, n, max_tokens, 1.0,
                          vengine.max_num_seqs, tl, seed=seed)
    backend.flush = log.flush
    backend._sync = lambda version: backend.ctl.sync_done()
    policy = make_policy("sync", [], groups)
    ctl = Controller(policy, _ids(len(prompts) // n), [len(p) for p in prompts], n, backend, tl)
    t0 = time.perf_counter()
    backend.on_update = lambda m, s, train: ts.append(time.perf_counter())
    ts: list[float] = []
    ctl.run()
    log.close()
    tokens = sum(s[6] for s in tl.spans)
    return tokens, ts[0] - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="model dir (default: build one)")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from sortedrl.realrun.engine import VllmEngine
    from sortedrl.realrun.model import init_model, load_tokenizer
    from sortedrl.realrun.run import grader
    from sortedrl.realrun.task import SortTask

    model = args.model or str(init_model(tempfile.mkdtemp() + "/tiny", warmup_steps=300))
    tok = load_tokenizer(model)
    n = args.group_size
    problems = SortTask().problems(args.prompts, 0)
    prompts = [tok(p.prompt)["input_ids"] for p in problems for _ in range(n)]
    grade = grader(SortTask(), problems, tok, n, words=True)
    max_len = args.max_tokens + max(map(len, prompts)) + 1
    vengine = VllmEngine(model, args.max_num_seqs, max_len, seed=0)
    vengine.max_num_seqs = args.max_num_seqs
    raw = VllmEngine(model, args.max_num_seqs, max_len, seed=0).engine
    seed = 0
    seed_of = lambda i: zlib.crc32(f"{seed}:{i}.0.1".encode())  # noqa: E731  (our rids: i.attempt.segment)
    bare(raw, prompts, args.max_tokens, seed_of)  # warm-up
    ours(vengine, prompts, grade, n, args.max_tokens, seed)
    b, o = [], []
    for _ in range(args.repeats):
        tb, sb = bare(raw, prompts, args.max_tokens, seed_of)
        to, so = ours(vengine, prompts, grade, n, args.max_tokens, seed)
        b.append(tb / sb)
        o.append(to / so)
        print(f"bare {tb} tok in {sb:.3f} s = {tb / sb:,.0f} tok/s | ours {to} tok in {so:.3f} s = "
              f"{to / so:,.0f} tok/s", flush=True)
    mb, mo = statistics.median(b), statistics.median(o)
    print(f"median: bare {mb:,.0f} tok/s, ours {mo:,.0f} tok/s, overhead {100 * (1 - mo / mb):.1f}%")


if __name__ == "__main__":
    main()
