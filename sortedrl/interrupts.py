"""Holding Ctrl-C (and SIGTERM, SIGHUP) back while a few renames put outputs in place.

A command that is interrupted must leave its previous outputs or its new ones, never a mix, and
no stray copies: the renames that swap a finished output in (:mod:`sortedrl.outputs`, and the
model directories of :mod:`sortedrl.realrun.model`) are short, but an interrupt between two of
them would leave the previous output moved aside and not restored, or its backup not removed.
So they run with the signals' handlers swapped for one that notes them; when the renames are
done the handlers are put back and each signal that arrived is raised again, and handled as usual
(``KeyboardInterrupt``, or the CLI's ``Terminated``). The block also covers removing the
previous output (a run directory's few files); should that take long (a slow network disk), the
same signal a second time goes through at once. Python runs signal handlers in the main
thread only, so this is where it works; elsewhere the renames run as they are. (Blocking the
signals with ``pthread_sigmask`` is no good here: it holds them back from the calling thread only,
and a progress display's thread takes them instead.)

Two more rules for the stop signals live here, at the two ends of a command: a stop whose
exception Python dropped (raised in a finalizer) still keeps the new outputs out
(:func:`raise_if_stopped`), and one that lands once the command has ended keeps its exit code
(:func:`ignore_once_done`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block ends, then are handled as usual; the same
    signal a second time goes through at once (a user who presses Ctrl-C again means it)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before: dict[int, object] = {}

    def note(signum: int, frame) -> None:
        handler = before.get(signum)
        if signum in arrived and callable(handler):
            handler(signum, frame)
        arrived.append(signum)

    try:
        for signum in HELD:  # each old handler is kept as it is swapped: a partial swap is undone
            before[signum] = signal.signal(signum, note)
        yield
    finally:
        _restore(list(before.items()))
        for signum in dict.fromkeys(arrived):  # each once, in the order they came
            signal.raise_signal(signum)


def _restore(handlers: list) -> None:
    """Put every handler back, even when one put back raises at once (a Ctrl-C that waited)."""
    if handlers:
        try:
            signal.signal(*handlers[0])
        finally:
            _restore(handlers[1:])


class Terminated(BaseException):
    """SIGTERM or SIGHUP arrived. Raised in the main thread, as Ctrl-C raises KeyboardInterrupt,
    so that every ``finally`` cleans up (scratch directories, staged outputs, worker processes);
    a BaseException, so that no ``except Exception`` takes it for a failure of its own."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum  # as a shell reports a process the signal ended

    def __str__(self) -> str:
        return f"terminated ({signal.Signals(self.signum).name})"


# stop signals whose handler ran in this command (the CLI's: cli_common.end_cleanly_on_termination)
ARRIVED: list[int] = []
# the outputs this command has put in place (sortedrl.outputs), as given: a stop after them (while
# the table prints) says they are complete, so that its error line is not read as "nothing written"
WRITTEN: list[str] = []


def stopped_line(what: str) -> str:
    """The error line's text for a stop (``interrupted (Ctrl-C)``), naming the outputs already
    written, if any."""
    if not WRITTEN:
        return what
    return f"{what}, after writing {', '.join(WRITTEN)} (complete)"


def raise_if_stopped() -> None:
    """Before a command puts its outputs in place: a stop whose exception was lost goes on now.
    A signal's handler raises in whatever code runs when it lands, and an exception raised in a
    finalizer, an at-fork hook or a C function that cannot raise is dropped ("Exception
    ignored in ..."): the command then ran on, and replaced its previous outputs, exit 0."""
    if ARRIVED:
        signum = ARRIVED[0]
        ARRIVED.clear()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated(signum)


_ended = [False]  # the command has ended: see ignore_once_done
_seen_in_teardown: set[int] = set()  # the stop signals that came once it had


def ignore_once_done() -> None:
    """The command has ended (its outputs written, its table printed, or its error said): in
    the interpreter's teardown that follows (freeing a large run's arrays takes tenths of a
    second) Ctrl-C, SIGTERM and SIGHUP are let be, the command's exit code kept. One that landed
    there ended a complete run with exit 130 and no error line, or with a ``KeyboardInterrupt``
    traceback from a finalizer. While threads are joined and exit handlers run, the same signal
    a second time ends the process at once (exit 128 + its number), as in
    :func:`signals_deferred`, so a teardown that hangs there stays stoppable; after them they
    are ignored (Python puts its own handlers back to the default near its very end, which
    ended a finished run by the signal: an ignored signal stays ignored)."""
    if threading.current_thread() is not threading.main_thread():
        return
    seen = _seen_in_teardown

    def once(signum: int, frame) -> None:
        if signum in seen:
            os._exit(128 + signum)
        seen.add(signum)

    for signum in HELD:
        if signal.getsignal(signum) is not signal.SIG_IGN:  # (under nohup: ignored already)
            signal.signal(signum, once)
    _ended[0] = True


def _ignore_at_the_end() -> None:
    """Registered when this module is imported, before Ray or any command registers its exit
    handlers, so it runs after theirs (last in, first out). A signal that came once already is
    left to end the process at its next coming (a late hang stays stoppable by it)."""
    if _ended[0]:
        for signum in HELD:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # (under nohup: stays ignored)
                signal.signal(signum, signal.SIG_DFL if signum in _seen_in_teardown else signal.SIG_IGN)


atexit.register(_ignore_at_the_end)
