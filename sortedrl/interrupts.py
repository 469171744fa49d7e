"""Holding Ctrl-C (and SIGTERM, SIGHUP) back while a few renames put outputs in place.

A command that is interrupted must leave its previous outputs or its new ones, never a mix, and
no stray copies: the renames that swap a finished output in (:mod:`sortedrl.outputs`, and the
model directories of :mod:`sortedrl.realrun.model`) are short, but an interrupt between two of
them would leave the previous output moved aside and not restored, or its backup not removed.
So they run with the signals blocked; a signal that arrives meanwhile is delivered when the block
ends, and raises as usual (``KeyboardInterrupt``, or the CLI's ``Terminated``).
"""

from __future__ import annotations

import contextlib
import signal

HELD = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@contextlib.contextmanager
def signals_deferred():
    """Ctrl-C, SIGTERM and SIGHUP wait until the block ends, then raise as usual."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
