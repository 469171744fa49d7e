"""Rows that make very different numbers of optimizer updates compare different training runs:
`forecast` and `tune` show each row's updates (as `compare` did) and every table says when they
differ by 2x or more. `forecast` of a fixed trace warns of an under-filled cluster as `compare`
does, and `tune --help` names every objective it takes."""

from __future__ import annotations

import dataclasses
import json

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.table_notes import updates_note
from sortedrl.traces import write_trace
from sortedrl.traces.model import generate
from tests.test_forecast import MODEL


def test_the_note_names_the_fewest_and_the_most_updates() -> None:
    assert updates_note([("sync", 6), ("sortedrl", 2), ("partial", 5)]) == (
        "updates differ: sortedrl makes 2 updates, sync makes 6; fewer updates mean larger batches, a "
        "different training run, not only a faster one")
    assert updates_note([("sync", 6), ("sortedrl", 4)]) is None  # under 2x
    assert updates_note([("sync", 6)]) is None
    assert updates_note([("a", 0), ("b", 2)]) is not None  # (no update at all against 2)


def test_forecast_shows_updates_and_says_when_they_differ(tmp_path) -> None:
    write_trace(generate(dataclasses.replace(MODEL, prompts_per_step=8), 6, seed=1),
                tmp_path / "t.jsonl")
    args = ["forecast", "--trace", str(tmp_path / "t.jsonl"), "--policy", "sync", "--policy",
            "sortedrl", "--cluster", "h100-llama3.1-8b-2gpu"]
    out = json.loads(CliRunner().invoke(app, [*args, "--json"]).stdout)
    assert [o["updates"] for o in out] == [6, 2]
    r = CliRunner().invoke(app, [*args, "--wide"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    col = lines[1].split().index("updates")
    assert [line.split()[col] for line in lines[4:6]] == ["6", "2"]
    assert (" ".join(r.stdout.split()).count(
        "updates differ: sortedrl @ h100-llama3.1-8b-2gpu makes 2 updates, sync @ h100-llama3.1-8b-2gpu "
        "makes 6;")
        == 1)
    assert r.stderr.startswith("warning: a step of t.jsonl has 32 samples, filling 6% of the 512 "
                               "decode slots of h100-llama3.1-8b-2gpu (2 engines x 256)")


def test_tune_shows_each_best_trials_updates(tmp_path) -> None:
    r = CliRunner().invoke(app, ["tune", "--synthetic", "math-16k", "--prompts", "16", "--steps",
                                 "3", "--policy", "sync", "--policy", "sortedrl", "--budget", "2",
                                 "--cluster", "h100-llama3.1-8b-2gpu", "--out",
                                 str(tmp_path / "t"), "--wide"])
    assert r.exit_code == 0, r.output
    trials = json.loads((tmp_path / "t" / "tune.json").read_text())["trials"]
    lines = r.stdout.splitlines()
    col = lines[1].split().index("updates")
    shown = {int(line.split()[1]): line.split()[col] for line in lines[4:6]}
    assert shown == {t["id"]: f"{t['summary']['updates']:,}" for t in trials}


def test_tune_help_names_every_objective() -> None:
    from sortedrl.tune.search import OBJECTIVES

    text = " ".join(CliRunner().invoke(app, ["tune", "--help"], env={"COLUMNS": "200"}).stdout.split())
    assert "learnable_tokens_per_s, tokens_per_s, makespan_s or gpu_hours" in text
    assert list(OBJECTIVES) == ["learnable_tokens_per_s", "tokens_per_s", "makespan_s", "gpu_hours"]
