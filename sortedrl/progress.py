"""Progress that tells the truth: the phases of a command (reading, simulating, writing), each
with its elapsed time, and a bar with a total, a rate and the time remaining where the work can
be counted.

Why phases: on a large trace most of the wait is outside the simulation (reading the trace,
summarising the timeline, writing hundreds of MB of it). One bar over the simulated samples sits
at 100% through all of that, which reads as a hang. Here each phase names what is happening.

Nothing is shown for a command that finishes within ``delay`` seconds (most runs): a timer
thread starts the display only once the command has run that long, so a phase that makes no
calls (reading a trace) still shows. The display is transient, on stderr, and only on a terminal.

A simulation is watched rather than told: :meth:`Phases.watch` hands the bar the run's timeline,
and a thread polls it twice a second for the samples generated so far (rollouts that finished,
at most the trace's samples) and the simulated time, so the simulator's hot path makes no
progress calls at all (only a display that is shown is polled). The count is of generation, not
training: a policy that generates ahead (``sortedrl``) reaches it while its last updates remain.
Runs in worker processes (``--workers N``) are watched there, and the bar counts their sum
(:mod:`sortedrl.parallel_progress`).

The display fits an 80-column terminal without cutting a figure: the phase's name is a line of
its own (wrapped, never cut), and under it the spinner, a bar that narrows first, the count with
its unit, and the elapsed and remaining times.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Protocol

from rich.console import Console, RenderableType
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Column
from rich.text import Text


class Watched(Protocol):
    def progress(self) -> tuple[int, float | None]:
        """Samples finished so far, and the simulated time reached (s; None for runs in
        parallel, each at its own time: :mod:`sortedrl.parallel_progress`)."""
        ...


POLL_S = 0.5
GENERATED = "samples generated"  # what a watched run's count is


class CountColumn(ProgressColumn):
    """``1,234/2,048 samples generated``: done of total, with the unit the phase set (none:
    the phase's name says what it counts)."""

    def render(self, task: Task) -> Text:
        total = "?" if task.total is None else f"{int(task.total):,}"
        unit = task.fields.get("unit", "")
        return Text(f"{int(task.completed):,}/{total}" + (f" {unit}" if unit else ""))


class PhaseBar(Progress):
    """Each phase's name on a line of its own, never cut (rich's one-row layout cut the counts
    and times to "..." on an 80-column terminal), and under it its bar, count and times."""

    def get_renderables(self) -> Iterable[RenderableType]:
        for task in self.tasks:
            if task.visible:
                yield Text(task.description, overflow="fold")
                yield self.make_tasks_table([task])


def phase_bar(console: Console) -> PhaseBar:
    def whole() -> Column:
        return Column(no_wrap=True)

    return PhaseBar(SpinnerColumn(table_column=whole()),
                    BarColumn(bar_width=20, table_column=Column(no_wrap=False)),  # narrows first
                    CountColumn(table_column=whole()), TextColumn("elapsed", table_column=whole()),
                    TimeElapsedColumn(table_column=whole()), TextColumn("left", table_column=whole()),
                    TimeRemainingColumn(table_column=whole()), console=console, transient=True)


class Phases:
    """Call :meth:`phase` as the command moves on; call the object to advance the current bar
    (``note`` relabels it, as a backend does when it moves to summarising)."""

    def __init__(self, console: Console | None = None, delay: float = 1.0) -> None:
        self.bar = phase_bar(console or Console(stderr=True))
        self.task = None
        self.label = "simulating"  # the current phase's own name (a note relabels its bar only)
        self.watched: tuple[Watched, str, int, int] | None = None  # run, label, seen, cap
        self.lock = threading.Lock()
        self.started = self.closed = False
        self.timer = threading.Timer(delay, self._start)
        self.timer.daemon = True
        self.timer.start()

    def phase(self, label: str, total: int | None = None) -> Phases:
        """Finish the current phase and begin ``label`` (``total``: units of work, if countable)."""
        self.unwatch()
        with self.lock:
            if self.task is not None:
                self.bar.update(self.task, visible=False)
            self.task = self.bar.add_task(label, total=total)
            self.label = label
        return self

    def __call__(self, advance: int, note: str = "") -> None:
        if self.task is None:
            self.phase(note or "working")
        if self.watched is not None:
            if not note:
                return  # the watcher counts
            self.unwatch()
        self.bar.update(self.task, advance=advance, **({"description": note} if note else {}))

    def watch(self, run: Watched, samples: int) -> None:
        """Count the current phase in ``run``'s generated samples (at most ``samples``) and show
        its simulated time, until :meth:`unwatch` (or the next phase, a note, the end)."""
        if self.task is None:
            self.phase("simulating")
        with self.lock:
            label = self.label  # (not the bar's text: a note, "summarising", may have replaced it)
            self.watched = (run, label, 0, samples)
            if self.task is not None:
                self.bar.update(self.task, unit=GENERATED)
        threading.Thread(target=self._poll_loop, args=(run,), daemon=True).start()

    def unwatch(self) -> None:
        """Stop watching, after a last, exact count."""
        if self.watched is not None:
            self._poll()
            self.watched = None

    def _poll_loop(self, run: Watched) -> None:
        stop = threading.Event()
        while not stop.wait(POLL_S):
            watched = self.watched
            if watched is None or watched[0] is not run or self.closed:
                return
            if self.started:  # nothing to draw: cost the simulation nothing
                self._poll()

    def _poll(self) -> None:
        with self.lock:
            if self.watched is None or self.task is None:
                return
            run, label, seen, cap = self.watched
            finished, now = run.progress()
            finished = min(finished, cap)
            self.watched = (run, label, finished, cap)
            simulated = "" if now is None else f", {now:,.0f} s simulated"  # (None: parallel runs)
            self.bar.update(self.task, advance=finished - seen, description=label + simulated)

    def file(self, name: str, index: int, count: int) -> None:
        """The writing phase: one file of ``count`` is being written."""
        self.phase(f"writing {name} ({index + 1} of {count} files)")

    def _start(self) -> None:
        with self.lock:
            if not self.closed and self.bar.console.is_terminal:  # nothing in logs or pipes
                self.bar.start()
                self.started = True

    def close(self) -> None:
        self.unwatch()
        with self.lock:
            self.closed = True
            self.timer.cancel()
            if self.started:
                self.bar.stop()

    def __enter__(self) -> Phases:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
