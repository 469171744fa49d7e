"""What ``sortedrl run``, ``calibrate --model`` and ``model init`` say on a stderr that is not a
terminal.

Why this exists: their progress bar (:class:`sortedrl.progress.Phases`) is drawn only on a
terminal. ``sortedrl run ... > run.log 2>&1``, a run under nohup or in CI printed nothing for
minutes (vLLM on a CPU takes tens of seconds to start, an update seconds or more), so a slow run
could not be told from a hung one. There these plain lines are printed instead, one as the
engines start and one per finished update (``calibrate --model``: one as its engine starts and
one per measurement, the bar's count), each ending in the seconds since the command began.
Nothing else is printed, and none of them on a terminal, where the bar is; which of the two
shows is decided as the bar decides it (rich's ``Console.is_terminal`` of stderr). Their words
and figures are defined in docs/metrics.md, "Progress lines".

``model init`` (minutes on two cores, nearly all of it the warm-start) showed nothing anywhere;
on a terminal it still shows nothing, elsewhere it prints :class:`ModelInitLines`: one as each
phase starts and one at each tenth of the warm-start's steps. These carry no elapsed seconds:
the step count shows it moving, and the lines are the same on every machine.

The stream and the clock are parameters, so a test drives the lines with a fake clock.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO


class Lines:
    """``LABEL: TEXT, N s elapsed`` lines on ``stream`` (default: stderr at the time of writing),
    N the whole seconds since this object was made (``clock`` None: ``LABEL: TEXT`` alone)."""

    def __init__(self, label: str, stream: TextIO | None = None,
                 clock: Callable[[], float] | None = time.monotonic) -> None:
        self.label, self.stream, self.clock = label, stream, clock
        self.start = clock() if clock is not None else 0.0

    def say(self, text: str) -> None:
        stream = self.stream or sys.stderr
        elapsed = f", {self.clock() - self.start:,.0f} s elapsed" if self.clock is not None else ""
        stream.write(f"{self.label}: {text}{elapsed}\n")
        stream.flush()  # (a log read while the run goes)

    def close(self) -> None:
        """Nothing to take down (the bar's counterpart has a display to stop)."""


class RunLines(Lines):
    """A real run's lines: :meth:`starting` once its checks have passed, :meth:`updated` after
    each update (a resumed run counts from its start: its first update's number is the one after
    the checkpoint's)."""

    def __init__(self, samples: int, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("run", stream, clock)
        self.samples = samples

    def starting(self, engines: int, device: str, on_ray: bool) -> None:
        where = " as Ray actors" if on_ray else ""
        self.say(f"starting {engines} vLLM engine{'s' if engines != 1 else ''} and the trainer "
                 f"on {device}{where}")

    def updated(self, update: int, trained: int, tokens: int) -> None:
        """``update`` (1 for the run's first) is done: ``trained`` samples trained so far, of the
        run's :attr:`samples`, and ``tokens`` generated so far."""
        self.say(f"update {update} done, {trained:,} of {self.samples:,} samples trained, "
                 f"{tokens:,} tokens generated")


class CountLines(Lines):
    """A counted command's lines, called as the bar is (``progress(advance, note)``): a call
    that advances says how many of ``total`` ``unit`` are done and what was just done (``note``);
    one that does not (0) says what starts now."""

    def __init__(self, label: str, total: int, unit: str, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(label, stream, clock)
        self.total, self.unit, self.done = total, unit, 0

    def __call__(self, advance: int, note: str = "") -> None:
        if not advance:
            self.say(note)
            return
        self.done += advance
        self.say(f"{self.done:,} of {self.total:,} {self.unit} done" + (f" ({note})" if note else ""))


class ModelInitLines(Lines):
    """``model init: TEXT`` lines, without elapsed seconds: :meth:`phase` as each phase starts,
    :meth:`stepped` after each warm-start step."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__("model init", stream, clock=None)

    def phase(self, text: str) -> None:
        self.say(text)

    def stepped(self, done: int, total: int) -> None:
        """Step ``done`` (1 for the first) of ``total`` is done: a line where it completes a
        tenth of them (every step, for fewer than ten)."""
        if done * 10 // total > (done - 1) * 10 // total:
            self.phase(f"{done:,} of {total:,} warm-start steps done")
