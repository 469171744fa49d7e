"""The batched reads a policy's helpers use agree with the one-sample reads they replace.

``ClusterView.response_lens``, ``shortest_first`` (on it) and ``LengthPredictor.predict_many``
answer as ``response_len``, a sort by ``(response_len, index)`` and ``predict`` sample by sample
do, errors included; ``complete_groups`` and ``completion_order`` as their loops over the
samples did (kept here as the reference).

Run: pytest tests/test_policy_batched_reads.py
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sortedrl.errors import PolicyError
from sortedrl.policies.base import SampleState
from sortedrl.policies.common import (
    complete_groups,
    completion_order,
    shortest_first,
    stale_among,
    too_stale,
    waiting_in,
    waiting_in_groups,
)
from sortedrl.policies.predictors import HistoryLengths, OracleLengths
from sortedrl.policies.view import ClusterView, PublicState
from tests.test_policy_blame import Engine


def view_of(lengths: list[int]) -> ClusterView:
    """Samples in groups of 2 (lengths of -1: not finished)."""
    n = len(lengths)
    s = PublicState(np.array([f"p{i // 2}" for i in range(n)]), [10] * n, 2, [Engine(0)], "colocated")
    for i, length in enumerate(lengths):
        s.response_len[i] = length
    return ClusterView(s)


@given(st.lists(st.integers(0, 50), min_size=2, max_size=40).filter(lambda x: len(x) % 2 == 0), st.data())
def test_shortest_first_sorts_by_length_then_index(lengths, data):
    view = view_of(lengths)
    samples = data.draw(st.lists(st.integers(0, len(lengths) - 1), unique=True))
    expected = tuple(sorted(samples, key=lambda i: (view.response_len(i), i)))
    assert shortest_first(view, samples) == expected
    assert view.response_lens(samples).tolist() == [view.response_len(i) for i in samples]


def test_response_lens_names_the_first_bad_sample():
    view = view_of([3, 4, -1, 5, -1, 6])
    with pytest.raises(PolicyError, match="sample 2 has not finished: its length is unknown"):
        view.response_lens([0, 2, 4])
    with pytest.raises(IndexError) as many:
        view.response_lens([1, 9, -3])
    with pytest.raises(IndexError) as one:
        view.response_len(9)
    assert str(many.value) == str(one.value)
    assert shortest_first(view, []) == ()


def test_predict_many_is_predict_of_each():
    view = view_of([3, 4, 7, 5])
    oracle = OracleLengths([30, 40, 70, 50])
    assert oracle.predict_many(view, [2, 0, 3]) == [70.0, 30.0, 50.0]
    assert oracle.predict_many(view, [2, 0, 3]) == [oracle.predict(view, i) for i in (2, 0, 3)]
    history = HistoryLengths(default=12.5)
    history.observe(view, (0,))
    assert history.predict_many(view, [1, 2]) == [3.0, 3.0]  # prompt p0's last length; the mean


def complete_groups_loop(view, samples):
    count = {}
    for i in samples:
        g = view.group_of(i)
        count[g] = count.get(g, 0) + 1
    return [g for g, c in count.items() if c == view.group_size]


def completion_order_loop(view, samples):
    count, out = {}, []
    for i in samples:
        g = view.group_of(i)
        c = count[g] = count.get(g, 0) + 1
        if c == view.group_size:
            out.append(g)
    return out


@given(st.lists(st.integers(0, 23), max_size=60))
def test_group_completion_as_the_loops_count_it(samples):
    """Any sample list, repeats included (a group counted past its size completes once)."""
    view = view_of([1] * 24)
    assert complete_groups(view, samples) == complete_groups_loop(view, samples)
    assert completion_order(view, samples) == completion_order_loop(view, samples)


def test_group_completion_names_a_negative_sample():
    view = view_of([1] * 4)
    for helper in (complete_groups, completion_order):
        with pytest.raises(IndexError) as batched:
            helper(view, [0, 1, -2, -1])
        with pytest.raises(IndexError) as one:
            view.group_of(-2)
        assert str(batched.value) == str(one.value)


@given(st.lists(st.sampled_from(list(SampleState)), min_size=12, max_size=12),
       st.lists(st.integers(0, 5), max_size=8))
def test_waiting_in_groups_is_waiting_in_of_each(states, groups):
    view = view_of([-1] * 12)
    for i, state in enumerate(states):
        view._s.state[i] = state
    assert waiting_in_groups(view, groups) == [i for g in groups for i in waiting_in(view, g)]
    assert view.states(range(12)).tolist() == [view.state(i) for i in range(12)]


def test_batched_state_reads_name_the_first_bad_id():
    view = view_of([-1] * 4)
    with pytest.raises(IndexError) as batched:
        waiting_in_groups(view, [0, 7, 1])
    with pytest.raises(IndexError) as one:
        view.group_samples(7)
    assert str(batched.value) == str(one.value)
    with pytest.raises(IndexError) as batched:
        view.states([2, 4])
    with pytest.raises(IndexError) as one:
        view.state(4)
    assert str(batched.value) == str(one.value)


@given(st.lists(st.integers(-1, 6), min_size=12, max_size=12), st.integers(0, 6), st.integers(0, 3),
       st.lists(st.integers(0, 11), max_size=12))
def test_stale_among_is_too_stale_of_each(oldest, version, bound, samples):
    view = view_of([-1] * 12)
    for i, v in enumerate(oldest):
        view._s.oldest[i] = v
    view._s.version = version
    assert stale_among(view, samples, bound) == [i for i in samples if too_stale(view, i, bound)]
    assert view.oldest_versions(range(12)).tolist() == [-1 if view.oldest_version(i) is None
                                                        else view.oldest_version(i) for i in range(12)]


def test_oldest_versions_names_the_first_bad_id():
    view = view_of([-1] * 4)
    with pytest.raises(IndexError) as batched:
        view.oldest_versions([1, 9, -2])
    with pytest.raises(IndexError) as one:
        view.oldest_version(9)
    assert str(batched.value) == str(one.value)
