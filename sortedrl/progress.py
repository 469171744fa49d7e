"""Progress that tells the truth: the phases of a command (reading, simulating, writing), each
with its elapsed time, and a bar with a total, a rate and the time remaining where the work can
be counted.

Why phases: on a large trace most of the wait is outside the simulation (reading the trace,
summarising the timeline, writing hundreds of MB of it). One bar over the simulated samples sits
at 100% through all of that, which reads as a hang. Here each phase names what is happening.

Nothing is shown for a command that finishes within ``delay`` seconds (most runs): a timer
thread starts the display only once the command has run that long, so a phase that makes no
calls (reading a trace) still shows. The display is transient, on stderr, and only on a terminal.
"""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class Phases:
    """Call :meth:`phase` as the command moves on; call the object to advance the current bar
    (``note`` relabels it, as a backend does when it moves to summarising)."""

    def __init__(self, console: Console | None = None, delay: float = 1.0) -> None:
        self.bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TextColumn("elapsed"), TimeElapsedColumn(),
                            TextColumn("left"), TimeRemainingColumn(),
                            console=console or Console(stderr=True), transient=True)
        self.task = None
        self.lock = threading.Lock()
        self.started = self.closed = False
        self.timer = threading.Timer(delay, self._start)
        self.timer.daemon = True
        self.timer.start()

    def phase(self, label: str, total: int | None = None) -> Phases:
        """Finish the current phase and begin ``label`` (``total``: units of work, if countable)."""
        with self.lock:
            if self.task is not None:
                self.bar.update(self.task, visible=False)
            self.task = self.bar.add_task(label, total=total)
        return self

    def __call__(self, advance: int, note: str = "") -> None:
        if self.task is None:
            self.phase(note or "working")
        self.bar.update(self.task, advance=advance, **({"description": note} if note else {}))

    def file(self, name: str, index: int, count: int) -> None:
        """The writing phase: one file of ``count`` is being written."""
        self.phase(f"writing {name} ({index + 1} of {count} files)")

    def _start(self) -> None:
        with self.lock:
            if not self.closed and self.bar.console.is_terminal:  # nothing in logs or pipes
                self.bar.start()
                self.started = True

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.timer.cancel()
            if self.started:
                self.bar.stop()

    def __enter__(self) -> Phases:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
