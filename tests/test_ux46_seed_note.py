"""A ranking of one seed says so when some of its rows are draws of it: ``sortedrl`` and
``tail_batch`` regenerate dropped responses with lengths drawn by ``--seed`` (on the bundled
math-16k, ``sortedrl``'s makespan spans 687-773 s over seeds 0 to 7, and falls behind
``partial``'s seed-free 745.7 s at seed 3), which a single-seed table did not say."""

from __future__ import annotations

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.table_notes import draws_lengths, seed_note
from sortedrl.traces.io import BUNDLED, read_trace

NOTE = ("one seed: {} regenerated dropped responses, whose lengths --seed {} drew, so {} figures move "
        "with the seed; compare a few seeds before trusting a close ranking")


def test_the_note_names_the_rows_the_seed_draws():
    assert seed_note(["sortedrl", "tb"], 3, 7) == NOTE.format("sortedrl and tb", 7, "their")
    assert seed_note(["sortedrl"], 2, 0) == NOTE.format("sortedrl", 0, "its")
    assert seed_note([], 3, 0) is None and seed_note(["sortedrl"], 1, 0) is None  # one row ranks nothing


def _run(name: str, *sets: str, regen: str = "resample"):
    trace = read_trace(BUNDLED / "math-16k.jsonl")
    policy = make_policy(name, list(sets), trace)
    return simulate(trace, policy, preset("h100-llama3.1-8b-2gpu"), regen=regen)


def test_a_draw_is_a_regenerated_attempt_not_any_wasted_token():
    r = _run("sortedrl")
    assert draws_lengths(r.summary, r.timeline)
    r = _run("sortedrl", regen="same")  # the recorded length again: no draw
    assert not draws_lengths(r.summary, r.timeline)
    r = _run("sync", "filter_groups=true")  # wasted (filtered) tokens, no regeneration
    assert r.summary["wasted_tokens"] > 0 and not draws_lengths(r.summary, r.timeline)


def test_compare_prints_it_under_its_table(tmp_path):
    r = CliRunner().invoke(app, ["compare", "--trace", "math-16k", "--policy", "sync", "--policy", "tail_batch",
                                 "--policy", "f=sync", "--set", "f.filter_groups=true",
                                 "--cluster", "h100-llama3.1-8b-2gpu", "--seed", "2", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert NOTE.format("tail_batch", 2, "its") in " ".join(r.stdout.split())
