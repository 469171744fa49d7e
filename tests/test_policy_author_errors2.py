"""A policy author's mistakes, second audit: each one ``error:`` line (exit 2) naming the fix.

From an audit playing a policy author (``--policy module:Class``): a user's oracle policy ran
unlabelled (``"oracle": false``, no banner, no star); ``wants_oracle`` without ``attach_oracle``
was a traceback; a policy that aborts and re-admits at every finish ran 5 minutes before the
per-sample guard stopped it; one that syncs forever and never trains hung; misspelled hooks
``on_sync``, ``on_update``, ``on_synced``, ``onFinished`` were never called, silently; a nested
list printed 512 ids, and ``[Sync]`` gave no hint; illegal actions and stalls named neither the
hook nor the fix; ``sortedrl policies`` cut a docstring mid-sentence.

Run: pytest tests/test_policy_author_errors2.py
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError, PolicyError
from sortedrl.policies import loops, view
from sortedrl.policies.base import Abort, Admit, Policy, Sync, Train
from sortedrl.policies.checks import check_policy_class, meant_hook
from sortedrl.policies.registry import BUILTIN, make_policy, policy_class, run_context
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster
from tests.test_user_code import TRACE, at, one_error_line

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policies.md"
TRAIN_AT_IDLE = """
    def on_idle(self, view, engine):
        if view.admitted == 0 and view.finished_count and not view.busy:
            return [Train(view.finished())]
        return []
"""
HEAD = "from sortedrl.policies.base import Abort, Admit, Policy, Sync, Train\n"


def module(tmp_path, monkeypatch, name: str, code: str) -> None:
    """Write a user's policy module ``name`` into tmp_path, importable for the run."""
    (tmp_path / f"{name}.py").write_text(HEAD + code)
    monkeypatch.syspath_prepend(str(tmp_path))


def run(policy_cls: type[Policy], lengths=(3, 5, 4, 6), **kw):
    trace = make_trace(list(lengths))
    return simulate(trace, policy_cls(ctx=run_context(trace)), tiny_cluster(**kw))


class AdmitAll(Policy):
    name = "admit_all"

    def on_start(self, view):
        return [Admit(tuple(range(view.num_groups * view.group_size)))]

    def on_idle(self, view, engine):
        if view.admitted or view.busy or not view.finished_count:
            return []
        return [Train(view.finished())]


# -- 1. a user's oracle is labelled one, and needs attach_oracle -------------------------------

ORACLE = """
class Cheat(Policy):
    name = "cheat"
    wants_oracle = True

    def attach_oracle(self, oracle):
        self.pred = oracle

    def on_start(self, view):
        n = view.num_groups * view.group_size
        return [Admit(tuple(sorted(range(n), key=lambda i: self.pred.predict(view, i))))]
""" + TRAIN_AT_IDLE + """

class Keeps(Cheat):
    name = "keeps"

    def attach_oracle(self, oracle):
        self.oracle = self.pred = oracle  # its own use of the attribute, kept


class NoAttach(Cheat):
    name = "noattach"
    attach_oracle = None


class Asks(Policy):
    name = "asks"

    @property
    def wants_oracle(self):
        return True

    def on_start(self, view):
        return []
"""


def test_a_users_oracle_is_labelled_in_the_summary_the_banner_and_compare(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "orc", ORACLE)
    r = CliRunner().invoke(app, ["simulate", "--trace", TRACE, "--policy", "orc:Cheat", "--out",
                                 str(tmp_path / "run")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["oracle"] is True
    assert "[ORACLE: reads true lengths, an upper reference]" in " ".join(r.stdout.split())
    r = CliRunner().invoke(app, ["compare", "--trace", TRACE, "--policy", "sync", "--policy",
                                 "orc:Keeps", "--out", str(tmp_path / "cmp")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert re.search(r"^Keeps \*", r.stdout, re.M), r.stdout
    assert "* oracle: reads true lengths, an upper reference, not a deployable policy" in r.stdout
    summaries = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    summaries = summaries["runs"] if isinstance(summaries, dict) else summaries
    assert [s["oracle"] for s in summaries] == [False, True]


def test_an_oracle_object_the_policy_keeps_as_oracle_stays_its_own(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "orc_keeps", ORACLE)
    trace = make_trace([3, 5, 4, 6])
    policy = make_policy("orc_keeps:Keeps", [], trace)
    assert policy.oracle.predict(None, 1) == 5.0  # not overwritten by the label
    assert simulate(trace, policy, tiny_cluster()).summary["oracle"] is True


@pytest.mark.parametrize("spec, line", [
    ("orc_bad:NoAttach", "policy NoAttach sets wants_oracle but has no attach_oracle method: "
                         "define attach_oracle(self, oracle), which gets the true lengths "
                         "(oracle.predict(view, sample))"),
    ("orc_bad:Asks", "policy orc_bad:Asks sets wants_oracle but has no attach_oracle method: "
                     "define attach_oracle(self, oracle), which gets the true lengths "
                     "(oracle.predict(view, sample))"),
])
def test_wants_oracle_without_attach_oracle_is_one_error_line(tmp_path, monkeypatch, spec, line):
    module(tmp_path, monkeypatch, "orc_bad", ORACLE)
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", spec) == f"error: {line}"


# -- 2. dropping and re-admitting forever stops in seconds -------------------------------------

ABORT_LOOP = """
class AbortLoop(Policy):
    name = "abort_loop"

    def on_start(self, view):
        return [Admit(tuple(range(view.num_groups * view.group_size)))]

    def on_finished(self, view, samples, engine):
        return [Abort(tuple(samples), keep_tokens=False), Admit(tuple(samples))]
"""


def test_a_policy_that_regenerates_forever_is_stopped_run_wide(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "abort_loop", ABORT_LOOP)
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy",
                          "abort_loop:AbortLoop") == (
        "error: policy abort_loop regenerated more than 5,120 responses (the last from "
        "on_finished) since it last trained, discarded or filtered a sample: it drops and "
        "re-admits responses forever (Abort with keep_tokens=False, then Admit)")


def test_regenerating_between_updates_is_not_stopped():
    """sortedrl with one-sample harvests regenerates 127 responses per sample over a run of
    the bundled logic-8k (65,024 in all, past a total's 5,120), but never more than 0.5 per
    sample between two updates: it makes progress, and runs to the end."""
    r = CliRunner().invoke(app, ["simulate", "--trace", TRACE, "--policy", "sortedrl", "--set",
                                 "update_batch=1", "--set", "harvest=samples", "--json"])
    assert r.exit_code == 0, r.output
    summary = json.loads(r.stdout)
    assert summary["samples_trained"] == summary["samples_total"] == 512


def test_the_regeneration_limit_is_ten_per_sample_and_a_thousand_at_least():
    assert loops.RegenWatch(512).limit == 5_120
    assert loops.RegenWatch(4).limit == 1_000
    watch = loops.RegenWatch(4)
    assert not watch.dropped(1_000) and watch.dropped(1)


# -- 3. syncing forever stops -----------------------------------------------------------------

SYNC_LOOP = """
class SyncForever(Policy):
    name = "sync_forever"

    def on_start(self, view):
        return [Admit(tuple(range(view.num_groups * view.group_size)))]

    def on_idle(self, view, engine):
        return [Sync()] if not view.busy else []

    def on_sync_done(self, view):
        return [Sync()]
"""


def test_a_policy_that_syncs_forever_is_stopped(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "sync_loop", SYNC_LOOP)
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy",
                          "sync_loop:SyncForever") == (
        "error: policy sync_forever synced 100 times in a row (the last from on_sync_done) with "
        "no update and no sample moving between: it syncs forever and never trains (Sync once "
        "after each update, as on_update_done's default does; a Sync is no way to wait)")


def test_a_few_syncs_with_nothing_new_are_not_refused():
    class Eager(AdmitAll):
        name = "eager"
        syncs = 0

        def on_start(self, view):
            return super().on_start(view) + [Sync()]  # the engines run version 0 already

        def on_sync_done(self, view):
            self.syncs += 1
            return [Sync()] if self.syncs < loops.IDLE_SYNCS - 1 else []

    assert run(Eager).summary["samples_trained"] == 4


def test_syncs_while_samples_finish_are_not_a_loop():
    class Chatty(AdmitAll):
        """Syncs at every finish while the engines generate: wasteful, not a loop."""

        name = "chatty"

        def on_finished(self, view, samples, engine):
            return [] if view.busy else [Sync()]

        def on_sync_done(self, view):
            return self.on_idle(view, None)

    lengths = [2 * i + 1 for i in range(3 * loops.IDLE_SYNCS)]  # a finish at every other step
    assert run(Chatty, lengths, max_num_seqs=len(lengths)).summary["samples_trained"] == len(lengths)


# -- 4. misspelled hooks --------------------------------------------------------------------


class Named(Policy):
    name = "named"

    def on_start(self, view):
        return []


@pytest.mark.parametrize("typo, hook", [
    ("on_sync", "on_sync_done"), ("on_update", "on_update_done"), ("on_synced", "on_sync_done"),
    ("onFinished", "on_finished"), ("on_fin", "on_finished"), ("on_sync_end", "on_sync_done"),
    ("on_turn", "on_turn_done"), ("onIdel", "on_idle"), ("ON_IDLE", "on_idle"),
    ("on_started", "on_start"), ("onFinsihed", "on_finished"),
])
def test_more_misspelled_hooks_are_one_error_line(typo, hook):
    cls = type("Typo", (Named,), {typo: lambda self, view: []})
    with pytest.raises(ConfigError) as e:
        check_policy_class(cls)
    assert str(e.value) == f"policy Typo defines {typo}, which is not a hook: did you mean {hook}? (a helper of yours: rename it)"


def test_the_audits_typos_through_the_cli(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "typos", "class Typo(Policy):\n    name = 'typo'\n"
           "    def on_start(self, view):\n        return []\n"
           "    def on_update(self, view):\n        return [Sync()]\n")
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "typos:Typo") == (
        "error: policy Typo defines on_update, which is not a hook: did you mean on_update_done? (a helper of yours: rename it)")


HELPERS = ("on_step", "on_batch", "on_finished_batch", "onFinishedBatch", "on_tick", "on_end",
           "on_start_helper", "on_sync_helper", "on_idle_engine", "on_update_step", "on_next",
           "on_harvest", "on_train", "on_done", "on_round", "once", "one_group", "onset", "on")


@pytest.mark.parametrize("helper", HELPERS)
def test_helpers_are_the_class_s_own(helper):
    check_policy_class(type("Helpers", (Named,), {helper: lambda self: None}))  # no error


def test_a_stem_helper_beside_its_hook_is_the_class_s_own():
    hooks = {"on_sync_done": lambda self, view: [], "on_update_done": lambda self, view: [],
             "on_turn_done": lambda self, view, samples, engine: []}
    helpers = {h: (lambda self, view: []) for h in ("on_sync", "on_synced", "on_update", "on_turn")}
    check_policy_class(type("Both", (Named,), {**hooks, **helpers}))  # no error
    # an old-style class routes the events itself: its on_update is a helper
    check_policy_class(type("Old", (Policy,), {"name": "old", "on_event": lambda self, e, v: [],
                                               "on_update": lambda self, view: []}))


def test_no_method_of_a_builtin_policy_reads_as_a_misspelled_hook():
    for cls in BUILTIN.values():
        for klass in inspect.getmro(cls):
            for attr in vars(klass):
                assert meant_hook(cls, attr) is None, (cls.__name__, attr)


# -- 5, 6. a list element that is no action; the hook of an illegal action; stall hints --------


@pytest.mark.parametrize("item, line", [
    ([Admit(tuple(range(4)))], "on_start returned a list inside its list of actions ([Admit(...)]): "
                               "return one flat list"),
    ((Sync(), Sync(), Sync(), Sync()), "on_start returned a tuple inside its list of actions "
                                       "((Sync(), Sync(), Sync(), ...)): return one flat list"),
    (Sync, "on_start returned the class Sync in its list, not an action: write Sync(), an instance"),
    (Admit, "on_start returned the class Admit in its list, not an action: write Admit(...), an "
            "instance"),
    ("admit all", "on_start returned 'admit all' in its list, which is not an action"),
])
def test_a_list_element_that_is_no_action_is_named_short(item, line):
    class Wrong(AdmitAll):
        name = "wrong"

        def on_start(self, view):
            return [item]

    with pytest.raises(PolicyError) as e:
        run(Wrong)
    assert str(e.value) == f"policy wrong: {line.replace('on_start', 'on_start' + at(Wrong, 'on_start'), 1)}"


def test_a_class_in_the_list_through_the_cli(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "cls_item", "class ActionClass(Policy):\n    name = 'ac'\n"
           "    def on_start(self, view):\n        return [Admit(tuple(range(8)))]\n"
           + TRAIN_AT_IDLE + "    def on_update_done(self, view):\n        return [Sync]\n")
    lines = (tmp_path / "cls_item.py").read_text().splitlines()
    hook = next(n for n, text in enumerate(lines, 1) if "def on_update_done" in text)
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "cls_item:ActionClass") == (
        f"error: policy ac: on_update_done (at {tmp_path / 'cls_item.py'}:{hook}) "
        "returned the class Sync in its list, not an action: write Sync(), an instance")


def test_an_illegal_action_names_its_hook():
    class Eager(AdmitAll):
        name = "eager"
        placements = ("disaggregated",)

        def on_finished(self, view, samples, engine):
            return [Train(tuple(samples))]

    class Early(AdmitAll):
        name = "early"

        def on_start(self, view):
            return super().on_start(view) + [Train((0,))]

    trace = make_trace([3, 3, 5, 6])
    split = dataclasses.replace(tiny_cluster(engines=2), name="tiny-disagg", train_gpus=1,
                                placement="disaggregated")
    with pytest.raises(PolicyError) as e:
        simulate(trace, Eager(ctx=run_context(trace)), split)
    assert str(e.value) == (f"policy eager: illegal action from on_finished{at(Eager, 'on_finished')}: train "
                            "while the trainer is busy (wait for update_done)")
    with pytest.raises(PolicyError) as e:
        run(Early)
    assert str(e.value) == (f"policy early: illegal action from on_start{at(Early, 'on_start')}: train on sample 0, "
                            "which is admitted (Train takes finished samples: view.finished())")


def test_an_old_style_policy_s_illegal_action_names_on_event():
    class Old(Policy):
        name = "old"

        def on_event(self, event, view):
            return [Admit((0,)), Admit((0,))] if event.kind == "started" else []

    with pytest.raises(PolicyError) as e:
        run(Old)
    assert str(e.value) == (f"policy old: illegal action from on_event{at(Old, 'on_event')}: admit of sample 0, "
                            "which is admitted")


@pytest.mark.parametrize("hook, returned, reason", [
    ("on_idle", lambda self, view, engine: [],
     "4 finished samples, nothing in flight: return Train(...) for the finished ones"),
    ("on_start", lambda self, view: [Admit((0, 1))],
     "2 waiting, 2 trained samples, nothing in flight: Admit the waiting ones (or keep them in a "
     "Keep queue)"),
    ("on_finished", lambda self, view, samples, engine: (
        [Abort(tuple(i for e in range(view.engines) for i in view.running(e)))]
        if view.finished_count == 1 and view.admitted else []),
     "3 paused, 1 finished samples, nothing in flight: re-admit the paused ones (Abort leaves a "
     "sample paused, or waiting with keep_tokens=False); return Train(...) for the finished ones"),
])
def test_a_stall_says_what_each_state_needs(hook, returned, reason):
    stalled = type("Stalled", (AdmitAll,), {"name": "stalled", hook: returned})
    with pytest.raises(PolicyError) as e:
        run(stalled)
    assert re.fullmatch(r"policy stalled stalled at t=[0-9.]+s: (.*)", str(e.value)).group(1) == reason


def test_the_stall_reason_counts_each_state_once():
    assert loops.stall_reason(bytearray([0, 2, 3, 3, 4])) == (
        "1 waiting, 1 paused, 2 finished, 1 trained samples, nothing in flight: Admit the waiting "
        "ones (or keep them in a Keep queue); re-admit the paused ones (Abort leaves a sample "
        "paused, or waiting with keep_tokens=False); return Train(...) for the finished ones")
    assert loops.stall_reason(bytearray([4, 5])) == "1 trained, 1 discarded samples, nothing in flight"
    # counts print as every other count does: 2,048, not 2048
    assert loops.stall_reason(bytearray([4] * 2048)) == "2,048 trained samples, nothing in flight"


# -- 7, 8. the docs name every view member; `sortedrl policies` shows a whole first paragraph --


def test_the_docs_name_every_member_of_the_view():
    text = DOCS.read_text()
    section = text[text.index("### The view, and a sample's life"):text.index("### Writing a policy")]
    members = [m for m in dir(view.ClusterView) if not m.startswith("_")]
    assert len(members) > 30
    assert [m for m in members if f"`{m}`" not in section and f"`{m}(" not in section] == []


def test_the_error_examples_in_the_docs_are_what_the_tool_prints():
    text = " ".join(DOCS.read_text().split())
    for example in ("on_update_done returned the class Sync in its list, not an action: write "
                    "Sync(), an instance",
                    "policy p: illegal action from on_finished (at mypolicy.py:20): train while the "
                    "trainer is busy (wait for update_done)",
                    "train on sample 0, which is admitted (Train takes finished samples: view.finished())",
                    "returned a generator, expected a list of actions: it yields; return a list of the "
                    "actions instead", "wrap it in a list, [Admit(...)]",
                    "512 finished samples, nothing in flight: return Train(...) for the finished ones"):
        assert example in text, example


def test_policies_shows_the_first_paragraph_of_a_docstring_whole(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "documented", 'class Doc(Policy):\n'
           '    """Keep the engines busy, and train each batch of finished samples,\n'
           '    shortest first.\n\n    More detail nobody needs in the listing.\n    """\n'
           '    name = "doc"\n    def on_start(self, view):\n        return []\n')
    r = CliRunner().invoke(app, ["policies", "documented:Doc"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert " ".join(r.stdout.split()) == ("documented:Doc (doc): Keep the engines busy, and train "
                                          "each batch of finished samples, shortest first.")


def test_the_builtins_listing_is_one_line_each_as_before():
    assert [policy_class(n).__doc__.strip().count("\n") for n in BUILTIN] == [0] * len(BUILTIN)


def test_a_hook_that_yields_and_a_knob_without_a_default_say_what_to_change(tmp_path, monkeypatch):
    module(tmp_path, monkeypatch, "gen_hook", "class Gen(Policy):\n    name = 'gen'\n"
           "    def on_start(self, view):\n        yield Admit(tuple(range(8)))\n")
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "gen_hook:Gen") == (
        f"error: policy gen: on_start (at {tmp_path / 'gen_hook.py'}:4) returned a generator, expected a "
        "list of actions: it yields; return a list of the actions instead")
    module(tmp_path, monkeypatch, "no_default", "from dataclasses import dataclass\n@dataclass(frozen=True)\n"
           "class Knobs:\n    k: int\nclass NoDefault(Policy):\n    name = 'nd'\n    Params = Knobs\n"
           "    def on_start(self, view):\n        return []\n")
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", "no_default:NoDefault") == (
        "error: policy no_default:NoDefault: knob k has no default: give it with --set k=VALUE, or give it a "
        f"default in its Params ({tmp_path / 'no_default.py'}:3)")


def test_a_policy_that_updates_and_never_syncs_is_warned(tmp_path, monkeypatch):
    """An on_update_done that returns no Sync ran without a word: the engines generated every
    sample on the first version's weights. A warning says so (the built-ins always sync)."""
    module(tmp_path, monkeypatch, "no_sync", "class NoSync(Policy):\n    name = 'nosync'\n"
           "    def on_start(self, view):\n        return [Admit(tuple(range(256)))]\n" + TRAIN_AT_IDLE
           + "    def on_update_done(self, view):\n"
           "        return [Admit(tuple(range(256, 512)))] if view.version == 1 else []\n")
    line = ("warning: {} made 2 updates and no sync, so its engines generated every sample with the first "
            "version's weights: return Sync() from on_update_done (the default does)\n")
    r = CliRunner().invoke(app, ["simulate", "--trace", TRACE, "--policy", "no_sync:NoSync",
                                 "--out", str(tmp_path / "s"), "--json"])
    assert r.exit_code == 0, r.output
    assert r.stderr.endswith(line.format("policy nosync"))
    r = CliRunner().invoke(app, ["compare", "--trace", TRACE, "--policy", "no_sync:NoSync", "--policy", "sync",
                                 "--out", str(tmp_path / "c"), "--json"])
    assert r.exit_code == 0, r.output
    assert r.stderr.endswith(line.format("NoSync")) and r.stderr.count("no sync") == 1
