"""Where a command's outputs go: checked before any work, written all-or-nothing.

Why this exists: a command that runs for minutes and then fails to write, or that writes over
its own input, or that merges into (or silently replaces) someone's directory, costs the user more
than the run. So every command declares its outputs first (:class:`Outputs`), each is checked at
once (writable, not a file where a directory goes, not an input, not someone else's directory),
and only then does the work start. At the end every output is built aside and moved into place
(:mod:`sortedrl.outputs_commit`, which says exactly what is guaranteed): a new output or a file
is built in a temporary sibling and renamed onto its path; a run directory that exists already
(an empty one of the user's, a mount point, a previous run) is kept, with its mode, group and
mount, and written into: the new entries are built in a hidden directory inside it and moved
in, in place of what it held. If any move fails, the ones already made are undone, so a
command leaves either all its outputs or none of them (and the previous ones, if it was
replacing them). A directory written into must be writable itself (not its parent): that is
tried before the work.

A run directory holds a small marker, ``.sortedrl-run``, naming the command (and its options)
that wrote it, and every file and folder it wrote there. A directory is replaced without
``--force`` only when it is empty or holds a previous run of the same command with the same
options and nothing else: replacing it deletes all it holds, so a file of the user's in it (notes,
a folder of their own) makes it refused, naming the file, as a directory of someone else's files
is. What ``plot`` and ``report`` add to a run directory (their default pages) counts as the
run's; a marker written before the list was recorded is read by the names each command writes.

An output that is a symbolic link is refused: the new output would replace the link, not be
written where it points (a link among the parents is followed, as any path is).

Labels that become directory names (``compare --policy LABEL=NAME``) go through
:func:`check_label`, so a label can never name a path outside ``--out``.

A new command uses it in three lines (``force`` from ``cli_common.FORCE``)::

    outs = Outputs("forecast", force, inputs=[trace_path])       # before any work
    out = outs.file(out, "--out")                                 # or outs.run_dir(out, default)
    ...                                                           # the work
    outs.write({out: write_json(result, out)})                    # all or nothing
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from sortedrl import jsonio
from sortedrl.aside import aside, suffix
from sortedrl.errors import SortedRLError
from sortedrl.interrupts import WRITTEN, raise_if_stopped, signals_deferred
from sortedrl.outputs_commit import (
    OutputError,
    commit,
    dir_lock,
    remove_path,
)
from sortedrl.outputs_replace import replacing_note
from sortedrl.realrun.rundir_force import in_checkpoint
from sortedrl.run_marker import (
    MARKER,
    is_label,
    listing,
    work_prefix,
)
from sortedrl.scratch import noted_tempdir

Writer = Callable[[Path], None]  # writes one file at the path it is given


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_label(label: str, reserved: Iterable[str] = (), option: str = "--policy") -> str:
    """``label`` if it can name a file inside an output directory, else a one-line error."""
    if not is_label(label):
        raise OutputError(f"{option} {label!r}: a label names a directory, so it must be 1-64 letters, "
                          "digits or '_.+-', start with a letter or digit, and have no '..'")
    taken = {r.lower() for r in reserved}
    if label.lower() in taken:
        raise OutputError(f"{option} {label!r}: that name is reserved for an output file "
                          f"({', '.join(sorted(reserved))}); choose another label")
    return label


def write_json(obj: object, path: Path | str) -> Writer:
    """Writes ``obj`` as JSON. It is formatted here, before any output is written, so that a
    value JSON cannot hold (an infinite float) is an error naming ``path`` and the field."""
    text = jsonio.dumps(obj, str(path), indent=2) + "\n"
    return lambda p: p.write_text(text, encoding="utf-8")


def write_text(text: str) -> Writer:
    return lambda p: p.write_text(text, encoding="utf-8")


@dataclass(frozen=True)
class _Target:
    path: Path
    option: str
    is_dir: bool
    into: bool = False  # a directory that exists: written into (outputs_commit)


class Outputs:
    """The outputs of one command. Declare each with :meth:`run_dir` or :meth:`file` before any
    work (they are checked there), then write them all with :meth:`write`."""

    def __init__(self, command: str, force: bool = False, inputs: Iterable[Path | None] = (),
                 scanned: Iterable[Path] = ()) -> None:
        self.command, self.force = command, force
        self.inputs = {Path(p).resolve(): Path(p) for p in inputs if p is not None}  # (as given)
        # directories read as a whole (a framework's dump): no output may lie inside one
        self.scanned = {Path(p).resolve(): Path(p) for p in scanned}
        self.targets: dict[Path, _Target] = {}
        self.work: set[Path] = set()  # the scratch directories in use inside a directory written into
        self.notes: list[str] = []
        self.identity: dict = {}
        self.names: dict[str, str | None] | None = None  # (run_dir's: how a refusal names the options)

    # -- checks, before any work -----------------------------------------------------------------

    def run_dir(self, path: Path | None, default: Path, identity: dict | None = None,
                option: str = "--out", names: dict[str, str | None] | None = None) -> Path:
        """Check a run directory (``path``, or ``default`` when the user gave none; ``names``: :func:`differences`'s)."""
        given = path is not None
        out = Path(path if given else default)
        self.identity = {"command": self.command, **(identity or {})}
        self.names = names
        real = _abs(out)
        into = real.is_dir() and not real.is_symlink()  # (written into: its parent is not written)
        self._check_place(out, option, parent=not into)
        _check_not_link(out, option, "directory")
        if Path.cwd().is_relative_to(real.resolve()):
            raise OutputError(f"{option} {out}: is the current directory or holds it; give a new directory")
        self._check_inputs(out, option, is_dir=True)  # (first: --force would not help)
        if real.exists():
            with dir_lock(real, shared=True):  # (not while another command moves its outputs in)
                note = replacing_note(out, option, given, self.command, self.force, self.identity, self.names)
                if note is not None:
                    self.notes.append(note)
        return self._add(out, option, is_dir=True, into=into)

    def file(self, path: Path | None, option: str, default: Path | None = None) -> Path | None:
        """Check an output file (``None`` and no ``default``: the option was not given). A
        ``default`` is this command's own file (``RUNDIR/timeline.html``): it is replaced with a
        note, while a file the user named is replaced only with ``--force``."""
        if path is None and default is None:
            return None
        out = Path(path if path is not None else default)
        self._check_place(out, option)
        _check_not_link(out, option, "file")
        real = _abs(out)
        if real.is_dir():
            raise OutputError(f"{option} {out}: is a directory, not a file")
        self._check_inputs(out, option, is_dir=False)
        if real.exists() or real.is_symlink():
            if path is not None and not self.force:
                raise OutputError(f"{option} {out}: exists (add --force to overwrite it)")
            self.notes.append(f"note: replacing {out}")
        return self._add(out, option, is_dir=False)

    def place(self, path: Path, option: str) -> Path:
        """Check only that the directory ``path`` can be created, and declare it (so that no
        other output may overlap it), for outputs written as they go. Returns the path to write,
        normalised as it was checked (``a/../b`` is ``b``, whether or not ``a`` exists)."""
        self._check_place(Path(path), option)
        self._check_inputs(Path(path), option, is_dir=True)
        self._add(Path(path), option, is_dir=True)
        return Path(os.path.normpath(path))

    @contextlib.contextmanager
    def scratch(self, path: Path):
        """A temporary directory for a command's work files (a long simulation's timeline,
        spilled: ``timeline_spill``), in the nearest existing directory of the output ``path``:
        the place checked writable for it, on the disk that will hold it (inside a directory
        written into, which may be all that is writable). Removed on leaving, whatever happens
        (Ctrl-C included); nothing in it is an output."""
        target = self.targets.get(_abs(path))
        parent, prefix = _abs(path).parent, aside(Path(path).name, "scratch-")
        if target is not None and target.into:
            parent, prefix = _abs(path), work_prefix("scratch")
        while not parent.exists():
            parent = parent.parent
        where = f"{target.option} {target.path}" if target else str(path)
        # (an error making it comes before any work: the output will not be writable either)
        with noted_tempdir(parent, prefix, self.work, lambda e: f"{where}: cannot write ({e.strerror or e})") as tmp:
            yield tmp

    def _check_inputs(self, out: Path, option: str, is_dir: bool) -> None:
        """No output may be an input, hold one, or lie inside a directory read as a whole (a
        framework's dump: the next read of it would take the output in)."""
        real = _abs(out).resolve()
        for p in self.inputs:
            if real == p and not is_dir:
                raise OutputError(f"{option} {out}: is an input of this command; write the output elsewhere")
            if is_dir and p.is_relative_to(real):
                raise OutputError(f"{option} {out}: holds the input {p}; write the output elsewhere")
        for p, name in self.scanned.items():
            if real.is_relative_to(p):
                raise OutputError(f"{option} {out}: is inside the input directory {name}; "
                                  "write the output elsewhere")
        if (ckpt := in_checkpoint(real)) is not None:
            raise OutputError(f"{option} {out}: would write into {ckpt}, a run's checkpoint (--resume "
                              "reads it); write the output elsewhere")

    def _add(self, out: Path, option: str, is_dir: bool, into: bool = False) -> Path:
        key = _abs(out)
        for other in self.targets.values():
            mine = _abs(other.path)
            if key == mine or key.is_relative_to(mine) or mine.is_relative_to(key):
                raise OutputError(f"{option} {out}: overlaps {other.option} {other.path}; give separate paths")
        self.targets[key] = _Target(out, option, is_dir, into)
        return out

    def _check_place(self, out: Path, option: str, parent: bool = True) -> None:
        """A name, and (``parent``: an output made or renamed there) a writable directory to
        make it in."""
        if not Path(os.path.abspath(out)).name:
            raise OutputError(f"{option} {out}: give a file or directory name")
        if not parent:
            return
        parent = Path(os.path.abspath(out)).parent
        while not parent.exists():
            if parent.is_symlink():
                raise OutputError(f"{option} {out}: {parent} is a broken link")
            parent = parent.parent
        if not parent.is_dir():
            raise OutputError(f"{option} {out}: {parent} is a file, not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            why = "is on a read-only filesystem" if _read_only(parent) else "is not writable"
            raise OutputError(f"{option} {out}: {parent} {why}")

    # -- writing, after the work -----------------------------------------------------------------

    def write(self, contents: dict[Path, Writer | dict[str, Writer]],
              progress: Callable[[str, int, int], None] | None = None) -> None:
        """Write every declared output: a run directory gets a dict of relative names to writers
        (or one writer that fills the directory it is given), a file gets one writer. All are
        built aside, then renamed into place together. ``progress(name, index, count)`` is
        told of each file as it is written."""
        names: list[str] = []
        for path, what in contents.items():
            names += [f"{path}/{n}" for n in what] if isinstance(what, dict) else [str(path)]
        self._progress = (lambda: progress(names[self._written], self._written, len(names))) if progress else None
        self._written = 0
        staged: list[tuple[Path, Path]] = []
        made_dirs: list[Path] = []
        target: _Target | None = None
        try:
            for path, what in contents.items():
                dest = _abs(path)  # (as checked: `a/../b` is `b`, whether or not `a` exists)
                target = self.targets.get(dest)
                if target is None:
                    raise AssertionError(f"{path} was not declared")
                _make_parents(dest, made_dirs)
                staged.append((dest, self._stage(dest, what)))
            target = None
            raise_if_stopped()  # (a stop whose exception was lost: these outputs are not put in place)
            commit(staged, into=[p for p, _ in staged if self.targets[p].into], keep=self.work,
                   done=lambda: WRITTEN.extend(str(self.targets[p].path) for p, _ in staged))
        except BaseException as e:
            for _, tmp in staged:
                remove_path(tmp)
            for d in reversed(made_dirs):
                with contextlib.suppress(OSError):
                    d.rmdir()
            if isinstance(e, OSError):
                target = target or (self.targets.get(_abs(e.filename)) if e.filename else None)
                where = f"{target.option} {target.path}" if target else str(e.filename or "output")
                raise OutputError(f"{where}: cannot write ({e.strerror or e})") from None
            raise

    def _stage(self, path: Path, what: Writer | dict[str, Writer]) -> Path:
        """Build one output beside its target (a directory written into: inside it); on a
        failure remove what was built."""
        is_dir, into = self.targets[path].is_dir, self.targets[path].into
        tmp = None
        try:
            with signals_deferred():  # (a stop between making the copy and naming it left it there)
                if is_dir:
                    where, prefix = (path, work_prefix("new")) if into else (path.parent, aside(path.name, "tmp-"))
                    tmp = Path(tempfile.mkdtemp(dir=where, prefix=prefix)).absolute()
                else:
                    fd, name = tempfile.mkstemp(dir=path.parent, prefix=aside(path.name, "tmp-"),
                                                suffix=suffix(path.suffix))
                    os.close(fd)
                    tmp = Path(name).absolute()
            if is_dir and not into:  # (mkdtemp's 0700; the setgid bit of a parent's kept, and so its group)
                os.chmod(tmp, 0o777 & ~umask() | os.stat(tmp).st_mode & stat.S_ISGID)
            if is_dir:
                for name, write in (what.items() if isinstance(what, dict) else [(".", what)]):
                    dest = tmp / name
                    if not Path(os.path.abspath(dest)).is_relative_to(tmp):
                        raise AssertionError(f"{name} escapes {path}")
                    _make_parents(dest, [])
                    self._tick()
                    write(dest)
                marker = {**self.identity, "files": listing(tmp)}  # (what a rerun may replace)
                (tmp / MARKER).write_text(json.dumps(marker, sort_keys=True) + "\n", encoding="utf-8")
            else:
                self._tick()
                what(tmp)
                os.chmod(tmp, 0o666 & ~umask())
        except BaseException as e:
            if tmp is not None:
                remove_path(tmp)
            if isinstance(e, SortedRLError) and tmp is not None and str(tmp) in str(e):
                raise self._named(e, tmp, path) from None
            raise
        return tmp

    def _named(self, e: SortedRLError, tmp: Path, path: Path) -> OutputError:
        """A writer's own error names the copy it was given to build (a trace writer's "cannot
        write", a page's): name the output as the user gave it instead, as an OSError here does."""
        target = self.targets[path]
        text = str(e).replace(str(tmp), f"{target.option} {target.path}")
        cut = re.fullmatch(r"(.*?): cannot write: (.*)", text, re.S)
        return OutputError(f"{cut[1]}: cannot write ({cut[2]})" if cut else text)

    def _tick(self) -> None:
        if self._progress is not None:
            self._progress()
            self._written += 1


def _check_not_link(out: Path, option: str, what: str) -> None:
    """An output may not be a symbolic link: its new contents are renamed onto the path, which
    would replace the link, not write where it points."""
    link = _abs(out)
    if link.is_symlink():
        real = os.path.realpath(link)  # (where it points, as a path from here)
        rel = os.path.relpath(real)
        raise OutputError(f"{option} {out}: is a symbolic link to {real if rel.startswith('..') else rel}; "
                          f"give the {what} it points to, or another path")


def _make_parents(path: Path, made: list[Path]) -> None:
    """Create the missing parents of ``path`` with the user's umask, adding each to ``made`` as
    it is made (so that a failure part way leaves none that a caller does not know of)."""
    missing = []
    parent = path.parent
    while not parent.exists():
        missing.append(parent)
        parent = parent.parent
    for d in reversed(missing):
        d.mkdir()
        made.append(d)


def _abs(path: Path | str) -> Path:
    """``path`` absolute, ``..`` taken off as a shell's ``cd`` does: what is checked and written."""
    return Path(os.path.abspath(path))


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False
