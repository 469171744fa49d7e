"""Small synthetic measurements for ``calibrate``'s tests, laid out as the real tools write them:
a ``vllm bench serve --save-detailed`` closed loop (:func:`closed_loop`: vLLM's scheduler on a
linear step cost, its client sending the next request as one completes) and verl's W&B history
of the update's parts (:func:`verl_csv`)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app

runner = CliRunner()
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
PRESET = "h100-llama3.1-8b"


def closed_loop(c: int, n: int = 40, max_seqs: int = 256, seed: int = 0) -> dict:
    """A detailed benchmark of ``n`` requests at concurrency ``c`` on a server running at most
    ``max_seqs`` sequences; a step costs 4 ms + 30 us a sequence + 40 ns a KV token + 30 us a
    prompt token admitted."""
    rnd = random.Random(seed)
    ins = [rnd.randint(64, 192) for _ in range(n)]
    outs = [rnd.randint(32, 96) for _ in range(n)]
    t, sent, tokens = 0.0, [0.0] * n, [[] for _ in range(n)]
    waiting, nxt, running, made = list(range(min(c, n))), min(c, n), [], {}
    while running or waiting:
        admitted = []
        while waiting and len(running) < max_seqs:
            i = waiting.pop(0)
            running.append(i)
            made[i] = 0
            admitted.append(i)
        t += (4e-3 + 3e-5 * len(running) + 4e-8 * sum(ins[i] + made[i] for i in running)
              + 3e-5 * sum(ins[i] for i in admitted))
        for i in list(running):
            made[i] += 1
            tokens[i].append(t)
            if made[i] == outs[i]:
                running.remove(i)
                if nxt < n:
                    sent[nxt] = t
                    waiting.append(nxt)
                    nxt += 1
    return {"backend": "vllm", "model_id": LLAMA, "request_rate": "inf", "max_concurrency": c,
            "duration": max(x[-1] for x in tokens) + 1e-4, "completed": n, "input_lens": ins,
            "output_lens": outs, "ttfts": [tokens[i][0] - sent[i] for i in range(n)],
            "itls": [[b - a for a, b in zip(x, x[1:], strict=False)] for x in tokens],
            "start_times": [1000.0 + s for s in sent], "errors": [""] * n, "vllm_version": "0.11.0"}


def write(tmp_path: Path, name: str, raw: dict, **changes) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({**raw, **changes}))
    return path


def calibrate(paths: list[Path], out: Path, cluster: str = "h100-llama3.1-8b"):
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", *map(str, paths), "--cluster", cluster,
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    return r


def verl_csv(path: Path, ref_steps: range | list[int], steps: int = 100) -> Path:
    """verl's W&B history: update = 4 + 4e-5 s a token, split 70/20/10 over update_actor,
    old_log_prob and ref; ``timing_s/ref`` only on ``ref_steps``."""
    rows = ["step,timing_s/update_actor,timing_s/old_log_prob,timing_s/ref,perf/total_num_tokens"]
    for s in range(1, steps + 1):
        tokens = 1_000_000 + 20_000 * s
        u = 4 + 4e-5 * tokens
        rows.append(f"{s},{0.7 * u!r},{0.2 * u!r},{f'{0.1 * u!r}' if s in ref_steps else ''},{tokens}")
    path.write_text("\n".join(rows) + "\n")
    return path
