"""Holding Ctrl-C (and SIGTERM, SIGHUP) back while a few renames put outputs in place.

A command that is interrupted must leave its previous outputs or its new ones, never a mix, and
no stray copies: the renames that swap a finished output in (:mod:`sortedrl.outputs`, and the
model directories of :mod:`sortedrl.realrun.model`) are short, but an interrupt between two of
them would leave the previous output moved aside and not restored, or its backup not removed.
So they run with the signals' handlers swapped for one that notes them; when the renames are
done the handlers are put back and each signal that arrived is raised again, and handled as usual
(``KeyboardInterrupt``, or the CLI's ``Terminated``). Python runs signal handlers in the main
thread only, so this is where it works; elsewhere the renames run as they are. (Blocking the
signals with ``pthread_sigmask`` is no good here: it holds them back from the calling thread only,
and a progress display's thread takes them instead.)
"""

from __future__ import annotations

import contextlib
import signal
import threading

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block ends, then are handled as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    before = {signum: signal.signal(signum, lambda signum, frame: arrived.append(signum)) for signum in HELD}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):  # each once, in the order they came
            signal.raise_signal(signum)
