"""A note that explains one column goes when a narrow terminal hides that column.

A report (ux45): ``COLUMNS=50 sortedrl compare ... --policy sync --policy sortedrl`` hid the
``stale`` column to fit, yet still printed its legend ``stale: mean/max staleness ...`` under the
table. A :class:`~sortedrl.tables.Note` names the column it explains; ``render`` prints it only
while that column is shown. The ``vs first`` note stays whenever the ratio is shown: it names
the ratio's terms, which a reader needs most when ``learnable`` itself is hidden.

Run: pytest tests/test_ux45_tables.py
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import STALE_NOTE
from sortedrl.tables import Col, Note, render

COLS = [Col("policy", left=True), Col("rate", "tok/s"), Col("stale", "versions", hide=1)]
ROWS = [["sync", "2,375", "0.00/0"], ["sortedrl", "3,525", "0.57/3"]]
NOTES = ["knobs: as used", Note("stale: mean/max staleness", "stale"), Note("rate: useful", "rate")]


def test_a_wide_table_prints_every_note_in_order() -> None:
    assert render(COLS, ROWS, 80, "t", NOTES, footer="end").splitlines() == [
        "t",
        "policy     rate     stale",
        "          tok/s  versions",
        "-------------------------",
        "sync      2,375    0.00/0",
        "sortedrl  3,525    0.57/3",
        "knobs: as used",
        "stale: mean/max staleness",
        "rate: useful",
        "end",
    ]


def test_a_hidden_column_takes_its_note_with_it() -> None:
    assert render(COLS, ROWS, 20, "t", NOTES, footer="end").splitlines() == [
        "t",
        "policy     rate",
        "          tok/s",
        "---------------",
        "sync      2,375",
        "sortedrl  3,525",
        "knobs: as used",
        "rate: useful",
        "hidden to fit 20",
        "columns: stale",
        "versions (--wide",
        "shows them)",
        "end",
    ]


def test_a_note_of_a_column_the_table_does_not_have_is_left_out() -> None:
    text = render(COLS[:2], [r[:2] for r in ROWS], None, "", NOTES, footer="")
    assert text.splitlines()[-2:] == ["knobs: as used", "rate: useful"]


def test_the_stale_legend_names_its_column() -> None:
    assert STALE_NOTE == Note("stale: mean/max staleness of the useful tokens, in policy versions",
                              "stale")


def _compare(tmp_path: Path, columns: int) -> list[str]:
    r = CliRunner().invoke(app, ["compare", "--trace", "math-16k", "--cluster",
                                 "h100-llama3.1-8b-2gpu", "--policy", "sync", "--policy",
                                 "sortedrl", "--out", str(tmp_path / f"c{columns}")],
                           env={"COLUMNS": str(columns)})
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()


def test_compare_at_200_columns_keeps_its_notes(tmp_path: Path) -> None:
    lines = _compare(tmp_path, 200)
    assert lines[1].split() == ["policy", "makespan", "useful", "learnable", "vs", "bubble",
                                "stale", "wasted", "updates", "GPUs"]
    notes = lines[lines.index("vs first: learnable tok/s over sync's"):]
    assert notes[:2] == ["vs first: learnable tok/s over sync's",
                         "stale: mean/max staleness of the useful tokens, in policy versions"]
    assert not any(line.startswith("hidden to fit") for line in lines)


def test_compare_at_50_columns_drops_the_legend_of_the_hidden_stale(tmp_path: Path) -> None:
    lines = _compare(tmp_path, 50)
    assert lines[2].split() == ["policy", "makespan", "useful", "vs", "GPUs"]  # (title: 2 lines)
    start = lines.index("vs first: learnable tok/s over sync's")  # the ratio is still shown
    assert lines[start:] == [
        "vs first: learnable tok/s over sync's",
        "updates differ: sortedrl makes 2 updates, sync",
        "  makes 4; fewer updates mean larger batches, a",
        "  different training run, not only a faster one",
        "one seed: sortedrl regenerated dropped responses,",
        "  whose lengths --seed 0 drew, so its figures move",
        "  with the seed; compare a few seeds before",
        "  trusting a close ranking",
        "hidden to fit 50 columns: learnable tok/s, stale",
        "versions, bubble %, wasted %, updates count",
        "(--wide shows them)",
        "columns are defined in docs/metrics.md; --json",
        "prints every field",
        f"wrote {tmp_path / 'c50'}/compare.json and one directory per policy",
    ]
    assert not any(line.startswith("stale") for line in lines)
