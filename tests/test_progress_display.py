"""The progress display fits an 80-column terminal without cutting a figure.

rich's one-row layout (description, a 40-character bar, the count, the times) was wider than
80 columns, so rich cut the count and both times to "..." (``0… elapsed 0:00:… left -:--:…``).
The phase's name now has a line of its own and the bar narrows first; the count says what it
counts (samples generated: a watched run counts finished rollouts, not trained samples).
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from sortedrl.progress import Phases


class Run:
    def __init__(self, finished: int, now: float) -> None:
        self.state = (finished, now)

    def progress(self) -> tuple[int, float]:
        return self.state


def shown(width: int, finished: int, total: int) -> list[str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=True, color_system=None)
    bar = Phases(console=console, delay=3600)
    try:
        bar.phase("simulating sortedrl (2 of 7 policies)", total=total)
        bar.watch(Run(finished, 4567.4), total)
        bar.unwatch()  # a last, exact count
        console.print(bar.bar.get_renderable())
    finally:
        bar.close()
    return buf.getvalue().splitlines()


@pytest.mark.parametrize(("finished", "total", "count"), [(1234, 2048, "1,234/2,048"),
                                                          (999_999, 1_000_000, "999,999/1,000,000")])
def test_counts_and_times_are_whole_at_80_columns(finished, total, count):
    lines = shown(80, finished, total)
    assert max(map(len, lines)) <= 80, lines
    assert "…" not in "".join(lines), lines
    assert lines[0] == "simulating sortedrl (2 of 7 policies), 4,567 s simulated"
    # (the elapsed time is whatever the clock says: only its whole h:mm:ss form is asserted)
    assert re.search(rf" {count} samples generated elapsed \d+:\d\d:\d\d left -:--:--$", lines[1]), lines
    assert len(lines) == 2


def test_a_long_phase_name_wraps_and_is_never_cut():
    buf = io.StringIO()
    console = Console(file=buf, width=40, force_terminal=True, color_system=None)
    bar = Phases(console=console, delay=3600)
    try:
        bar.phase("writing runs/compare-math-16k.jsonl-h100/sortedrl/timeline.npz (9 of 16 files)")
        console.print(bar.bar.get_renderable())
    finally:
        bar.close()
    text = "".join(buf.getvalue().splitlines()[:3])
    assert "writing runs/compare-math-16k.jsonl-h100/sortedrl/timeline.npz (9 of 16 files)" in text


def test_a_run_watched_after_a_note_is_labelled_by_its_phase_not_the_note():
    """One-process forecast: each draw is watched in turn within one phase, and the previous
    draw ended with the note "summarising the timeline"; the next draw's bar says the phase."""
    buf = io.StringIO()
    console = Console(file=buf, width=80, force_terminal=True, color_system=None)
    bar = Phases(console=console, delay=3600)
    try:
        bar.phase("forecast: 2 simulated runs", total=20)
        bar.watch(Run(10, 100.0), 10)
        bar(0, "summarising the timeline")
        assert bar.bar.tasks[-1].description == "summarising the timeline"
        bar.watch(Run(4, 50.0), 20)
        bar.unwatch()
        assert bar.bar.tasks[-1].description == "forecast: 2 simulated runs, 50 s simulated"
    finally:
        bar.close()
