"""A ranking of one seed says so when some of its rows are draws of it: ``sortedrl`` and
``tail_batch`` regenerate dropped responses with lengths drawn by ``--seed`` (on the bundled
math-16k, ``sortedrl``'s makespan spans 687-773 s over seeds 0 to 7, and falls behind
``partial``'s seed-free 745.7 s at seed 3), which a single-seed table did not say."""

from __future__ import annotations

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.table_notes import seed_note

DRAWN = {"regen": "resample", "wasted_tokens": 1, "seed": 3}
FIXED = {"regen": "resample", "wasted_tokens": 0, "seed": 3}


def test_the_note_names_the_rows_the_seed_draws():
    assert seed_note([("sync", FIXED), ("sortedrl", DRAWN), ("tb", DRAWN)]) == (
        "one seed: sortedrl and tb regenerated dropped responses, whose lengths --seed 3 drew, so "
        "their figures move with the seed; compare a few seeds before trusting a close ranking")
    assert seed_note([("sync", FIXED), ("sortedrl", DRAWN)]) == (
        "one seed: sortedrl regenerated dropped responses, whose lengths --seed 3 drew, so its "
        "figures move with the seed; compare a few seeds before trusting a close ranking")


def test_no_note_without_a_draw_or_a_ranking():
    assert seed_note([("sync", FIXED), ("partial", FIXED)]) is None
    assert seed_note([("sortedrl", DRAWN)]) is None  # one row ranks nothing
    assert seed_note([("sync", FIXED), ("sortedrl", {**DRAWN, "regen": "same"})]) is None  # the recorded length again


def test_compare_prints_it_under_its_table(tmp_path):
    r = CliRunner().invoke(app, ["compare", "--trace", "math-16k", "--policy", "sync", "--policy", "tail_batch",
                                 "--cluster", "h100-llama3.1-8b-2gpu", "--seed", "2", "--out", str(tmp_path / "c")],
                           terminal_width=400)
    assert r.exit_code == 0, r.output
    assert ("one seed: tail_batch regenerated dropped responses, whose lengths --seed 2 drew, so its figures "
            "move with the seed; compare a few seeds before trusting a close ranking") in " ".join(r.stdout.split())
