"""SortedRL's throughput experiment, reproduced in the simulator (paper.md §1.6, §2 rows 2-3).

Setting: logic-8k lengths, 512 prompts x 1 response per step, 8k cap, 8 x H100 with 512 decode
slots (64 per engine), eight steps of data. ``sync`` trains once per step. ``sortedrl`` loads the
whole run as one prompt group, keeps 2x the slots admitted and harvests every 256 finished
samples (max_span 2 in partial mode). The paper's claims, and what we assert:

- ``sync`` leaves ~74% of slot-time idle (±3 points);
- ``sortedrl`` cuts the bubble by more than half in both modes (paper: to 5.81% / 3.37%; we
  do not reach those: 14.0% / 20.1%, docs/reproductions.md §1 says why);
- partial mode beats on-policy mode on useful tokens/s (paper: +39.5% vs +7.6% over sync);
  the bubbles are in the reverse of the paper's order (partial's is the larger here,
  docs/reproductions.md §1), and the test pins that reversal rather than the paper's order;
- on-policy mode trains every token at staleness 0.

Run: pytest tests/test_paper_reproduction.py
"""

from __future__ import annotations

import pytest

from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize

CLUSTER = preset("h100-llama3.1-8b-64seq")
SORTEDRL = ["group_prompts=4096", "update_batch=256", "oversubscribe=2", "max_span=2"]


def run(trace, name, sets=()):
    return simulate(trace, make_policy(name, list(sets), trace), CLUSTER).summary


@pytest.mark.parametrize("seed", [0, 1])
def test_sortedrl_halves_the_sync_bubble_and_partial_is_fastest_but_the_bubble_order_is_reversed(seed):
    trace = synthesize("logic-8k", prompts=512, group_size=1, steps=8, seed=seed)
    sync = run(trace, "sync")
    on = run(trace, "sortedrl", SORTEDRL + ["mode=on_policy"])
    part = run(trace, "sortedrl", SORTEDRL + ["mode=partial"])

    assert sync["bubble_ratio"] == pytest.approx(0.74, abs=0.03)
    assert on["bubble_ratio"] < sync["bubble_ratio"] / 2
    assert part["bubble_ratio"] < sync["bubble_ratio"] / 2
    assert part["tokens_per_s"] > on["tokens_per_s"]
    assert part["tokens_per_s"] > sync["tokens_per_s"]
    # Not the paper's order: its on-policy bubble (5.81%) is above its partial one (3.37%); here
    # partial's is the larger (on-policy 14.0% / 15.3%, partial 20.1% / 20.0% at seeds 0 / 1).
    # docs/reproductions.md §1 says this ordering is not reproduced.
    assert on["bubble_ratio"] < part["bubble_ratio"]
    assert on["staleness_max"] == 0 and on["staleness_mean"] == 0.0
    assert part["staleness_max"] <= 2
    assert on["wasted_tokens"] > part["wasted_tokens"]  # on-policy regenerates the unfinished
    for s in (sync, on, part):
        assert s["samples_trained"] == s["samples_total"] == 4096
