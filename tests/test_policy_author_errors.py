"""A policy author's mistakes, each one ``error:`` line that names the policy and the fix.

From an audit of user policies (``--policy module:Class``): a hook returning one action instead
of a list, ids that are not a sequence, a standing order's field of the wrong type, a ``Params``
that is no dataclass, a misspelled hook, a hook with the wrong signature, an error of the view
raised inside a hook, a knob type ``--set`` cannot parse, a module path with ``.py``, a class
without a name, a user subclass of a built-in, a placement the cluster cannot give, and a policy
that regenerates forever. Before, most were tracebacks, a silent stall, or wrong advice.

Run: pytest tests/test_policy_author_errors.py
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections import deque
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import cluster_for, compare_notes
from sortedrl.errors import ConfigError, PolicyError
from sortedrl.policies import removal
from sortedrl.policies.auto import auto_params
from sortedrl.policies.base import (
    Abort,
    Admit,
    EventKind,
    Filter,
    Keep,
    Policy,
    Sync,
    Train,
    WakeOn,
    hears_turns,
    parse_params,
)
from sortedrl.policies.checks import check_policy_class
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.registry import make_policy, policy_class, run_context
from sortedrl.policies.sync import SyncPolicy
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster
from tests.test_user_code import TRACE, at, one_error_line

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policies.md"


def run(policy_cls: type[Policy], lengths=(3, 5, 4, 6), **kw):
    trace = make_trace(list(lengths), **kw)
    return simulate(trace, policy_cls(ctx=run_context(trace)), tiny_cluster(max_num_seqs=4))


class AdmitAll(Policy):
    """Admit every sample at the start; train them all when an engine is idle."""

    name = "admit_all"
    ids: object = None  # what on_start admits (None: a tuple of every sample)

    def on_start(self, view):
        n = view.num_groups * view.group_size
        return [Admit(tuple(range(n)) if self.ids is None else self.ids(n))]

    def on_idle(self, view, engine):
        if view.admitted or view.busy or not view.finished_count:
            return []
        return [Train(view.finished())]


# -- 1. a hook returns a list of actions ----------------------------------------------------


@pytest.mark.parametrize("returned, shown", [
    (Admit((0,)), "Admit(...)"), (5, "5"), ("admit", "'admit'"), ({"admit": 1}, "{'admit': 1}"),
])
def test_a_hook_that_returns_no_list_is_one_error_line_naming_the_hook(returned, shown):
    class One(AdmitAll):
        name = "one"

        def on_idle(self, view, engine):
            return returned

    with pytest.raises(PolicyError) as e:
        run(One)
    fix = ": wrap it in a list, [Admit(...)]" if isinstance(returned, Admit) else ""
    assert str(e.value) == f"policy one: on_idle{at(One, 'on_idle')} returned {shown}, expected a list of actions{fix}"


def test_an_old_on_event_policy_that_returns_no_list_is_named_by_on_event():
    class Old(Policy):
        name = "old"

        def on_event(self, event, view):
            return Admit((0, 1)) if event.kind == EventKind.STARTED else []

    with pytest.raises(PolicyError) as e:
        run(Old)
    assert str(e.value) == (f"policy old: on_event{at(Old, 'on_event')} returned Admit(...), expected a list of "
                            "actions: wrap it in a list, [Admit(...)]")


def test_none_an_empty_list_and_a_tuple_are_still_allowed():
    class Quiet(AdmitAll):
        name = "quiet"

        def on_sync_done(self, view):
            return None

        def on_update_done(self, view):
            return (Sync(),)

    assert run(Quiet).summary["samples_trained"] == 4


def test_a_wrong_return_through_the_cli_is_one_error_line(tmp_path, monkeypatch):
    (tmp_path / "single_action.py").write_text(
        "from sortedrl.policies.base import Admit, Policy\n"
        "class Single(Policy):\n    name = 'single'\n"
        "    def on_start(self, view):\n        return Admit((0,))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "single_action:Single") == (
        f"error: policy single: on_start (at {tmp_path / 'single_action.py'}:4) returned Admit(...), expected "
        "a list of actions: wrap it in a list, [Admit(...)]")


# -- 2. ids: a tuple, a list, a range, or a 1-D integer NumPy array -----------------------


def test_numpy_ids_are_taken_as_a_tuple_of_ints():
    class Arrays(AdmitAll):
        name = "arrays"
        ids = staticmethod(np.arange)

        def on_idle(self, view, engine):
            if view.admitted or view.busy or not view.finished_count:
                return []
            return [Train(np.array(view.finished(), dtype=np.int32))]

    plain, arrays = run(AdmitAll), run(Arrays)
    assert arrays.timeline.admits == plain.timeline.admits
    assert arrays.timeline.trains == plain.timeline.trains
    assert [type(i) for i in arrays.timeline.trains[0][3]] == [int] * 4


@pytest.mark.parametrize("ids, got", [
    (lambda n: 5, "int"),
    (lambda n: (i for i in range(n)), "generator"),
    (lambda n: {0, 1}, "set"),
    (lambda n: np.arange(n, dtype=float), "a 1-D float64 array"),
    (lambda n: np.arange(n).reshape(2, -1), "a 2-D int64 array"),
])
def test_ids_that_are_no_sequence_are_one_error_line(ids, got):
    class Bad(AdmitAll):
        name = "bad_ids"

    Bad.ids = staticmethod(ids)
    with pytest.raises(PolicyError) as e:
        run(Bad)
    assert str(e.value) == ("policy bad_ids: Admit.samples must be a tuple or list of sample ids "
                            f"(or a 1-D integer NumPy array), got {got} (from on_start"
                            f" {at(AdmitAll, 'on_start')[2:]}")  # (the hook that returned it)


@pytest.mark.parametrize("action, line", [
    (Train(7), "Train.samples must be a tuple or list of sample ids"),
    (Abort("01"), "Abort.samples must be a tuple or list of sample ids"),
    (Filter(3), "Filter.groups must be a tuple or list of group ids"),
    (Admit((0,), engine="0"), "illegal action from on_start{at}: Admit.engine must be an int (an engine's "
                              "index, 0 to 0) or None, got str '0'"),
    (Admit((0,), engine=0.0), "illegal action from on_start{at}: Admit.engine must be an int (an engine's "
                              "index, 0 to 0) or None, got float 0.0"),  # (said "unknown engine 0.0")
    (Admit((0,), engine=1), "illegal action from on_start{at}: admit to unknown engine 1"),
])
def test_each_action_names_its_field(action, line):
    class Wrong(AdmitAll):
        name = "wrong"

        def on_start(self, view):
            return [action]

    with pytest.raises(PolicyError) as e:
        run(Wrong)
    assert str(e.value).startswith(f"policy wrong: {line.replace('{at}', at(Wrong, 'on_start'))}"), str(e.value)


# -- 3. standing orders' fields ---------------------------------------------------------------


class Ordering(Policy):
    """Gives ``orders(queue)`` at the start."""

    name = "ordering"

    def on_start(self, view):
        queue = SampleQueue()
        queue.add_fresh(view.num_groups * view.group_size)
        return self.orders(queue)

    def on_finished(self, view, samples, engine):
        return [Train(view.finished())] if not view.admitted and not view.busy else []


@pytest.mark.parametrize("orders, line", [
    (lambda q: [Keep(q, window="64")], "Keep.window must be an int, got str '64'"),
    (lambda q: [Keep(q, 2, budget=1.5)], "Keep.budget must be an int or None, got float 1.5"),
    (lambda q: [Keep(q, 2, max_span=-1)], "Keep.max_span must be >= 0, got -1"),
    (lambda q: [Keep(q, 2), WakeOn(True)], "WakeOn.finished must be an int, got bool True"),
    (lambda q: [Keep(q, 2), WakeOn(finished=-5)], "WakeOn.finished must be >= 0, got -5"),
    (lambda q: [Keep(q, 2), WakeOn(drained="yes")], "WakeOn.drained must be True or False, got str"),
])
def test_a_standing_order_field_of_the_wrong_type_is_one_error_line(orders, line):
    class Orders(Ordering):
        pass

    Orders.orders = staticmethod(orders)
    with pytest.raises(PolicyError) as e:
        run(Orders)
    assert str(e.value) == f"policy ordering: {line} (from on_start {at(Ordering, 'on_start')[2:]}"


def test_numpy_counts_in_standing_orders_are_taken():
    class Orders(Ordering):
        @staticmethod
        def orders(q):
            return [Keep(q, np.int64(2), budget=np.int32(9)), WakeOn(drained=np.bool_(True))]

    assert run(Orders).summary["samples_trained"] == 4


# -- 4, 6, 7, 12, 14: the class check ---------------------------------------------------------


class Named(Policy):
    name = "named"

    def on_start(self, view):
        return []


def test_params_that_are_not_a_dataclass_is_one_error_line():
    class Plain(Named):
        class Params:
            window = 3

    with pytest.raises(ConfigError, match=r"^policy Plain: Params must be a dataclass "
                                          r"\(@dataclass\(frozen=True\), a field per knob\), got "
                                          r"class Params$"):
        check_policy_class(Plain)


@pytest.mark.parametrize("typo, hook", [
    ("on_sync_don", "on_sync_done"), ("on_finish", "on_finished"), ("on_stat", "on_start"),
    ("on_idel", "on_idle"), ("on_Update_done", "on_update_done"), ("on_events", "on_event"),
])
def test_a_misspelled_hook_is_one_error_line_naming_the_hook(typo, hook):
    cls = type("Typo", (Named,), {typo: lambda self, view: []})
    with pytest.raises(ConfigError) as e:
        check_policy_class(cls)
    assert str(e.value) == f"policy Typo defines {typo}, which is not a hook: did you mean {hook}? (a helper of yours: rename it)"


def test_helpers_named_on_something_else_are_the_class_s_own():
    cls = type("Helpers", (Named,), {h: lambda self: None for h in
                                     ("on_step", "on_batch", "on_finished_batch", "on_tick")})
    check_policy_class(cls)  # no error
    assert cls.on_step(cls()) is None


@pytest.mark.parametrize("hook, func, line", [
    ("on_finished", lambda self, view, samples: [],
     "on_finished(self, view, samples) does not take the arguments sortedrl passes: define it as "
     "on_finished(self, view, samples, engine)"),
    ("on_start", lambda self: [],
     "on_start(self) does not take the arguments sortedrl passes: define it as on_start(self, view)"),
    ("__init__", lambda self, batch: None,
     "__init__(self, batch) does not take the arguments sortedrl passes: define it as "
     "__init__(self, params=None, ctx=None)"),
    ("on_idle", staticmethod(lambda view: []),
     "on_idle(view) does not take the arguments sortedrl passes: define it as "
     "on_idle(self, view, engine)"),
])
def test_a_hook_with_the_wrong_signature_is_one_error_line(hook, func, line):
    cls = type("Sig", (Named,), {hook: func})
    with pytest.raises(ConfigError) as e:
        check_policy_class(cls)
    assert str(e.value) == f"policy Sig: {line}"


@pytest.mark.parametrize("hook, func", [
    ("on_finished", lambda self, *args: []),
    ("on_finished", lambda self, view, samples, engine, extra=1: []),
    ("on_start", lambda self, view, **kw: []),
    ("on_start", staticmethod(lambda view: [])),
    ("on_idle", classmethod(lambda cls, view, engine: [])),
    ("__init__", lambda self, *a, **k: None),
    ("__init__", lambda self, params=None, ctx=None, extra=0: None),
])
def test_signatures_that_take_the_arguments_pass(hook, func):
    assert check_policy_class(type("Sig", (Named,), {hook: func})) is None  # no error raised


@pytest.mark.parametrize("name, line", [
    ("", 'policy class Nameless has no name: set name = "..." on the class (summaries and '
         "tables show it)"),
    ("  ", 'policy class Nameless has no name: set name = "..." on the class (summaries and '
           "tables show it)"),
    (42, "policy class Nameless: name must be a string, got int"),
])
def test_a_class_without_a_name_is_one_error_line(name, line):
    cls = type("Nameless", (Named,), {"name": name})
    with pytest.raises(ConfigError) as e:
        check_policy_class(cls)
    assert str(e.value) == line


@pytest.mark.parametrize("placements, line", [
    (("disagregated",), "unknown placement 'disagregated' in placements (known: colocated, "
                        "disaggregated)"),
    ("colocated", "placements must be None or a tuple of 'colocated' and/or 'disaggregated', "
                  "got 'colocated'"),
    ((), "placements must be None or a tuple of 'colocated' and/or 'disaggregated', got ()"),
])
def test_a_placements_value_nobody_knows_is_one_error_line(placements, line):
    cls = type("Places", (Named,), {"placements": placements})
    with pytest.raises(ConfigError) as e:
        check_policy_class(cls)
    assert str(e.value) == f"policy Places: {line}"


# -- 5. a standing order from a class that does not hear finishes -------------------------


def test_wake_on_without_an_on_finished_hook_says_so_and_names_the_misspelling():
    class Deaf(Ordering):
        name = "deaf"
        on_finished = Policy.on_finished
        listens_to_finishes = False

        def on_finish(self, view, samples, engine):
            return []

        @staticmethod
        def orders(q):
            return [Admit(tuple(range(len(q)))), WakeOn(finished=1)]

    with pytest.raises(PolicyError) as e:
        run(Deaf)
    at = f"{__file__}:{Ordering.on_start.__code__.co_firstlineno}"  # the hook that gave it
    assert str(e.value) == (f"policy deaf gave WakeOn (from on_start at {at}), which calls on_finished, "
                            "but its class defines no on_finished hook (on_finish is not a hook: a "
                            "misspelling?): define on_finished(self, view, samples, engine)")


def test_a_wake_up_for_a_class_that_listens_by_its_flag_but_has_no_on_finished_is_refused():
    """listens_to_finishes = True with only on_idle: a WakeOn(finished=8) was taken, and its
    wake-ups called the default on_finished, which does nothing. WakeOn() (wake never) is the
    documented way to say "serve my Keep, call me at no finish": still taken."""
    class FlagOnly(Policy):
        name = "flag_only"
        listens_to_finishes = True
        wake = WakeOn(finished=2)

        def on_start(self, view):
            return [Keep(deque(range(view.num_groups * view.group_size)), 2), self.wake]

        def on_idle(self, view, engine):
            if view.admitted or view.busy or not view.finished_count:
                return []
            return [Train(view.finished())]

    with pytest.raises(PolicyError) as e:
        run(FlagOnly)
    at = f"{__file__}:{FlagOnly.on_start.__code__.co_firstlineno}"
    assert str(e.value) == (f"policy flag_only gave WakeOn (from on_start at {at}), which calls on_finished, "
                            "but its class defines no on_finished hook: define on_finished(self, view, "
                            "samples, engine)")
    FlagOnly.wake = WakeOn()
    assert run(FlagOnly).summary["samples_trained"] == 4


def test_keep_from_a_class_with_only_on_idle_says_to_listen_and_then_runs():
    class IdleKeep(Policy):
        name = "idle_keep"

        def on_start(self, view):
            return [Keep(deque(range(view.num_groups * view.group_size)), 2)]

        def on_idle(self, view, engine):
            if view.admitted or view.busy or not view.finished_count:
                return []
            return [Train(view.finished())]

    with pytest.raises(PolicyError) as e:
        run(IdleKeep)
    at = f"{__file__}:{IdleKeep.on_start.__code__.co_firstlineno}"  # the hook that gave the order
    assert str(e.value).startswith(
        f"policy idle_keep gave a standing order (from on_start at {at}) but does not listen to finishes: "
        "set listens_to_finishes = True on the class (a Keep order tops up at finishes")
    IdleKeep.listens_to_finishes = True  # the advice, followed: Keep keeps 2 admitted
    r = run(IdleKeep)
    assert [a[2] for a in r.timeline.admits] == [[0, 1], [2], [3]]
    assert r.summary["samples_trained"] == 4


# -- 8. an error of the view raised in a user's hook ----------------------------------------


def test_an_error_of_the_view_in_a_hook_names_the_policy_and_the_user_s_line(tmp_path, monkeypatch):
    path = tmp_path / "peeking.py"
    path.write_text("from sortedrl.policies.base import Policy\n"
                    "class Peek(Policy):\n    name = 'peek'\n"
                    "    def on_start(self, view):\n"
                    "        view.response_len(0)\n"
                    "        return []\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = make_trace([3, 4])
    with pytest.raises(PolicyError) as e:
        simulate(trace, make_policy("peeking:Peek", [], trace), tiny_cluster())
    assert str(e.value) == ("policy peek: sample 0 has not finished: its length is unknown "
                            f"(in on_start at {path}:5)")


# -- 9. knob types ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Knobs:
    sizes: tuple[int, ...] = (1, 2)
    label: str = "x"
    cap: int | None = None


def test_a_knob_type_set_cannot_parse_is_one_error_line():
    with pytest.raises(ConfigError) as e:
        parse_params(Knobs, ["sizes=1,2"], "knobs")
    assert str(e.value) == ("--set sizes=1,2: the knob's type tuple[int, ...] is not one --set "
                            "parses (supported: int, float, bool, str, Literal[...] of strings, "
                            "integers or booleans, and X | None of these)")
    assert parse_params(Knobs, ["label=y", "cap=3"], "knobs") == Knobs(label="y", cap=3)


# -- 10. turns: one rule for both backends ------------------------------------------------


def test_turn_events_reach_the_same_policies_in_both_backends():
    from sortedrl.realrun import agent
    from sortedrl.sim import backend

    class Old(Policy):
        def on_event(self, event, view):
            return []

    class OldListening(Old):
        listens_to_turns = True

    class New(Policy):
        def on_turn_done(self, view, samples, engine):
            return []

    assert [hears_turns(c()) for c in (Old, OldListening, New, SyncPolicy)] == [False, True, True, False]
    assert agent.hears_turns is backend.hears_turns is hears_turns


# -- 11. module paths ---------------------------------------------------------------------------


def test_module_path_mistakes_are_one_error_line_with_the_fix(tmp_path, monkeypatch):
    (tmp_path / "authored.py").write_text("from sortedrl.policies.sync import SyncPolicy\n"
                                          "class KeepN(SyncPolicy):\n    name = 'keepn'\n")
    (tmp_path / "needs_pkg.py").write_text("x = 1\nimport nonexistent_pkg_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as e:
        policy_class("authored.py:KeepN")
    assert str(e.value) == ("--policy 'authored.py:KeepN': cannot import module 'authored.py' (No "
                            "module named 'authored.py'; 'authored' is not a package); drop the .py "
                            "suffix: authored:KeepN")
    with pytest.raises(ConfigError) as e:
        policy_class("authored:keepn")
    assert str(e.value) == "--policy 'authored:keepn': no name 'keepn' in module authored (did you mean KeepN?)"
    with pytest.raises(ConfigError) as e:
        policy_class("needs_pkg:P")
    assert str(e.value) == ("--policy 'needs_pkg:P': importing module 'needs_pkg' raised "
                            "ModuleNotFoundError: No module named 'nonexistent_pkg_xyz' "
                            f"(at {tmp_path / 'needs_pkg.py'}:2)")


def test_policies_lists_the_knobs_of_the_policies_named_a_users_too(tmp_path, monkeypatch):
    (tmp_path / "knobbed.py").write_text(
        "from dataclasses import dataclass, field\n"
        "from sortedrl.policies.sync import SyncPolicy\n"
        "@dataclass(frozen=True)\n"
        "class P:\n"
        "    order: str\n"
        "    window: int = field(default=64, metadata={'help': 'samples kept admitted'})\n"
        "class Knobbed(SyncPolicy):\n"
        "    'Sync, with a window.'\n"
        "    name = 'knobbed'\n"
        "    Params = P\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = CliRunner().invoke(app, ["policies", "knobbed:Knobbed", "sync"], terminal_width=200)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[:3] == ["knobbed:Knobbed (knobbed): Sync, with a window.",
                         "  order = (no default: give it with --set)",
                         "  window = 64  samples kept admitted"]
    assert lines[3].startswith("sync: ")
    knobs = [line.split(" = ")[0].strip() for line in lines[4:] if line.startswith("  ") and " = " in line]
    assert knobs == ["rollout_batch", "minibatches", "filter_groups"]
    r = CliRunner().invoke(app, ["policies", "knobbed:Nope"])
    assert (r.exit_code, r.stderr) == (2, "error: policies 'knobbed:Nope': no name 'Nope' in module "
                                          "knobbed\n")


# -- 13. a user's subclass of a built-in keeps its auto knobs ------------------------------


def test_a_subclass_of_a_builtin_reports_its_auto_knobs():
    class MySync(SyncPolicy):
        name = "mysync"

    trace = make_trace([3, 5, 4, 6], steps=[0, 0, 1, 1])
    cluster = tiny_cluster()
    mine = MySync(ctx=run_context(trace))
    simulate(trace, mine, cluster)
    assert auto_params(mine, 4) == {"rollout_batch": 2}
    assert simulate(trace, MySync(ctx=run_context(trace)), cluster).summary["auto_params"] == {
        "rollout_batch": 2}


# -- 14, 15: placements said both ways, and the compare note's grammar ---------------------


def test_a_placement_the_cluster_cannot_give_names_the_right_cluster():
    class ColocatedOnly(AdmitAll):
        name = "colo"
        placements = ("colocated",)

    class DisaggOnly(AdmitAll):
        name = "disagg"
        placements = ("disaggregated",)

    trace = make_trace([3, 4])
    split = dataclasses.replace(tiny_cluster(engines=2), name="tiny-disagg", train_gpus=1,
                                placement="disaggregated")
    assert cluster_for(ColocatedOnly.placements, split) is split  # no doubled -disagg name
    with pytest.raises(ConfigError) as e:
        simulate(trace, ColocatedOnly(ctx=run_context(trace)), split)
    assert str(e.value) == ("policy colo needs a colocated cluster (a preset without -disagg, or "
                            "placement: colocated in a cluster file); tiny-disagg is disaggregated")
    with pytest.raises(ConfigError) as e:
        simulate(trace, DisaggOnly(ctx=run_context(trace)), tiny_cluster(engines=2))
    assert str(e.value) == ("policy disagg needs a disaggregated cluster (a preset ending in "
                            "-disagg, or placement: disaggregated in a cluster file); tiny is "
                            "colocated")


def test_the_compare_note_says_needs_for_one_policy():
    cluster = tiny_cluster(engines=4)
    one = compare_notes([{"label": "A", "params": {}}, {"label": "async", "params": {}}],
                        ["4 shared", "3+1"], cluster)
    assert "async needs separate GPUs, so it ran on the disaggregated split" in one[1]


def test_compare_help_names_module_class():
    r = CliRunner().invoke(app, ["compare", "--help"], terminal_width=200)
    assert "module:Class" in r.output


def test_the_error_examples_in_the_docs_are_what_the_tool_prints(tmp_path, monkeypatch):
    text = " ".join(DOCS.read_text().split())
    with pytest.raises(ConfigError) as e:
        policy_class("mymodule:Harvest")  # not on the path
    assert f"`error: {e.value}`" in text
    code = re.search(r"### Writing a policy.*?```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    (tmp_path / "mymodule.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError) as e:
        policy_class("mymodule:harvest")
    sys.modules.pop("mymodule")  # imported now: a later test sees no mymodule, as this one did
    assert str(e.value).endswith(": no name 'harvest' in module mymodule (did you mean Harvest?)")
    assert "`no name 'harvest' in module mymodule (did you mean Harvest?)`" in text
    assert "`error: policy harvest raised KeyError: 3 (in on_finished at /home/me/mymodule.py:18)`" in text


# -- 16. regenerating forever ------------------------------------------------------------------


def test_a_policy_that_regenerates_forever_is_stopped(monkeypatch):
    class Forever(AdmitAll):
        name = "forever"

        def on_finished(self, view, samples, engine):
            return [Abort(samples, keep_tokens=False), Admit(samples)]

    monkeypatch.setattr(removal, "MAX_ATTEMPTS", 25)
    with pytest.raises(PolicyError) as e:
        run(Forever, lengths=(3,))
    assert str(e.value) == ("policy forever regenerated sample 0 25 times: it drops and re-admits "
                            "responses forever (Abort with keep_tokens=False, then Admit)")


def test_a_knob_for_a_class_without_params_says_where_knobs_go():
    # a class that forgot `Params = ...`: "(known: none)" gave no hint
    from sortedrl.errors import ConfigError
    from sortedrl.policies.base import NoParams, parse_params

    with pytest.raises(ConfigError) as e:
        parse_params(NoParams, ["groups=16"], "audit_mod:Audit")
    assert str(e.value) == ("--set groups: unknown parameter for policy audit_mod:Audit (known: none: the "
                            "class sets no Params, a frozen dataclass of its knobs (docs/policies.md))")


@pytest.mark.parametrize("workers", ["1", "2"])
def test_compare_names_the_label_whose_run_a_policy_error_stopped(tmp_path, monkeypatch, workers):
    # two labels of one user policy: "policy buggy: illegal action ..." did not say which
    (tmp_path / "buggy_mod.py").write_text(
        "from dataclasses import dataclass\n\n"
        "from sortedrl.policies.base import Train\n"
        "from sortedrl.policies.registry import policy_class\n\n\n"
        "@dataclass(frozen=True)\n"
        "class BuggyParams(policy_class('sync').Params):\n"
        "    bug: bool = False\n\n\n"
        "class Buggy(policy_class('sync')):\n"
        "    name = 'buggy'\n"
        "    Params = BuggyParams\n\n"
        "    def on_start(self, view):\n"
        "        return [Train(())] if self.params.bug else super().on_start(view)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    r = CliRunner().invoke(app, ["compare", "--synthetic", "math-16k", "--prompts", "8", "--group-size", "2",
                                 "--steps", "1", "--cluster", "h100-llama3.1-8b-1gpu-32seq",
                                 "--policy", "a=buggy_mod:Buggy", "--policy", "b=buggy_mod:Buggy",
                                 "--set", "b.bug=true", "--workers", workers, "--out", str(tmp_path / "c")])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines()[-1].startswith("error: --policy b: policy buggy: illegal action from on_start")
