"""A real run's standing orders survive ``--resume``: a policy that gives its ``Keep`` and
``WakeOn`` once, in ``on_start`` (docs/policies.md's ``Harvest``), had none after a resume
(which does not call ``on_start``), and the resumed run stalled. The orders are written into the
checkpoint as data, ``Keep``'s queue by the name of the policy's attribute that holds it.

Run: pytest tests/test_checkpoint_orders.py
"""

from __future__ import annotations

import json
from collections import deque

import pytest

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Keep, WakeOn
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.orders import StandingOrders
from sortedrl.policies.registry import make_policy
from sortedrl.realrun.checkpoint import decode, encode, policy_state, restore_policy
from sortedrl.realrun.checkpoint_orders import orders_state, restore_orders
from tests.conftest import make_trace

TRACE = make_trace([5, 9, 2, 14], group_size=2)


def _harvest_like():
    """A policy holding the SampleQueue of its Keep, as Harvest's on_start makes it."""
    policy = make_policy("sync", [], TRACE)
    policy.queue = SampleQueue()
    policy.queue.add_fresh(16)
    for _ in range(6):
        policy.queue.popleft()
    orders = StandingOrders()
    orders.keep, orders.budget, orders.keep_hook = Keep(policy.queue, 4, 10, 2), 7, "on_start"
    orders.wake, orders.unheard = WakeOn(finished=2, drained=True), [3, 5]
    return policy, orders


def _through_json(value):
    """As ``state.json`` holds it: encoded, written, read, decoded."""
    return decode(json.loads(json.dumps(encode(value))))


def test_the_orders_of_a_policy_that_gave_them_in_on_start_come_back_on_its_restored_queue():
    policy, orders = _harvest_like()
    saved_policy, saved_orders = _through_json(policy_state(policy)), _through_json(orders_state(orders, policy))
    fresh = make_policy("sync", [], TRACE)  # rebuilt for --resume: __init__ only
    restore_policy(fresh, saved_policy, "ckpt")
    back = StandingOrders()
    restore_orders(back, fresh, saved_orders, "ckpt")
    assert back.keep == Keep(fresh.queue, 4, 10, 2) and back.keep.queue is fresh.queue  # the policy's own
    assert len(fresh.queue) == 10 and fresh.queue.popleft() == 6
    assert (back.budget, back.keep_hook, back.wake, back.unheard) == (
        7, "on_start", WakeOn(finished=2, drained=True), [3, 5])


def test_a_keep_on_a_queue_no_attribute_holds_is_left_out_and_the_rest_kept():
    policy, orders = _harvest_like()
    orders.keep = Keep(deque([1, 2]), 2)  # a local deque: nothing to put it back on
    saved = _through_json(orders_state(orders, policy))
    assert saved["keep"] is None
    back = StandingOrders()
    restore_orders(back, policy, saved, "ckpt")
    assert back.keep is None and back.wake == WakeOn(finished=2, drained=True)


@pytest.mark.parametrize("change, error", [
    ({"keep": ["nope", 4, None, None]}, "field 'orders.keep': the policy has no queue 'nope' (a SampleQueue "
                                        "or deque) to keep admitted from"),
    ({"keep": ["params", 4, None, None]}, "field 'orders.keep': the policy has no queue 'params' (a "
                                          "SampleQueue or deque) to keep admitted from"),
    ({"keep": ["queue", -1, None, None]}, "field 'orders.keep': window, budget and max_span must be integers "
                                          ">= 0 (budget and max_span may be null)"),
    ({"keep": "queue"}, "field 'orders.keep': expected [queue attribute, window, budget, max_span]"),
    ({"wake": [1, 0, 0, "yes", False]}, "field 'orders.wake': drained must be true or false"),
    ({"wake": [1]}, "field 'orders.wake': expected the 5 fields of a WakeOn (finished, groups, members, "
                    "drained, any_group)"),
    ({"budget": 1.5}, "field 'orders.budget': expected an integer >= 0 or null"),
    ({"unheard": [1, -2]}, "field 'orders.unheard': expected a list of sample ids"),
])
def test_orders_not_as_a_run_writes_them_are_one_error_and_nothing_is_set(change, error):
    policy, orders = _harvest_like()
    saved = {**_through_json(orders_state(orders, policy)), **change}
    back = StandingOrders()
    with pytest.raises(ConfigError) as e:
        restore_orders(back, policy, saved, "ckpt")
    assert str(e.value) == f"ckpt: {error}"
    assert (back.keep, back.wake, back.budget, back.unheard) == (None, None, None, [])
