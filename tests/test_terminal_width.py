"""``COLUMNS`` is read alike by every console, and ``--help`` never cuts a word (sortedrl.terminal).

An audit (cliout41): ``COLUMNS=0 sortedrl policies`` and ``COLUMNS=0 sortedrl --help`` printed
nothing, exit 0, and ``trace stats`` only its footer (rich took 0 for the width); at 60 columns
``simulate --help`` printed ``--trace,--trac…`` and at 70 ``runs/TRACE-POLICY-CL…``, although
the README says ``--help`` wraps its text and never cuts it.

Run: pytest tests/test_terminal_width.py
"""

from __future__ import annotations

import collections
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
import typer
from rich.cells import cell_len
from rich.console import Console
from typer.testing import CliRunner

from sortedrl import terminal
from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def commands(group: click.Command, path: tuple[str, ...] = ()):
    yield path, group
    for name, sub in getattr(group, "commands", {}).items():
        yield from commands(sub, (*path, name))


COMMANDS = list(commands(typer.main.get_command(app)))


@pytest.mark.parametrize("value, now", [
    ("0", None), ("00", None), ("abc", None), ("", None), ("-5", None), ("8x", None), ("1_000", None),
    ("1", "40"), ("39", "40"), ("40", "40"), (" 80 ", "80"), ("200", "200")])
def test_a_width_is_unset_when_not_one_and_floored_at_40(value, now):
    for name in ("COLUMNS", "TERMINAL_WIDTH"):
        env = {name: value, "OTHER": "0"}
        terminal.normalise_columns(env)
        assert env == ({"OTHER": "0"} if now is None else {name: now, "OTHER": "0"})


def test_a_console_made_before_is_floored():
    narrow, wide = Console(width=0), Console(width=120)
    terminal.floor_width(narrow)
    terminal.floor_width(wide)
    assert narrow.width >= terminal.MIN_WIDTH and wide.width == 120


@pytest.mark.parametrize("args", [["policies"], ["--help"], ["simulate", "--help"],
                                  ["trace", "stats", "logic-8k"]])
def test_columns_0_or_garbage_is_no_width_and_a_narrow_one_is_40(args):
    """Outside a terminal, no width is rich's default of 80 columns."""
    def out(columns):
        r = runner.invoke(app, args, env={"COLUMNS": columns})
        assert r.exit_code == 0, r.output
        return r.stdout

    unset, forty = out(None), out("40")
    assert out("0") == out("x") == unset and out("7") == forty
    assert len(unset.splitlines()) > 5 and unset != forty
    if args[0] != "trace":  # (trace stats' rich table is as wide as its widest value)
        assert max(cell_len(line) for line in forty.splitlines()) <= 40


def test_columns_0_prints_the_help_as_the_installed_command_does():
    """COLUMNS and typer's TERMINAL_WIDTH are normalised before typer reads them (``python -m
    sortedrl``, the console script's entry, before typer is imported: TERMINAL_WIDTH=abc failed
    that import with a traceback): 0 or not a number is no width, so rich's 80 outside a
    terminal; a narrow one is 40 (TERMINAL_WIDTH=0 made typer's help console 0 wide)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "0"}
    env.pop("PYTHONUNBUFFERED", None)
    for module, width, expected in (("sortedrl", "abc", 80), ("sortedrl", "0", 80), ("sortedrl.cli", "0", 80),
                                    ("sortedrl", "9", 40), ("sortedrl.cli", "9", 40)):
        r = subprocess.run([sys.executable, "-m", module, "--help"], env={**env, "TERMINAL_WIDTH": width},
                           capture_output=True, text=True, timeout=300)
        assert (r.returncode, r.stderr) == (0, ""), r.stderr
        assert max(cell_len(line) for line in r.stdout.splitlines()) == expected
        assert f"Usage: python -m {module}" in r.stdout and "│ simulate " in r.stdout


@pytest.mark.parametrize("width", [40, 47, 60, 70, 100])
def test_no_help_page_cuts_anything_at_any_width(width):
    """Every option name appears whole (a folded help word is whole across its lines), no line
    is wider than the terminal, and nothing ends in an ellipsis."""
    for path, command in COMMANDS:
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        names = [o for p in command.params for o in (*p.opts, *p.secondary_opts)]
        missing = [n for n in names if not re.search(re.escape(n) + r"(?![\w-])", r.stdout)]
        assert (missing, "…" in r.stdout) == ([], False), (path, width)
        assert max(cell_len(line) for line in r.stdout.splitlines()) <= width, (path, width)


def test_the_help_text_gives_way_before_the_names():
    """At 80 columns the names keep their column and the help wraps beside them, its longest
    word (runs/TRACE-POLICY-CLUSTER,) whole; at 60 (a help column of 10 split words there) and
    at 40 each option has a line of its own, its help indented under it."""
    r = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "80"})
    assert "│    --trace,--trace-model        <path>       length trace (.jsonl, .csv,     │" in r.stdout.splitlines()
    assert "│                                              runs/TRACE-POLICY-CLUSTER, and  │" in r.stdout.splitlines()
    r = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "60"})
    lines = r.stdout.splitlines()
    at = lines.index("│   --trace,--trace-model <path>                           │")
    assert lines[at + 1] == "│     length trace (.jsonl, .csv, .parquet; a bundled one  │"
    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "40"})
    lines = r.stdout.splitlines()
    at = lines.index("│   --gpu-memory-utilization <float>   │")
    assert lines[at + 1:at + 3] == ["│     cuda: vLLM's share of the GPU    │",
                                    "│     (the colocated trainer uses the  │"]
    assert "│ * --model <path>                     │" in lines


def words(text: str) -> collections.Counter:
    """The words of a help page (split at spaces, as rich wraps), without the panels' borders."""
    return collections.Counter(re.sub(r"[│╭╮╰╯─]", " ", text).split())


@pytest.mark.parametrize("path", [path for path, _ in COMMANDS], ids=lambda p: " ".join(p) or "sortedrl")
def test_no_word_of_a_help_page_is_split_at_any_width(path):
    """A review (rev41): a 10-column help column split words at 56-64 columns (``COLUMNS=60
    simulate --help``: ``module:Clas|s``, ``agentic-ret|ool``; ``COLUMNS=58 calibrate --help``:
    ``--save-resu|lt``). At every width from 40 to 100 each word of the page as printed 1000
    wide is printed whole as often, but a word longer than a help line indented in its panel
    (the terminal's width less 8: ``{gpu}-{model}[-tpN][-Ngpu][-Nseq][-disagg].``, 44, at 40-51)."""
    wide = words(runner.invoke(app, [*path, "--help"], env={"COLUMNS": "1000"}).stdout)
    for width in range(40, 101):
        r = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        narrow = words(r.stdout)
        split = sorted(w for w, n in wide.items() if narrow[w] < n and cell_len(w) <= width - 8)
        assert split == [], (width, split)
