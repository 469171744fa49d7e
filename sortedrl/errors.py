"""User-facing errors.

Every problem a user can cause (a bad trace row, an unknown policy, an impossible cluster) is
raised as a :class:`SortedRLError` whose message is one line naming the file, row or field and
what is wrong. The CLI prints that line and exits with code 2, without a traceback.
"""


class SortedRLError(Exception):
    """A problem with the user's input; the message is one self-contained line."""

    exit_code = 2


class TraceError(SortedRLError):
    """A malformed trace file or table."""


class ConfigError(SortedRLError):
    """An unknown policy or preset, a bad ``--set`` key or value, or an impossible cluster."""


class PolicyError(SortedRLError):
    """A policy asked the controller for an illegal action, or stalled."""
