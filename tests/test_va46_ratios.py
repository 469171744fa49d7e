"""Ratios documented as 0-1 and computed as ``1 - x`` stay in [0, 1], and no table prints -0.0.

A tester read ``-0.0`` in ``validate --wide`` and ``"sim_bubble_ratio": -4.440892098500626e-16``
in validate.json: a step whose slots were all busy, its bubble computed as ``1 - busy / (E·Q ×
rollout)`` with float error in both sums. Every such ratio (``sortedrl/metrics.py``'s
``bubble_ratio`` and ``gpu_idle_ratio``, the tool ratios, ``validate``'s per-step bubble) is now
clamped where it is computed (:func:`sortedrl.metrics.unit_ratio`).

Run: pytest tests/test_va46_ratios.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sortedrl.metrics import span_table, summarize, union_length, unit_ratio
from sortedrl.tables import PERCENT
from sortedrl.timeline import Timeline
from sortedrl.validate import step_table

FIX = Path(__file__).resolve().parent / "fixtures"


def positive(x: float) -> bool:
    return math.copysign(1.0, x) == 1.0


def test_unit_ratio_clamps_the_float_error_and_keeps_the_rest():
    assert unit_ratio(-4.440892098500626e-16) == 0.0 and positive(unit_ratio(-4.440892098500626e-16))
    assert unit_ratio(-0.0) == 0.0 and positive(unit_ratio(-0.0))
    assert unit_ratio(1.0000000000000002) == 1.0
    assert (unit_ratio(0.0), unit_ratio(0.25), unit_ratio(1.0)) == (0.0, 0.25, 1.0)


def busy_timeline(tmp_path: Path) -> Timeline:
    """One engine of one slot, busy through the whole rollout: spans 0.1-0.2 and 0.2-1.4 s,
    whose durations sum to a hair more than their union (0.1 + 1.2 in floats)."""
    meta = json.loads((FIX / "run-sync" / "timeline.jsonl").read_text().splitlines()[0])
    meta = {k: v for k, v in meta.items() if k != "run"} | {"max_num_seqs": 1, "samples_total": 2,
                                                              "group_size": 2}
    records = [meta,
               {"kind": "admit", "t": 0.1, "engine": 0, "samples": [0]},
               {"kind": "span", "t": 0.1, "t_end": 0.2, "engine": 0, "sample": 0, "attempt": 0,
                "version": 0, "tokens": 2, "end": "finish"},
               {"kind": "admit", "t": 0.2, "engine": 0, "samples": [1]},
               {"kind": "span", "t": 0.2, "t_end": 1.4, "engine": 0, "sample": 1, "attempt": 0,
                "version": 0, "tokens": 9, "end": "finish"},
               {"kind": "train", "t": 1.4, "t_end": 1.5, "version": 0, "samples": [0, 1], "tokens": 20}]
    path = tmp_path / "timeline.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return Timeline.read_jsonl(path)


def test_a_fully_busy_step_has_bubble_0_not_minus_ulps(tmp_path):
    tl = busy_timeline(tmp_path)
    sp = span_table(tl)
    unclamped = 1.0 - float(np.sum(sp["t1"] - sp["t0"])) / union_length(sp["t0"], sp["t1"])
    assert unclamped == -2.220446049250313e-16  # (what validate.json held before)
    (step,) = step_table(tl)
    assert step["bubble_ratio"] == 0.0 and positive(step["bubble_ratio"])
    assert format(100 * step["bubble_ratio"], PERCENT) == "0.0"  # validate's `bubble %` cell
    s = summarize(tl)
    assert (s["bubble_ratio"], s["gpu_idle_ratio"]) == (0.0, 0.066667)
    assert positive(s["bubble_ratio"])
