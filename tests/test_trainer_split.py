"""The note on a default disaggregated split whose trainer was the busier side.

``async`` and ``one_step_off`` given a colocated cluster run on its disaggregated split, a
quarter of the GPUs training (AReaL's 75/25). On the presets training is a third or more of a
colocated step, so a quarter is often too few, and the policy looks slow for the split, not for
its schedule: ``simulate`` and ``compare`` say so, with the ``tune`` range to search.

Run: pytest tests/test_trainer_split.py
"""

from __future__ import annotations

import dataclasses

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import cluster_for, trainer_bound_note
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.traces.io import write_trace
from sortedrl.traces.synth import synthesize

runner = CliRunner()
FOUR = ["--synthetic", "math-16k", "--prompts", "64", "--steps", "3", "--cluster", "h100-llama3.1-8b-4gpu"]
NOTE = ("note: on the 3+1 split, async kept the trainer busier than the rollout engines (89% of "
        "the run against 40%): a larger trainer pool may suit this trace; `tune --param "
        "cluster.train_gpus=2:3 --objective makespan_s` searches it (train_gpus is a cluster "
        "file's field)")


def split_of(name: str):
    return cluster_for(("disaggregated",), preset(name))


def test_compare_and_simulate_say_the_trainer_was_busier_and_what_to_search(tmp_path):
    r = runner.invoke(app, ["compare", *FOUR, "--policy", "sync", "--policy", "async",
                            "--policy", "one_step_off", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    # one_step_off's trainer was busier too (79% of the run against 66%), but its busy
    # GPU-seconds balance at 4 x 79 / (79 + 3 x 66) = 1.1 trainer GPUs: not named
    assert [x for x in r.stderr.splitlines() if "busier" in x] == [NOTE]
    s = runner.invoke(app, ["simulate", *FOUR, "--policy", "async", "--out", str(tmp_path / "s")])
    assert s.exit_code == 0, s.output
    assert [x for x in s.stderr.splitlines() if "busier" in x] == [NOTE]
    trace = tmp_path / "t.jsonl"
    write_trace(synthesize("math-16k", prompts=64, group_size=8, steps=3), trace)
    f = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "async", "--seeds", "1",
                            "--cluster", "h100-llama3.1-8b-4gpu"])
    assert f.exit_code == 0, f.output
    assert [x for x in f.stderr.splitlines() if "busier" in x] == [
        NOTE.replace("note: on the ", "note: on h100-llama3.1-8b-4gpu-disagg, the ")]


def test_the_range_holds_the_best_split():
    # the note's range (2:3 of 4 GPUs) holds the fastest split for both policies: 2+2
    trace = synthesize("math-16k", prompts=64, group_size=8, steps=3)
    base = split_of("h100-llama3.1-8b-4gpu")
    for name in ("async", "one_step_off"):
        makespans = {t: simulate(trace, make_policy(name, [], trace),
                                 dataclasses.replace(base, train_gpus=t).validate("test")
                                 ).summary["makespan_s"] for t in (1, 2, 3)}
        assert min(makespans, key=makespans.get) == 2, (name, makespans)


def run(train_s: float, rollout_s: float, makespan_s: float = 100.0) -> dict:
    return {"train_s": train_s, "rollout_s": rollout_s, "makespan_s": makespan_s}


def test_the_range_runs_to_one_past_the_balance_of_busy_gpu_seconds():
    # 6+2: 90 s x 2 trainer GPUs against 30 s x 6 engines balance at 8 x 180 / 360 = 4 of 8
    split = split_of("h100-llama3.1-8b")
    assert (split.rollout_gpus, split.trainer_gpus) == (6, 2)
    note = trainer_bound_note([("a", run(90, 30))], split)
    assert note == ("note: on the 6+2 split, a kept the trainer busier than the rollout engines "
                    "(90% of the run against 30%): a larger trainer pool may suit this trace; "
                    "`tune --param cluster.train_gpus=3:5 --objective makespan_s` searches it "
                    "(train_gpus is a cluster file's field)")
    # the busiest trainer sets the range; only the runs whose trainer was busier are named
    note = trainer_bound_note([("a", run(90, 30)), ("b", run(99, 3)), ("c", run(10, 50))], split)
    assert "split, a, b kept" in note and "(90-99% of the run against 3-30%)" in note
    assert "train_gpus=3:7 " in note  # b balances at 8 x 198 / 216 = 7.3: 7, the most 8 GPUs allow


def test_no_note_when_the_split_is_chosen_balanced_or_the_only_one():
    split = split_of("h100-llama3.1-8b")
    assert trainer_bound_note([("a", run(30, 90))], split) is None  # the engines were busier
    assert trainer_bound_note([("a", run(50, 50))], split) is None
    # busier, but nearly balanced: 8 x 97 x 2 / (97 x 2 + 94 x 6) = 2.05 trainer GPUs
    assert trainer_bound_note([("a", run(97, 94))], split) is None
    chosen = dataclasses.replace(split, train_gpus=2).validate("test")  # the user's own split
    assert trainer_bound_note([("a", run(90, 30))], chosen) is None
    assert trainer_bound_note([("a", run(90, 30))], preset("h100-llama3.1-8b")) is None  # colocated
    assert trainer_bound_note([("a", run(99, 1))], split_of("h100-llama3.1-8b-2gpu")) is None  # 1+1
    assert trainer_bound_note([], split) is None


def test_the_range_keeps_to_splits_into_whole_engines():
    # tp 2 on 8 GPUs (6+2: 3 engines): a trainer of 3 or 5 GPUs leaves an odd rollout pool
    split = split_of("h100-qwen3-32b")
    assert (split.tp, split.rollout_gpus, split.trainer_gpus) == (2, 6, 2)
    note = trainer_bound_note([("a", run(99, 3))], split)
    assert "train_gpus=4,6 " in note  # (4:6 would ask for 5 too, which tune skips)
    # one size: given as it is, not as a range (8 x 33 x 2 / (66 + 18 x 6) = 3.03: 3 to 5 of 8,
    # of which 4 alone leaves whole engines)
    assert "train_gpus=4 " in trainer_bound_note([("a", run(33, 18))], split)


def test_tune_says_it_of_its_best_trial_on_the_default_split(tmp_path):
    r = runner.invoke(app, ["tune", *FOUR, "--policy", "sync", "--policy", "async",
                            "--param", "async.eta=1,2", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    notes = [x for x in r.stderr.splitlines() if "busier" in x]
    assert len(notes) == 1 and notes[0].startswith("note: on the 3+1 split, trial ")
    assert notes[0].endswith(" async kept the trainer busier than the rollout engines (90% of the "
                             "run against 45%): a larger trainer pool may suit this trace; `tune "
                             "--param cluster.train_gpus=2:3 --objective makespan_s` searches it "
                             "(train_gpus is a cluster file's field)")
    # a search of the cluster's shape says nothing: its trials ran on several splits
    r = runner.invoke(app, ["tune", *FOUR, "--policy", "async", "--param",
                            "cluster.train_gpus=1:3", "--out", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    assert not [x for x in r.stderr.splitlines() if "busier" in x]


def test_one_gpu_has_no_split_and_no_note(tmp_path):
    # the note's split is asked for only when a run ran on one: on 1 GPU compare, forecast and
    # tune of a colocated policy refused the cluster ("1 trainer GPUs of 1 leave no rollout
    # engine") before this
    one = ["--cluster", "h100-llama3.1-8b-1gpu"]
    r = runner.invoke(app, ["compare", "--synthetic", "math-16k", "--prompts", "8", "--steps", "2",
                            "--policy", "sync", "--policy", "sortedrl", *one, "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    trace = tmp_path / "t.jsonl"
    write_trace(synthesize("math-16k", prompts=8, group_size=8, steps=2), trace)
    f = runner.invoke(app, ["forecast", "--trace", str(trace), "--policy", "sync", "--seeds", "1", *one])
    assert f.exit_code == 0, f.output
    t = runner.invoke(app, ["tune", "--trace", str(trace), "--policy", "sync", "--param",
                            "sync.minibatches=1,2", *one, "--out", str(tmp_path / "t")])
    assert t.exit_code == 0, t.output
    for res in (r, f, t):
        assert "busier" not in res.stderr
