"""A run frees its own state before its summary, and leaves the caller's heap and GC as they were.

``simulate`` pauses the cyclic GC for the run and then collects the youngest generation, where
every object of the run was born (sim/run.py ``_run_heap``); it used to collect the whole heap,
which cost 54 ms a run in a process that imported torch and made the suite's small runs 7x slower.
"""

from __future__ import annotations

import dataclasses
import gc

import pytest
from conftest import make_trace, tiny_cluster

from sortedrl.policies.controller import Controller
from sortedrl.policies.registry import make_policy
from sortedrl.sim.backend import SimBackend
from sortedrl.sim.run import simulate


def _alive(cls) -> int:
    return sum(type(o) is cls for o in gc.get_objects())  # (isinstance would ask torch objects
    # for their __class__, which warns)


@pytest.mark.parametrize("policy", ["sync", "sortedrl", "async"])
@pytest.mark.parametrize("enabled", [True, False])
def test_a_run_frees_its_state_itself_and_restores_the_gc(policy, enabled):
    """With automatic collection off (so only simulate's own collection can free a cycle), no
    backend or controller of the run is alive once it returns, and the GC is on or off as the
    caller left it; the frozen generation is untouched."""
    trace = make_trace([5, 9, 30, 2, 17, 4, 11, 8] * 4, [3] * 32, group_size=4, max_len=30)
    cluster = tiny_cluster(engines=2, max_num_seqs=4)
    if policy == "async":  # one engine, one trainer GPU
        cluster = dataclasses.replace(cluster, placement="disaggregated", train_gpus=1)
    pol = make_policy(policy, [], trace)
    gc.collect()
    frozen = gc.get_freeze_count()
    (gc.enable if enabled else gc.disable)()
    try:
        result = simulate(trace, pol, cluster)
        assert gc.isenabled() is enabled
        assert (_alive(SimBackend), _alive(Controller)) == (0, 0)
        assert gc.get_freeze_count() == frozen
        assert result.summary["samples_total"] == 32
    finally:
        gc.enable()
