"""Every command's ``--help`` renders, and says what its help strings say.

typer renders help strings as rich markup: ``prompt/answer[/id]`` in ``run --dataset``'s help
was read as a closing tag, and ``sortedrl run --help`` ended in a MarkupError traceback; a
bracketed word that parses (``the [gpu] extra``) vanished from the page without a word. A
literal bracket is written ``\\[``.
"""

from __future__ import annotations

import click
import pytest
import typer
from rich.markup import render
from typer.testing import CliRunner

from sortedrl.cli import app

ROOT = typer.main.get_command(app)


def commands(group: click.Command = ROOT, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, group)]
    for name, sub in getattr(group, "commands", {}).items():
        found += commands(sub, (*path, name))
    return found


COMMANDS = commands()


def test_the_walk_finds_the_nested_commands():
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"simulate", "run", "calibrate", "trace import", "profile show"} <= names


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "sortedrl")
def test_help_renders(path):
    r = CliRunner().invoke(app, [*path, "--help"])
    assert r.exit_code == 0 and r.exception is None, r.output
    assert "Usage:" in r.output and "Traceback" not in r.output
    assert "<bool>" not in r.output  # (typer 0.2x typed a flag as if it took a value)


def test_a_value_given_to_a_flag_is_one_line_saying_it_takes_none():
    r = CliRunner().invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--force=false"])
    assert (r.exit_code, r.stderr) == (2, "error: --force takes no value: give --force alone to turn it "
                                          "on, or leave it out\n")


@pytest.mark.parametrize("path,command", COMMANDS, ids=[" ".join(p) or "sortedrl" for p, _ in COMMANDS])
def test_help_strings_keep_their_brackets(path, command):
    texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
    for text in texts:
        assert render(text).plain == text.replace("\\[", "["), text  # (a MarkupError fails too)


@pytest.mark.parametrize("path", [p for p, c in COMMANDS if hasattr(c, "commands")],
                         ids=lambda p: " ".join(p) or "sortedrl")
def test_a_groups_command_list_gives_each_summary_on_unbroken_lines(path):
    """typer's rich list kept a docstring's line breaks: `report`'s summary, wrapped after 'or'
    in the source, broke there in `sortedrl --help`. Each summary is now one line, wrapped by
    the terminal's width alone: at 300 columns each fits on its row."""
    group = dict(COMMANDS)[path]
    r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert r.exit_code == 0, r.output
    rows = [line.strip("│ ").split(None, 1) for line in r.output.splitlines()
            if line.startswith("│ ") and not line.startswith("│ --")]
    listed = {row[0]: row[1].strip() for row in rows if row and row[0] in group.commands}
    assert set(listed) == set(group.commands)
    for name, sub in group.commands.items():
        summary = (sub.short_help or sub.help).split("\n\n")[0]
        assert listed[name] == " ".join(summary.split())


def test_reports_summary_reads_as_one_sentence():
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "300"}, terminal_width=300)
    assert ("report     Compare in one HTML page (works offline) the policies of a compare or tune "
            "directory, or two or more runs, real or simulated.") in r.output


def test_a_seed_help_says_what_the_seed_does_in_its_command():
    """forecast's --seed said "seed (synthetic traces, searches)", and forecast has no --synthetic."""
    for path, command in COMMANDS:
        options = {o for p in command.params for o in getattr(p, "opts", [])}
        seed = next((p for p in command.params if "--seed" in getattr(p, "opts", [])), None)
        if seed is not None and "synthetic" in seed.help:
            assert "--synthetic" in options, path
    forecast = dict(COMMANDS)[("forecast",)]
    assert next(p.help for p in forecast.params if p.name == "seed") == (
        "trace model: the first draw's seed (draws use --seed to --seed + seeds - 1); also seeds "
        "regenerated attempts' lengths")
