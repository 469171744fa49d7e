"""Knobs whose 0 means opposite things in two policies say so: ``max_span=0`` is unbounded lag
in ``partial`` (APRIL) and no lag at all in ``sortedrl``'s partial mode. A tune over both with
``max_span=0:3`` read them as the same knob (a tester's report)."""

from __future__ import annotations

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.metrics import summarize
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.synth import synthesize


def _listing(policy: str) -> str:
    r = CliRunner().invoke(app, ["policies", policy], terminal_width=400)
    assert r.exit_code == 0, r.output
    return " ".join(r.stdout.split())


def test_max_span_zero_is_named_as_opposite_in_both_listings():
    assert "(0: none, every paused response is regenerated, unlike partial's max_span=0, which is unbounded)" \
        in _listing("sortedrl")
    assert "(0: unbounded, as in APRIL; sortedrl's max_span=0 is the opposite, no lag)" \
        in _listing("partial")


def test_max_span_zero_means_what_the_listings_say():
    trace = synthesize("math-16k", prompts=64, group_size=8, steps=4, seed=0)
    cluster = preset("h100-llama3.1-8b-2gpu")

    def staleness_max(name: str, *sets: str) -> int:
        policy = make_policy(name, list(sets), trace)
        return summarize(simulate(trace, policy, cluster).timeline)["staleness_max"]

    assert staleness_max("sortedrl", "mode=partial", "max_span=0") == 0
    assert staleness_max("partial", "max_span=0") > 0
