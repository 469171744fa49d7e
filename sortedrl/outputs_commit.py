"""Putting a command's staged outputs in place, all or nothing (:mod:`sortedrl.outputs` checks
and builds them; this moves them in).

An output that does not exist yet, and every output file, is built in a hidden sibling
(``.NAME.tmp-*``) and renamed onto its path; a previous one is renamed aside first
(``.NAME.old-PID``) and removed once every output is in place. Each of those renames is atomic.

A run directory that exists already (an empty one the user made, a mount point, a container's
volume, the previous run's directory) is kept as it is, with its mode, owner, group and mount,
and written into: the new entries are built in a hidden directory inside it
(``.sortedrl-new-*``), the entries it held (the previous run, or with ``--force`` whatever it
held) are moved into another (``.sortedrl-old-*``), the marker ``.sortedrl-run`` first, then
the new ones are moved in, the marker last, and the old ones removed. (Replacing the directory
itself, as before, failed on a mount point (``Device or resource busy``) and under a parent the
user may not write, and gave the user's directory our mode and group.)

What is guaranteed: signals wait until every output is in place (:mod:`sortedrl.interrupts`),
and a rename that fails undoes every one before it, so a failure, Ctrl-C, SIGTERM or SIGHUP
leaves either every previous output or every new one, and never a file half-written. A
directory written into changes by one rename per entry it holds, not by one rename: only a
process killed outright (SIGKILL, a power cut) between two of those renames can leave it part
old and part new. It then holds no marker (moved out first, in last), its other entries lie in
its ``.sortedrl-old-*`` and ``.sortedrl-new-*`` directories, and a rerun refuses it (files not
written by sortedrl) rather than mistake it for a run, naming the ``.sortedrl-old-*`` directory
that holds the previous run. Work directories a killed command left in a run directory
(``.sortedrl-new-*``, ``-old-*``, ``-scratch-*``) are otherwise counted as the run's, and removed
with it (:func:`sortedrl.run_marker.is_work_entry`).

Two commands may write into the same directory at once (the last to finish wins, as when each
replaced it): each work directory is named with the process that made it, and one of another
process still running is its own, never moved or removed here
(:func:`sortedrl.run_marker.is_live_work`); the moves into a directory hold an exclusive
``flock`` on it (:func:`dir_lock`), and the check of what it holds a shared one, so neither
command sees the other's half-done moves.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Collection
from pathlib import Path

from sortedrl.aside import aside
from sortedrl.errors import SortedRLError
from sortedrl.interrupts import signals_deferred
from sortedrl.run_marker import MARKER, is_live_work, work_prefix


def commit(staged: list[tuple[Path, Path]], into: Collection[Path] = (), keep: Collection[Path] = (),
           done: Callable[[], None] | None = None) -> None:
    """Put each staged ``(path, tmp)`` in place: ``tmp`` renamed onto ``path``, or for a
    ``path`` in ``into`` (a directory that exists) ``tmp``'s entries moved into it in place of
    its own but those in ``keep`` (this command's work directories). On a failure the ones
    already done are undone. An interrupt waits until the outputs are in place and the
    previous ones removed; ``done`` runs before it goes on (the outputs are in place then: an
    interrupt that waited is reported as coming after them)."""
    with signals_deferred(), contextlib.ExitStack() as locks:
        for path in sorted(set(into)):
            locks.enter_context(dir_lock(path))
        _renames(staged, set(into), {Path(k) for k in keep})
        if done is not None:
            done()


@contextlib.contextmanager
def dir_lock(path: Path, shared: bool = False):
    """An advisory lock on the directory ``path`` (``flock``: exclusive, or ``shared``) while
    the block runs, so that two commands writing into it do not interleave their moves; none
    where it cannot be taken (a filesystem without locks)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _renames(staged: list[tuple[Path, Path]], into: set[Path], keep: set[Path]) -> None:
    undo: list = []  # what puts each output done (or begun) back as it was, in order
    old: list[tuple[Path, Path]] = []  # (output, what it held before), to remove once all are in
    path = None
    try:
        for path, tmp in staged:
            if path in into:
                moves = _Into(path, tmp, keep | {tmp})
                undo.append(moves.undo)
                moves.do()
                old.append((path, moves.backup))
                continue
            backup = None
            if path.exists() or path.is_symlink():
                backup = path.with_name(aside(path.name, "old-") + str(os.getpid()))
                remove_path(backup)
                os.rename(path, backup)
            undo.append(lambda path=path, backup=backup: _restore(path, backup))
            os.rename(tmp, path)
            if backup is not None:
                old.append((path, backup))
    except BaseException as e:
        for put_back in reversed(undo):
            put_back()
        if isinstance(e, OSError) and path is not None:
            e.filename = str(path)  # (the output that could not be put in place, not a temporary)
        raise
    for path, tmp in staged:  # (emptied by the moves)
        if path in into:
            with contextlib.suppress(OSError):
                tmp.rmdir()
    for path, backup in old:  # (the outputs are in place: a failure here only leaves the old one)
        try:
            remove_path(backup)
        except OSError as e:
            raise OutputError(f"{path}: written, but the previous one could not be removed "
                              f"({e.strerror or e}); it is left at {backup}") from None


class _Into:
    """The moves that write the entries built in ``new`` into the directory ``out``, and their
    undoing: ``out``'s entries (but ``keep``) into a backup directory inside it, the marker
    first; then ``new``'s into ``out``, the marker last. Another running command's work
    directories stay where they are (:func:`~sortedrl.run_marker.is_live_work`)."""

    def __init__(self, out: Path, new: Path, keep: set[Path]) -> None:
        self.out, self.new, self.keep = out, new, keep
        self.backup: Path | None = None
        self.moved_out: list[str] = []
        self.moved_in: list[str] = []

    def do(self) -> None:
        self.backup = Path(tempfile.mkdtemp(dir=self.out, prefix=work_prefix("old")))
        for name in sorted(os.listdir(self.out), key=lambda n: (n != MARKER, n)):
            if (self.out / name not in self.keep and self.out / name != self.backup
                    and not is_live_work(self.out, name)):
                os.rename(self.out / name, self.backup / name)
                self.moved_out.append(name)
        for name in sorted(os.listdir(self.new), key=lambda n: (n == MARKER, n)):
            os.rename(self.new / name, self.out / name)
            self.moved_in.append(name)

    def undo(self) -> None:
        for name in reversed(self.moved_in):
            os.rename(self.out / name, self.new / name)
        for name in reversed(self.moved_out):  # (the marker back last)
            os.rename(self.backup / name, self.out / name)
        if self.backup is not None:
            self.backup.rmdir()


def _restore(path: Path, backup: Path | None) -> None:
    remove_path(path)
    if backup is not None:
        os.rename(backup, path)


class OutputError(SortedRLError):
    """An output path that cannot be written, or may not be (an input, someone else's files)."""


def check_writable_into(folder: Path, option: str, out: Path) -> None:
    """An existing directory is written into (:mod:`sortedrl.outputs_commit`): make and remove a
    work directory in it now, so that one that cannot be written (its mode, an immutable flag, a
    read-only mount) is refused before the work, not at its very end. Signals held meanwhile."""
    with signals_deferred():
        try:
            os.rmdir(tempfile.mkdtemp(dir=folder, prefix=work_prefix("probe")))
        except OSError as e:
            raise OutputError(f"{option} {out}: cannot write into it ({e.strerror or e})") from None


def write_protected(top: Path) -> str | None:
    """The first folder under ``top`` (itself included) whose files this user cannot remove."""
    unreadable: list[str] = []
    for folder, _, _ in os.walk(top, onerror=lambda e: unreadable.append(e.filename)):
        if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
            return folder
    return unreadable[0] if unreadable else None


def remove_path(path: Path) -> None:
    """Remove a file, link or directory tree; nothing if it is gone already."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
