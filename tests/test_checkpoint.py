"""Real-run checkpoints hold data, never code: the tagged JSON codec and every built-in policy's
state round-trip exactly, and a policy whose state is not plain data gets one clear error.
(The kill-and-resume test in test_realrun.py runs the whole path with vLLM.)"""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sortedrl.errors import ConfigError
from sortedrl.policies.base import SampleState
from sortedrl.policies.registry import make_policy
from sortedrl.realrun.checkpoint import decode, encode, policy_state, restore_policy
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.text(max_size=5)
    | st.floats(allow_nan=False) | st.sampled_from(list(SampleState)),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
    | st.dictionaries(st.integers(0, 9) | st.text(max_size=3), inner, max_size=3)
    | st.lists(inner, max_size=3).map(deque) | st.sets(st.integers(0, 99), max_size=4),
    max_leaves=20)


@given(plain)
def test_plain_data_round_trips_through_json(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_arrays_bytearrays_and_enums_keep_their_types():
    value = {"a": np.array([3, 1], dtype=np.int32), "b": bytearray(b"\x00\x01"),
             "s": [SampleState.ADMITTED, SampleState.WAITING]}
    back = decode(json.loads(json.dumps(encode(value))))
    assert back["a"].dtype == np.int32 and back["a"].tolist() == [3, 1]
    assert back["b"] == bytearray(b"\x00\x01")
    assert back["s"] == [SampleState.ADMITTED, SampleState.WAITING]
    assert type(back["s"][0]) is SampleState


POLICIES = [("sync", []), ("sortedrl", []), ("sortedrl", ["mode=partial"]), ("partial", []),
            ("tail_batch", []), ("oracle_sorted", ["predictor=history"])]


def _comparable(obj: object) -> dict:
    return {k: (vars(v) if hasattr(v, "__dict__") and k not in ("params", "ctx") else v)
            for k, v in vars(obj).items() if k not in ("params", "ctx")}


@pytest.mark.parametrize("name, sets", POLICIES)
def test_every_policy_state_round_trips_mid_run(name, sets):
    trace = make_trace([5, 9, 2, 14, 3, 7, 11, 4] * 4, group_size=4)
    policy = make_policy(name, sets, trace)
    simulate(trace, policy, tiny_cluster(max_num_seqs=4))
    saved = json.loads(json.dumps(policy_state(policy)))
    fresh = make_policy(name, sets, trace)
    restore_policy(fresh, saved, "ckpt")
    assert _comparable(fresh) == _comparable(policy)


def test_a_policy_holding_code_cannot_be_checkpointed():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    policy = make_policy("sync", [], trace)
    policy.hook = lambda: None
    with pytest.raises(ConfigError, match=r"cannot checkpoint the policy: policy sync.hook: a "
                                          r"function is not plain data"):
        policy_state(policy)


def test_checkpoint_knobs_must_match_the_run():
    trace = make_trace([5, 9, 2, 14], group_size=2)
    saved = json.loads(json.dumps(policy_state(make_policy("sync", ["minibatches=2"], trace))))
    with pytest.raises(ConfigError, match="the checkpoint's policy knobs"):
        restore_policy(make_policy("sync", [], trace), saved, "ckpt")
