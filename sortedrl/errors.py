"""User-facing errors.

Every problem a user can cause (a bad trace row, an unknown policy, an impossible cluster) is
raised as a :class:`SortedRLError` whose message is one line naming the file, row or field and
what is wrong. The CLI prints that line and exits with code 2, without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SortedRLError(Exception):
    """A problem with the user's input; the message is one self-contained line."""

    exit_code = 2


class TraceError(SortedRLError):
    """A malformed trace file or table."""


class ConfigError(SortedRLError):
    """An unknown policy or preset, a bad ``--set`` key or value, or an impossible cluster."""


class PolicyError(SortedRLError):
    """A policy asked the controller for an illegal action, or stalled."""


def not_found(path: object, what: str = "no such file", stdin: bool = True) -> str:
    """The line for an input that is not there; ``-``, which many tools read as standard input,
    says how to give that here: ``/dev/stdin`` where the reader takes a pipe (``stdin``;
    :mod:`sortedrl.streams`), else a file (a reader that tells the format by the file's name or
    lists a directory)."""
    if str(path) != "-":
        return f"{path}: {what}"
    how = "for standard input give /dev/stdin" if stdin else "standard input is not read here: save it to a file first"
    return f"{path}: {what} ({how})"


def did_you_mean(word: str, known: Iterable[str], prefix: str = "") -> str:
    """``": did you mean NAME?"`` for the known name closest to a mistyped ``word`` (difflib's
    default cutoff, 0.6: ``sortd`` is ``sortedrl``, ``nope`` is nothing), written after ``prefix``
    as the user would type it (``--set sortedrl.mode``); ``""`` where none is close."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return f": did you mean {prefix}{close[0]}?" if close else ""
