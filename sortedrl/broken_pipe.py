"""A reader that stops reading: ``sortedrl clusters | head -1``, ``sortedrl export ... | head``.

A reader that has what it wants (``head``, ``grep -q``, a pager the user quit) closes its end of
the pipe, and the next write to it fails. That is how a pipeline ends, not a failure of the
command, so the command ends quietly: nothing on stderr, exit code 141. That is what the shell
reports for ``cat``, ``grep`` or ``git``, which the same write kills with SIGPIPE (128 + 13),
and it follows the exit codes of sortedrl's other signals (Ctrl-C 130, SIGTERM 143, SIGHUP 129):
a script can tell "the reader left" from success (0) and from bad input (2). (Before, by
command: ``error: output: Broken pipe`` and exit 2, or 120 when the interpreter's last flush failed
too; or a silent exit 1 where rich or click caught the write: ``policies``, ``--help``.)

Only stdout or stderr losing its reader is this. Python ignores SIGPIPE, so a write to a pipe with
no reader raises :class:`BrokenPipeError`, which does not say which pipe: ``poll`` does (POLLERR
on a pipe's write end once its reader is gone, POLLHUP on a socket whose peer closed). A broken
pipe anywhere else (a worker's, a server's) is a failure, reported as one ``error:`` line as
before. The stream that lost its reader is pointed at ``/dev/null`` before the exit, so that the
interpreter's last flush of it has nowhere to fail ("Exception ignored ... BrokenPipeError").
(Under ``PYTHONUNBUFFERED``, Python's text stdout drops what a partial write to a pipe left
unwritten, without an error: an output longer than the pipe holds, whose reader leaves in the
middle of it, then ends with exit 0 rather than 141, quietly all the same.)

Why not restore SIGPIPE's default (killed at the write): that would end the process in the middle
of whatever it was doing, skipping the ``finally`` blocks that remove scratch directories and
staged outputs, and for a broken pipe to a worker too. Here the error unwinds like Ctrl-C: a
command prints its results after its outputs are written (all or nothing,
:mod:`sortedrl.outputs`), so a reader that leaves finds them complete; a write that failed
mid-run would remove what was staged on its way out.

The CLI's command group (``cli_common.OneLineUsageErrors``) catches it around option parsing
(``--help``, ``--version``) and every command, before click's own handler (which exits 1), and
:func:`rich_raises_broken_pipes` stops rich's consoles from exiting 1 on their own. There any
other failed write (``sortedrl --version > /dev/full``: no space left on the device) is one
``error:`` line and exit 2, as a command reports it (it was a 100-line traceback and exit 1).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
from collections.abc import Callable

READER_GONE = 128 + signal.SIGPIPE  # 141, as a shell reports a process SIGPIPE ended


def gone_streams() -> list:
    """sys.stdout and sys.stderr, those of them whose reader has gone."""
    return [stream for stream in (sys.stdout, sys.stderr) if _reader_gone(stream)]


def _reader_gone(stream) -> bool:
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # replaced (a test's capture) or closed
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def exit_if_reader_gone(error: BaseException) -> None:
    """End the process quietly with :data:`READER_GONE` if ``error`` is a write to stdout or
    stderr whose reader has gone; otherwise return (the caller reports it)."""
    if not isinstance(error, BrokenPipeError):
        return
    gone = gone_streams()
    if not gone:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        for stream in gone:
            os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)
    sys.exit(READER_GONE)


@contextlib.contextmanager
def reader_gone_exits(line: Callable[[OSError], str] | None = None):
    """A block in which a write to stdout or stderr whose reader has gone ends the process
    quietly (:func:`exit_if_reader_gone`). Given ``line``, any other OS error (a write to a full
    disk) ends it with the one line ``error: line(error)`` on stderr and exit code 2; without,
    it goes on up, as every other error does."""
    try:
        yield
    except OSError as e:
        exit_if_reader_gone(e)
        if line is None:
            raise
        exit_with_error(f"error: {line(e)}", 2)


def exit_with_error(message: str, code: int) -> None:
    """Print ``message`` on stderr and exit with ``code``, whichever stream cannot be written
    (:func:`drop_if_unwritable`)."""
    drop_if_unwritable(sys.stdout)
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(message + "\n")
    drop_if_unwritable(sys.stderr)
    sys.exit(code)


def drop_if_unwritable(stream) -> None:
    """Flush ``stream``; if that fails (a full disk), point it at ``/dev/null``, so that what is
    still buffered cannot fail again at the interpreter's last flush (which exits 120)."""
    try:
        stream.flush()
    except (OSError, ValueError):  # (ValueError: closed)
        _to_devnull(stream)


def _to_devnull(stream) -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):  # (replaced: a test's capture)
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, stream.fileno())
        finally:
            os.close(devnull)


def rich_raises_broken_pipes() -> None:
    """Make rich's consoles raise a broken pipe as any other write does, instead of exiting 1 at
    once (``Console.on_broken_pipe``, which rich documents as the method to change): for the
    CLI's own process only (its entry point calls this), never on import."""
    from rich.console import Console

    Console.on_broken_pipe = _raise_it


def _raise_it(console) -> None:
    raise  # (rich calls this in its `except BrokenPipeError`: the error goes on up)
