"""Scratch directories for commands with no output directory to put them beside.

``forecast`` and ``tune`` simulate many draws or trials and keep each one's timeline on disk
while they summarise it, so a whole run's timeline waits on disk rather than in memory. Such a
scratch directory lives in the system's temporary directory and must go whatever happens: on
leaving, on an error, and in a worker process that is stopped at once (:mod:`sortedrl.parallel`
calls :func:`remove_temp_scratches` there). Kept apart from :mod:`sortedrl.outputs`, which
places a command's declared outputs.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from sortedrl.interrupts import signals_deferred
from sortedrl.outputs_commit import OutputError, remove_path

_temp_scratches: set[Path] = set()  # this process's temp_scratch directories now in use


@contextlib.contextmanager
def temp_scratch(command: str, parent: Path | None = None):
    """A scratch directory for a command with no output directory to put it beside (``forecast``
    and ``tune`` keep each draw's or trial's timeline there while they summarise it): in the
    system's temporary directory (``$TMPDIR``), or in ``parent`` (a scratch directory of the
    process that started this one's: a Ray worker that is killed cannot remove its own, so its
    driver's removal takes it too), removed on leaving, whatever happens (a worker process
    stopped at once removes its own: :func:`remove_temp_scratches`)."""
    def failed(e: OSError) -> str:
        return (f"{parent or tempfile.gettempdir()}: cannot make {command}'s scratch directory "
                f"({e.strerror or e}; set TMPDIR to a writable directory)")

    with noted_tempdir(parent, f"sortedrl-{command}-", _temp_scratches, failed) as tmp:
        yield tmp


@contextlib.contextmanager
def noted_tempdir(parent: Path | None, prefix: str, noted: set[Path], failed: Callable[[OSError], str]):
    """A directory made by ``mkdtemp`` in ``parent`` and added to ``noted`` with the stop signals
    held (a stop between the two would leave a directory nobody knows to remove), removed and
    forgotten on leaving, whatever happens (removed first: a worker stopped in between removes
    what is still noted). One that cannot be made: :class:`OutputError` ``failed(error)``."""
    tmp = None
    try:
        with signals_deferred():
            try:
                tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
            except OSError as e:
                raise OutputError(failed(e)) from None
            noted.add(tmp)
        yield tmp
    finally:
        if tmp is not None:
            # (a stop in the middle of removing it left it half removed, noted, and not removed again)
            with signals_deferred():
                with contextlib.suppress(OSError):  # (the error in flight, if any, is the one to report)
                    remove_path(tmp)
                noted.discard(tmp)


def remove_temp_scratches() -> None:
    """Remove the scratch directories of :func:`temp_scratch` that this process has in use."""
    for tmp in list(_temp_scratches):
        with contextlib.suppress(OSError):
            remove_path(tmp)


def forget_temp_scratches() -> None:
    """In a forked worker: the scratch directories it inherited are its parent's to remove."""
    _temp_scratches.clear()
