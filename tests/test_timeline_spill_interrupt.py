"""A Ctrl-C while a spilled timeline's fields are freed is not swallowed (an audit of output
safety, helper outsafe).

``SpilledColumns`` kept its fields in a ``weakref.WeakValueDictionary``, whose callback (Python
code) runs each time a field is freed: constantly while the summary and the ``.npz`` are
written. A Ctrl-C is handled in whatever Python code runs next, and one raised in a weakref
callback is printed as "Exception ignored" and dropped: about 1 run in 30 interrupted near its
end exited 0 and replaced its outputs. Plain references without a callback run no code when a
field is freed.

Run: pytest tests/test_timeline_spill_interrupt.py
"""

from __future__ import annotations

import sys
import weakref

from sortedrl import timeline as timeline_mod
from sortedrl.policies.registry import make_policy
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize
from tests.conftest import tiny_cluster


def test_freeing_a_spilled_field_runs_no_python_code(tmp_path, monkeypatch):
    """A Ctrl-C is handled in whatever Python code runs next; in a weakref callback it is printed
    as "Exception ignored" and dropped, and the run went on to replace its outputs. So freeing a
    field may run none (the profiler sees every Python call, a callback's included)."""
    monkeypatch.setattr(timeline_mod, "COMPACT_ROWS", 16)
    monkeypatch.setattr(timeline_mod, "_CHECK_EVERY", 3)
    tr = synthesize("math-16k", prompts=12, group_size=4, steps=3, seed=3)
    spill = tmp_path / "spill"
    spill.mkdir()
    tl = simulate(tr, make_policy("partial", [], tr), tiny_cluster(engines=2, max_num_seqs=8, kv=40_000),
                  seed=1, spill_dir=spill).timeline
    assert tl._spill.records.get("span")  # (spilled)
    cols = tl.columns("span")
    t, engine = cols["t"], cols["engine"]
    assert all(isinstance(r, weakref.ref) and r.__callback__ is None for r in cols._held.values())
    calls: list[str] = []
    before = sys.getprofile()
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        del t, engine
    finally:
        sys.setprofile(before)
    assert calls == []
    assert len(cols["t"]) == tl.count("span")  # asked again: read again
    assert set(cols._held) <= set(cols) and all(r.__callback__ is None for r in cols._held.values())


