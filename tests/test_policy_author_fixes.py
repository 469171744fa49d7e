"""What a policy author met writing and exporting their own policies (a tester's round 48).

- ``export verl mymod:Class`` said the policy had no equivalent because *oracle_sorted* reads
  true lengths (any user class fell through to that reason); a tune's trial of one said
  "importing it would run code that a file names", which read like a missing trust flag; a
  compare directory listed a user run as ``Harvest (harvest)``, a name export does not take.
- ``c: Literal[1, 2]`` refused ``--set c=2`` ("expected one of 1, 2"): the text "2" was
  compared with the int 2.
- tune said to give a knob without a default with ``--param  k=VALUE`` (two spaces, no policy),
  a form it then refused.
- tune printed a sampled float knob as ``window=1.4067939757369459``.
- ``--policy dir/mymodule.py:Harvest`` said "is not a module name" and no more.
- docs/policies.md's section on knobs, the run's facts and randomness: its example runs.

Run: pytest tests/test_policy_author_fixes.py
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Literal

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.policies.base import Keep, Policy, RunContext, Train, WakeOn, parse_params
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.registry import make_policy, run_context
from sortedrl.sim.run import simulate
from sortedrl.tune.space import Dim
from tests.conftest import make_trace, tiny_cluster
from tests.test_user_code import TRACE, one_error_line

DOCS = Path(__file__).resolve().parents[1] / "docs" / "policies.md"
BUILT_IN_ONLY = ("export maps the built-in policies only (sync, sortedrl, partial, tail_batch, async, "
                 "one_step_off, oracle_sorted); export the built-in policy closest to it by its name and "
                 "--set knobs")


def refused(args: list[str]) -> str:
    """The one error line of a command that must exit 2 with nothing on stdout."""
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and r.stdout == "" and "Traceback" not in r.output, r.output
    assert r.stderr.count("\n") == 1, r.stderr
    return r.stderr.rstrip("\n")


# -- export of a user's policy ------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["verl", "slime", "areal"])
def test_export_of_a_user_policy_says_export_maps_the_built_in_ones(framework):
    """Not imported: the module need not exist for the answer (no mapping would read it)."""
    assert refused(["export", framework, "no_such_module:Harvest"]) == (
        f"error: policy no_such_module:Harvest has no equivalent in {framework}: it is a user policy "
        f"(module:Class), and {BUILT_IN_ONLY}")


def test_a_built_in_class_given_by_its_path_exports_as_the_built_in_policy():
    by_path = CliRunner().invoke(app, ["export", "verl", "sortedrl.policies.sync:SyncPolicy"])
    by_name = CliRunner().invoke(app, ["export", "verl", "sync"])
    assert by_path.exit_code == by_name.exit_code == 0, by_path.output
    assert by_path.stdout.splitlines()[1:] == by_name.stdout.splitlines()[1:]  # (the first names it as given)


def test_export_of_a_tune_trial_of_a_user_policy_says_the_same(tmp_path):
    tune = tmp_path / "t" / "tune.json"
    tune.parent.mkdir()
    tune.write_text(json.dumps({"trials": [{"id": 0, "policy": "mymod:Harvest", "params": {}}],
                                "best": {"overall": 0}}))
    line = f"error: {tune}: trial 0: policy mymod:Harvest is a user policy (module:Class), and {BUILT_IN_ONLY}"
    assert refused(["export", "verl", str(tune.parent), "--trial", "0"]) == line
    assert refused(["export", "slime", str(tune)]) == line  # (its best trial)


def test_export_of_a_compare_directory_lists_its_user_runs_as_not_exportable(tmp_path):
    """compare.json holds a user policy's ``name`` (``harvest``), which export does not take."""
    (tmp_path / "C").mkdir()
    (tmp_path / "C" / "compare.json").write_text(json.dumps(
        [{"label": "sync", "policy": "sync"}, {"label": "Harvest", "policy": "harvest"},
         {"label": "on", "policy": "sortedrl"}, {"label": "gh4", "policy": "group_harvest"}]))
    c = tmp_path / "C"
    assert refused(["export", "verl", str(c)]) == (
        f"error: {c}: a `sortedrl compare` directory, not a tune: export one of its runs by its policy's name "
        f"and knobs (`sortedrl export FRAMEWORK NAME --set key=value`; the knobs are {c}/LABEL/summary.json's "
        "'params'); its runs: sync (sync), on (sortedrl); its runs of user policies, which export does not map "
        "(it maps built-in policies only): Harvest, gh4")


# -- knobs -----------------------------------------------------------------------------------------




@dataclasses.dataclass(frozen=True)
class LiteralKnobs:
    c: Literal[1, 2] = 1
    flag: Literal[True, "auto"] = "auto"
    shift: Literal[-1, 3] | None = None


def test_a_literal_of_ints_or_bools_takes_its_values_as_the_literal_holds_them():
    assert parse_params(LiteralKnobs, ["c=2"], "p") == LiteralKnobs(c=2)
    assert type(parse_params(LiteralKnobs, ["c=1"], "p").c) is int
    assert parse_params(LiteralKnobs, ["flag=true", "shift=-1"], "p") == LiteralKnobs(flag=True, shift=-1)
    assert parse_params(LiteralKnobs, ["flag=auto", "shift=none"], "p") == LiteralKnobs()
    for pair, line in [("c=3", "--set c=3: expected one of 1, 2"), ("c=two", "--set c=two: expected one of 1, 2"),
                       ("flag=no", "--set flag=no: expected one of true, auto")]:
        with pytest.raises(ConfigError) as e:
            parse_params(LiteralKnobs, [pair], "p")
        assert str(e.value) == line


def test_a_literal_of_another_kind_is_refused_as_a_type_set_cannot_parse():
    @dataclasses.dataclass(frozen=True)
    class Odd:
        b: Literal[b"x"] = b"x"

    with pytest.raises(ConfigError) as e:
        parse_params(Odd, ["b=x"], "p")
    assert str(e.value) == ("--set b=x: the knob's type typing.Literal[b'x'] is not one --set parses (supported: "
                            "int, float, bool, str, Literal[...] of strings, integers or booleans, and X | None "
                            "of these)")


NO_DEFAULT = """from dataclasses import dataclass
from sortedrl.policies.sync import SyncPolicy
@dataclass(frozen=True)
class Knobs:
    k: int
    rollout_batch: int = 0
    minibatches: int = 1
    filter_groups: bool = False
class NoDefault(SyncPolicy):
    name = "nd"
    Params = Knobs
"""


def test_tune_says_to_give_a_knob_without_a_default_in_the_form_it_takes(tmp_path, monkeypatch):
    (tmp_path / "nd_mod.py").write_text(NO_DEFAULT)
    monkeypatch.syspath_prepend(str(tmp_path))
    small = ["--synthetic", "logic-8k", "--prompts", "8", "--group-size", "2", "--steps", "2"]
    assert one_error_line(tmp_path, "tune", *small, "--policy", "nd_mod:NoDefault") == (
        "error: policy nd_mod:NoDefault: knob k has no default: give it with --param nd_mod:NoDefault.k=VALUE, "
        f"or give it a default in its Params ({tmp_path / 'nd_mod.py'}:3)")
    r = CliRunner().invoke(app, ["tune", *small, "--policy", "nd_mod:NoDefault", "--param", "nd_mod:NoDefault.k=3",
                                 "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    trials = json.loads((tmp_path / "t" / "tune.json").read_text())["trials"]
    assert [t["params"] for t in trials] == [{"k": 3}]


def test_a_sampled_float_knob_is_short_and_runs_as_printed():
    """4 significant digits of the range's width (of the value on a log range), within lo:hi."""
    assert [Dim("w", "float", lo=0.5, hi=3).at(u) for u in (0.0, 0.36271759, 0.999999)] == [0.5, 1.407, 3.0]
    assert Dim("w", "float", lo=1e-6, hi=1.0, log=True).at(0.36271759) == 0.0001501
    assert Dim("w", "float", lo=1.0001, hi=1.0002).at(0.36271759) == 1.00013627  # (a narrow range keeps its digits)
    assert Dim("w", "float", lo=2.0, hi=2.0).at(0.5) == 2.0


def test_a_module_given_as_a_file_path_says_to_name_it_on_the_python_path(tmp_path):
    path = tmp_path / "mymodule.py"
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", f"{path}:Harvest") == (
        f"error: --policy '{path}:Harvest': '{path}' is a file's path, not a module name: put its directory on "
        f"the Python path and name the module, PYTHONPATH={tmp_path} sortedrl ... --policy mymodule:Harvest")
    spaced = tmp_path / "my policies" / "mymodule.py"  # (the command shown is quoted for a shell)
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", f"{spaced}:Harvest").endswith(
        f"PYTHONPATH='{spaced.parent}' sortedrl ... --policy mymodule:Harvest")
    assert one_error_line(tmp_path, "simulate", "--trace", TRACE, "--policy", str(path)) == (
        f"error: --policy '{path}': '{path}' is a file's path, not a module name: put its directory on "
        f"the Python path and name the module, PYTHONPATH={tmp_path} sortedrl ... --policy mymodule:ClassName")


# -- docs/policies.md: knobs, the run's facts and randomness ----------------------------------------


def _section() -> str:
    text = DOCS.read_text()
    return text[text.index("### Its knobs, the run's facts, and randomness"):text.index("### Writing a policy")]


def test_the_docs_name_every_field_of_the_run_context():
    said = re.search(r"`self\.ctx`: a `RunContext`.*?\n- ", _section(), re.S).group(0)
    named = set(re.findall(r"`(\w+)`", said)) - {"self", "RunContext", "__init__"}
    assert named == {f.name for f in dataclasses.fields(RunContext)}


def test_the_docs_seeded_example_runs_the_same_for_a_seed_and_another_for_another(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", _section(), re.S).group(1)
    (tmp_path / "shuffled_example.py").write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    trace = make_trace([5, 9, 3, 7, 30, 2, 11, 4, 6, 8, 12, 1], group_size=2, steps=[0] * 6 + [1] * 6)
    cluster = tiny_cluster(engines=2, max_num_seqs=2, kv=300)

    def trains(seed: int) -> list:
        run = simulate(trace, make_policy("shuffled_example:ShuffledSync", [f"seed={seed}"], trace), cluster)
        assert run.summary["samples_trained"] == 12
        return [sorted(t[3]) for t in run.timeline.trains]

    assert trains(0) == trains(0) and len(trains(0)) == 2  # two steps of 3 prompts x 2
    assert trains(0) != trains(1)
    r = CliRunner().invoke(app, ["policies", "shuffled_example:ShuffledSync"])
    assert "  seed = 0  seed of the order the groups are drawn in" in r.stdout.splitlines()


class Heard(Policy):
    """Keep every sample admitted; wake at each 3 finished, recording what on_finished got."""

    name = "heard"

    def on_start(self, view):
        self.calls, self.queue = [], SampleQueue()
        self.queue.add_fresh(view.num_groups * view.group_size)
        return [Keep(self.queue, window=view.total_capacity), WakeOn(finished=3, drained=True)]

    def on_finished(self, view, samples, engine):
        self.calls.append((samples, engine))
        return [] if view.busy else [Train(view.finished())]

    def on_sync_done(self, view):  # (finishes heard during the update)
        return [Train(view.finished())] if view.finished_count else []


def test_under_wakeon_engine_is_the_one_whose_finish_met_the_condition():
    """As docs/policies.md says: the samples come from any engine, ``engine`` is the last one's."""
    trace = make_trace([5, 9, 3, 7, 30, 2, 11, 4, 6, 8, 12, 1, 13, 3, 9, 2])
    policy = Heard(ctx=run_context(trace))
    run = simulate(trace, policy, dataclasses.replace(tiny_cluster(engines=3, max_num_seqs=2, kv=300),
                                                      train_gpus=1, placement="disaggregated"))
    finish = {s[3]: (s[1], s[2]) for s in run.timeline.spans if s[7] == "finish"}  # sample: (t1, engine)
    assert any(len({finish[i][1] for i in samples}) > 1 for samples, _ in policy.calls)
    for samples, engine in policy.calls:
        last = max(finish[i][0] for i in samples)
        assert engine in {finish[i][1] for i in samples if finish[i][0] == last}
    assert "and as `engine` the engine whose finish met\n  the condition" in DOCS.read_text()
