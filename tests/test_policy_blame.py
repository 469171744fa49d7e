"""Who an error blames: the user's line, the hook, the standing order, the view's ids.

A policy author's tester found errors that pointed elsewhere than at the mistake:
- a hook calling a library that raises (``statistics.mean([])``, ``np.array_split(x, 0)``)
  named only the library's file; now the user's line first, the library's after it, and the
  hook: ``(in on_start at mypol.py:7, raised in .../statistics.py:432)``;
- a bad id in a ``Keep`` queue was ``illegal action: admit of sample 0, which is trained``,
  naming no hook (none returned that admission): now the Keep order and the hook that gave it;
  an action's or order's field of the wrong type (``Admit(set(...))``, ``Keep(window=16.5)``)
  names the hook that returned it;
- a run stalled under a ``WakeOn`` that can no longer wake said only ``return Train(...)``,
  though ``on_finished`` does, and was never called: now the ``WakeOn`` is named; a policy that
  admits only in ``on_idle`` is told that hook is not called at the start;
- the view's getters read a negative id from the end (``state(-1)``: the last sample's); now it
  is the IndexError an id past the end gives, one message for both.

Run: pytest tests/test_policy_blame.py
"""

from __future__ import annotations

import dataclasses
import os
import re
import statistics
import sys
import sysconfig
import traceback
from collections import deque

import numpy as np
import pytest

from sortedrl.errors import PolicyError
from sortedrl.policies.base import Admit, Keep, Policy, Train, WakeOn
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.registry import run_context
from sortedrl.policies.view import ClusterView, PublicState
from sortedrl.sim.run import simulate
from sortedrl.user_code import users_frame
from tests.conftest import make_trace, tiny_cluster
from tests.test_user_code import TRACE, at, one_error_line


def raised_at(call) -> str:
    """``file:line`` where ``call()`` raises (a library's frame, as the error line names it)."""
    try:
        call()
    except Exception as e:
        frame = traceback.extract_tb(e.__traceback__)[-1]
        return f"{frame.filename}:{frame.lineno}"
    raise AssertionError("it did not raise")


def run(policy_cls: type[Policy], lengths=(3, 5, 4, 6), disagg=False, **kw):
    """``policy_cls`` on a one-engine cluster (``disagg``: and a trainer GPU of its own)."""
    trace = make_trace(list(lengths))
    cluster = tiny_cluster(**kw)
    if disagg:
        cluster = dataclasses.replace(cluster, placement="disaggregated", gpus=2, train_gpus=1)
    return simulate(trace, policy_cls(ctx=run_context(trace)), cluster)


def stall(policy_cls: type[Policy], **kw) -> str:
    """What a stalled run says after ``stalled at t=...s: `` (the time is the simulator's)."""
    with pytest.raises(PolicyError) as e:
        run(policy_cls, **kw)
    head = rf"policy {policy_cls.name} stalled at t=[0-9.]+s: "
    assert re.match(head, str(e.value)), str(e.value)
    return re.sub(head, "", str(e.value))


# -- 1. a library raising inside a hook ------------------------------------------------------

LIBRARY_CALLS = """import statistics
import numpy as np
from sortedrl.policies.base import Policy
import {helper}


class Stat(Policy):
    name = "stat"

    def on_start(self, view):
        return [statistics.mean([])]


class Np(Policy):
    name = "np"

    def on_start(self, view):
        np.array_split([1, 2], 0)
        return []


class Helper(Policy):
    name = "helper"

    def on_start(self, view):
        return {helper}.average([])
"""
HELPER = """import statistics


def average(xs):
    return statistics.mean(xs)
"""


@pytest.mark.parametrize("policy, line, message, call", [
    ("Stat", 11, "StatisticsError: mean requires at least one data point", lambda: statistics.mean([])),
    ("Np", 18, "ValueError: number sections must be larger than 0.", lambda: np.array_split([1, 2], 0)),
])
def test_a_library_raising_in_a_hook_names_the_users_line_then_the_librarys(
        tmp_path, monkeypatch, policy, line, message, call):
    """It named only the library's file (statistics.py:432, numpy's _shape_base_impl.py:789)."""
    module = f"blame_lib_{policy.lower()}"  # (a module imported once stays imported)
    (tmp_path / f"{module}.py").write_text(LIBRARY_CALLS.format(helper=f"{module}_helper"))
    (tmp_path / f"{module}_helper.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", f"{module}:{policy}") == (
        f"error: policy {policy.lower()} raised {message} (in on_start at {tmp_path / module}.py:"
        f"{line}, raised in {raised_at(call)})")


def test_a_helper_module_of_the_users_is_the_line_named(tmp_path, monkeypatch):
    """The innermost frame of the user's own is the helper module's, not the policy's call."""
    (tmp_path / "blame_lib_helper.py").write_text(LIBRARY_CALLS.format(helper="blame_helper"))
    (tmp_path / "blame_helper.py").write_text(HELPER)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "blame_lib_helper:Helper") == (
        "error: policy helper raised StatisticsError: mean requires at least one data point (in "
        f"on_start at {tmp_path / 'blame_helper.py'}:5, raised in {raised_at(lambda: statistics.mean([]))})")


def test_a_policy_installed_in_site_packages_is_found_by_its_file():
    """A frame in site-packages is a library's, unless it is the policy's own file (``home``)."""
    home = os.path.join(sysconfig.get_paths()["purelib"], "installed_policies.py")
    scope: dict = {}
    exec(compile("def hook():\n    raise KeyError(3)\n", home, "exec"), scope)
    try:
        scope["hook"]()
    except KeyError as e:
        assert users_frame(e) == f"{__file__}:{sys._getframe().f_lineno - 2}"  # (this test's line)
        assert users_frame(e, home) == f"{home}:2"


# -- 2. a Keep order's admissions, and fields of the wrong type --------------------------------


class FromQueue(Policy):
    """Keeps two admitted from ``items`` (a deque), waking at two finished."""

    name = "from_queue"
    items: tuple = ()
    span: int | None = None

    def on_start(self, view):
        return [Keep(deque(self.items), window=2, max_span=self.span), WakeOn(finished=2, drained=True)]

    def on_finished(self, view, samples, engine):
        return [Train(view.finished())] if not view.busy and view.finished_count else []


@pytest.mark.parametrize("items, span, what", [
    ((0, 1, 2, 3, 0), None, "admit of sample 0, which is trained"),  # a trained id, again
    ((0, 1, -1), None, "admit of unknown sample -1"),
    ((0, 10**7), 1, "admit of unknown sample 10000000"),  # (max_span read its version: a traceback)
    ((0, "a"), 1, "admit of unknown sample 'a'"),
])
def test_a_bad_id_in_a_keep_queue_names_the_order_and_the_hook_that_gave_it(items, span, what):
    """It said ``illegal action: admit of ...``: no hook, and the policy returned no Admit."""
    policy = type("Queued", (FromQueue,), {"items": items, "span": span})
    with pytest.raises(PolicyError) as e:
        run(policy, disagg=True)
    assert str(e.value) == ("policy from_queue: illegal action from the Keep order's queue, given "
                            f"by on_start{at(FromQueue, 'on_start')}: {what}")


class SetAdmit(Policy):
    name = "set_admit"

    def on_start(self, view):
        return [Admit({0, 1})]


class FloatWindow(Policy):
    name = "float_window"

    def on_start(self, view):
        queue = SampleQueue()
        queue.add_fresh(view.num_groups * view.group_size)
        return [Keep(queue, window=16.5)]

    def on_finished(self, view, samples, engine):
        return []


@pytest.mark.parametrize("policy, line", [
    (SetAdmit, "policy set_admit: Admit.samples must be a tuple or list of sample ids (or a 1-D "
               "integer NumPy array), got set"),
    (FloatWindow, "policy float_window: Keep.window must be an int, got float 16.5"),
])
def test_a_field_of_the_wrong_type_names_the_hook_that_returned_it(policy, line):
    with pytest.raises(PolicyError) as e:
        run(policy)
    assert str(e.value) == f"{line} (from on_start {at(policy, 'on_start')[2:]}"


# -- 3. a stall under a WakeOn that cannot wake, and on_idle at the start -----------------------


class Waits(Policy):
    """Keeps every sample admitted; trains whatever is finished when woken."""

    name = "waits"
    wake = WakeOn()

    def on_start(self, view):
        queue = SampleQueue()
        queue.add_fresh(view.num_groups * view.group_size)
        return [Keep(queue, window=4), self.wake]

    def on_finished(self, view, samples, engine):
        return [Train(view.finished())] if not view.busy else []


def test_a_stall_names_a_wakeon_waiting_for_more_finishes_than_can_come():
    """It said ``return Train(...) for the finished ones``, which on_finished does: it was never
    called (the tester's WakeOn(finished=10**6) on a 512-sample run)."""
    policy = type("TooMany", (Waits,), {"wake": WakeOn(finished=10**6)})
    assert stall(policy) == (
        "4 finished samples, nothing in flight: return Train(...) for the finished ones; the "
        "policy's WakeOn(finished=1000000) waits for more finishes than can come: on_finished "
        "has not heard the last 4 finished samples")


def test_a_stall_names_a_wakeon_that_never_wakes():
    assert stall(Waits) == (
        "4 finished samples, nothing in flight: return Train(...) for the finished ones; the "
        "policy's WakeOn() never calls on_finished: on_finished has not heard the last 4 "
        "finished samples")


def test_a_stall_names_a_wakeon_that_holds_once_the_trainer_is_done():
    """Woken at 2 finished, it trained them; the last 2 finished during that update, when a
    WakeOn waits, and no finish came after it to check it again."""
    policy = type("Busy", (Waits,), {"wake": WakeOn(finished=2, drained=True)})
    assert stall(policy, disagg=True) == (
        "2 finished, 2 trained samples, nothing in flight: return Train(...) for the finished "
        "ones; the policy's WakeOn(finished=2, drained=True) holds now, but is checked only at a "
        "finish (not while the trainer or a sync is busy), and none is coming: on_finished has "
        "not heard the last 2 finished samples (call it from on_sync_done too)")


class IdleOnly(Policy):
    name = "idle_only"

    def on_start(self, view):
        return []

    def on_idle(self, view, engine):
        return [Admit(tuple(range(view.num_groups * view.group_size)))]


def test_a_stall_before_any_admission_says_on_idle_is_not_called_at_the_start():
    assert stall(IdleOnly) == (
        "4 waiting samples, nothing in flight: Admit the waiting ones (or keep them in a Keep "
        "queue); on_idle is not called at the start (no engine has run out of work yet): admit "
        "the first samples in on_start")


# -- 4. the view's ids ----------------------------------------------------------------------


class Engine:
    """An engine's public half, as the view reads it."""

    def __init__(self, index: int) -> None:
        self.index, self.max_num_seqs, self.version = index, 4, 0

    def running(self) -> tuple[int, ...]:
        return ()

    def queued(self) -> tuple[int, ...]:
        return ()

    def tokens(self, sample: int, now: float) -> int:
        return 0

    def load(self) -> int:
        return 0


def a_view() -> ClusterView:
    """6 samples in 3 groups of 2, on 2 engines; every sample finished, 7 tokens long."""
    s = PublicState(np.array(["p0", "p0", "p1", "p1", "p2", "p2"]), [10] * 6, 2,
                    [Engine(0), Engine(1)], "colocated")
    s.rewarded = True
    for i in range(6):
        s.response_len[i] = 7
    return ClusterView(s)


SAMPLE_GETTERS = ("prompt_len", "state", "attempt", "oldest_version", "generated",
                  "response_len", "reward", "engine_of")
GROUP_GETTERS = ("group_samples", "prompt_id", "finished_in")
ENGINE_GETTERS = ("capacity", "engine_version", "running", "queued", "in_tool", "load")


@pytest.mark.parametrize("getter, what, last", [
    *((g, "sample", 5) for g in SAMPLE_GETTERS),
    *((g, "group", 2) for g in GROUP_GETTERS),
    *((g, "engine", 1) for g in ENGINE_GETTERS),
])
@pytest.mark.parametrize("bad", ["negative", "past the end"])
def test_an_id_out_of_range_negative_or_not_is_one_index_error(getter, what, last, bad):
    """A negative id read from the end (``state(-1)``: the last sample's state; ``capacity(-1)``
    the last engine's; ``group_samples(-1)``: ``range(-2, 0)``)."""
    view = a_view()
    getattr(view, getter)(last)  # (the last id is taken)
    i = -1 if bad == "negative" else last + 1
    with pytest.raises(IndexError) as e:
        getattr(view, getter)(i)
    assert str(e.value) == f"no {what} {i}: {what} ids are 0 to {last}"


def test_group_of_refuses_a_negative_sample():
    view = a_view()
    assert view.group_of(5) == 2
    with pytest.raises(IndexError) as e:
        view.group_of(-1)
    assert str(e.value) == "no sample -1: sample ids are 0 to 5"


def test_a_negative_id_in_a_hook_is_one_error_line_naming_the_users_line(tmp_path, monkeypatch):
    (tmp_path / "blame_view.py").write_text(
        "from sortedrl.policies.base import Policy\n\n\nclass Last(Policy):\n    name = 'last'\n\n"
        "    def on_start(self, view):\n        view.state(-1)\n        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import sortedrl.policies.view as view_module

    line = one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "blame_view:Last")
    assert re.fullmatch(re.escape(f"error: policy last raised IndexError: no sample -1: sample ids "
                                  f"are 0 to 511 (in on_start at {tmp_path / 'blame_view.py'}:8, "
                                  f"raised in {view_module.__file__}:") + r"\d+\)", line), line
