"""What a run directory holds: the marker a command writes there, and what in it is not the run's.

Split out of :mod:`sortedrl.outputs`, which decides whether a directory may be replaced: it may
without ``--force`` only when everything in it is the previous run's. The marker
(``.sortedrl-run``) names the command and its options and lists every file and folder the
command wrote; what ``plot`` and ``report`` add (their default pages, and a temporary or backup
one a killed ``plot`` left) counts as the run's, and so do the files an operating system drops in
a folder someone browsed (``.DS_Store``, ``._*``, ``Thumbs.db``, ``desktop.ini``), which are
deleted with the run as before. A marker written before the list was recorded is read by the
names each command writes (:data:`_LAYOUTS`). A trace or cluster file among the options is
recorded by its resolved path; an older marker's path as typed is read from the current
directory (:func:`same_options`); the knobs match in any order, and a run of other options is
refused naming them (:func:`differences`). The work directories a command makes in a run directory it
writes into (``.sortedrl-new-PID-*``, ``-old-PID-*``, ``-scratch-PID-*``, ``-probe-PID-*``:
:mod:`sortedrl.outputs_commit`), left there by a command killed outright, count as the run's
(:func:`is_work_entry`). Each is named with the process that made it (:func:`work_prefix`): one
of a process that is still running and is not this one is another command's live work, writing
into the same directory at the same time (:func:`is_live_work`): never moved, never removed,
and not counted against the directory being empty. One of a process that is gone, or named
without one (as before the names held it), is left over.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import stat
from pathlib import Path

from sortedrl import streams

MARKER = ".sortedrl-run"
_TIMELINES = ("timeline.npz", "timeline.jsonl")  # timeline_file.NAMES (a test keeps them equal)
_ADDED = ("timeline.html", "report.html")  # the default pages of `plot` and `report`
_ONE_RUN = frozenset({"summary.json", *_TIMELINES, "timeline.html"})
# what each command's run directory holds, by name, for a marker that does not list its files
# (written before it did): the top level's names, and those of each subfolder (compare's LABEL/)
_LAYOUTS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "simulate": (_ONE_RUN | {"report.html"}, frozenset()),
    "compare": (frozenset({"compare.json", "report.html"}), _ONE_RUN),
    "tune": (frozenset({"tune.json", "report.html"}), frozenset()),
}
# dropped by a file browser, not the user's work: deleted with the run (Finder, AppleDouble, Explorer)
OS_METADATA = frozenset({".DS_Store", "Thumbs.db", "desktop.ini"})
# the work directories of a command writing into a run directory (outputs_commit), by tag
WORK_PREFIX = ".sortedrl-"
WORK_TAGS = ("new", "old", "scratch", "probe")
_WORK_NAME = re.compile(r"\.sortedrl-(?:new|old|scratch|probe)-([0-9]+)-")  # (mkdtemp's part has no '-')
_PATHS = ("source", "cluster")  # the options that may name a file: recorded by resolved path
# the knobs, each set by its key: their order changes no output, a run's files byte for byte
# (not --policy's: compare lists its policies in that order, tune its best per policy)
_UNORDERED = ("sets", "params")
_OPTIONS = {"source": "--trace", "policies": "--policy", "sets": "--set", "params": "--param"}  # (the others: --KEY)
_SAME_OPTION = {"--trace-model": "--trace"}  # (one option by two names: a marker cannot tell them apart)
_HASH = re.compile(r"(sha256:[0-9a-f]{12})[0-9a-f]+")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}")


def is_label(label: object) -> bool:
    """Whether ``label`` can name a directory inside an output directory (:func:`check_label`)."""
    return (isinstance(label, str) and _LABEL.fullmatch(label) is not None
            and not label.endswith(".") and ".." not in label)


def is_work_entry(name: str, tags: tuple[str, ...] = WORK_TAGS) -> bool:
    """Whether ``name``, at the top of a run directory, is a work directory of sortedrl's
    (:data:`WORK_TAGS`, or those of ``tags``)."""
    return any(name.startswith(f"{WORK_PREFIX}{tag}-") for tag in tags)


def work_prefix(tag: str) -> str:
    """The name's start of a work directory this process makes (``.sortedrl-TAG-PID-``)."""
    return f"{WORK_PREFIX}{tag}-{os.getpid()}-"


def is_work_dir(top: Path, name: str, tags: tuple[str, ...] = WORK_TAGS) -> bool:
    """Whether the entry ``name`` of ``top`` is a work directory (a directory, not a link: a
    user's file of such a name is the user's)."""
    return is_work_entry(name, tags) and os.path.isdir(top / name) and not os.path.islink(top / name)


def is_live_work(top: Path, name: str) -> bool:
    """Whether the entry ``name`` of ``top`` is a work directory of another process that is
    running now (another command writing into ``top``): it is that command's to move or remove."""
    found = _WORK_NAME.match(name)
    return (found is not None and int(found[1]) != os.getpid() and _alive(int(found[1]))
            and is_work_dir(top, name))


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # (another user's process: running)
        return True
    except (OverflowError, OSError):
        return False
    return True


def interrupted_write(top: Path) -> str | None:
    """The name of the left-over ``.sortedrl-old-*`` directory of ``top`` that holds a previous
    run (its marker) moved aside by a command killed while it moved its outputs in, if any."""
    for name in sorted(os.listdir(top)):
        if (is_work_dir(top, name, ("old",)) and not is_live_work(top, name)
                and os.path.isfile(top / name / MARKER)):
            return name
    return None


def read_marker(out: Path) -> dict:
    """The command and options recorded in a run directory, or {} if none (or not as we write
    it: a marker without a command string is no marker)."""
    try:
        raw = json.loads((out / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return raw if isinstance(raw, dict) and isinstance(raw.get("command"), str) else {}


def compare_part(top: Path) -> Path | None:
    """The ``sortedrl compare`` run directory that ``top`` is one policy's run of (``C`` for
    ``C/on``: its marker lists ``on/``), or None. Such a directory holds no marker of its own."""
    parent = Path(os.path.abspath(top)).parent
    marker = read_marker(parent)
    if marker.get("command") != "compare" or (Path(top) / MARKER).exists():
        return None
    written = marker.get("files")
    name = Path(os.path.abspath(top)).name
    listed = f"{name}/" in written if isinstance(written, list) else is_label(name) and os.path.isdir(top)
    return Path(top).parent if listed else None


def identity(marker: dict) -> dict:
    """The command and options of a marker (without the list of what it wrote)."""
    return {k: v for k, v in marker.items() if k != "files"}


def same_options(marker: dict, current: dict) -> bool:
    """Whether a run directory's ``marker`` records the command and options ``current`` (an
    identity as :meth:`~sortedrl.outputs.Outputs.run_dir` builds it). Its trace (``source``) and
    ``cluster`` files match when they name, from the current directory, the files ``current``
    names by their resolved paths: a marker written before the paths were resolved holds them
    as they were typed, relative perhaps, and is the same run only if they still reach those
    files (else it is a run with other options, replaced only with ``--force``). The knobs
    (``--set``, ``--param``) match in any order (:func:`_canonical`)."""
    previous, current = _comparable(marker, current)
    return previous == current


def differences(marker: dict, current: dict, names: dict[str, str | None] | None = None) -> str:
    """The options in which ``current`` differs from the run of ``marker``, each as
    ``--seed: 1 then 2`` (the marker's value, then this command's), joined by ``; ``. ``names``:
    an identity key's option as this command was given it (``source``: ``--synthetic``), None
    for one with no effect on this run (a trace file's ``steps``: not typed, only its default),
    named only when nothing else differs."""
    previous, current = _comparable(marker, current)
    given = (names or {}).get("source") or _option_of(current.get("source"))  # (this command's, as typed)
    names = {**_OPTIONS, **(names or {})}
    differing = [key for key in sorted(previous.keys() | current.keys()) if previous.get(key) != current.get(key)]
    named = [key for key in differing if names.get(key, "") is not None] or differing
    return "; ".join(_source_change(previous.get("source"), current.get("source"), given)
                     if key == "source" and _option_of(previous.get("source")) != _SAME_OPTION.get(given, given)
                     else f"{names.get(key) or '--' + key.replace('_', '-')}: {_shown(previous.get(key))} "
                     f"then {_shown(current.get(key))}" for key in named)


def _option_of(source: object) -> str:
    """The option a marker's ``source`` came from: a synthetic preset's name ``--synthetic``,
    anything else ``--trace`` (a file, as typed in an older marker; a pipe; a trace model:
    ``--trace-model`` is the same option)."""
    from sortedrl.traces.synth import preset_names

    return "--synthetic" if source in preset_names() else "--trace"


def _source_change(old: object, new: object, given: str) -> str:
    """A run's trace that changed option too: ``--synthetic math-16k then --trace /t/math-16k.jsonl``
    (a synthetic preset and a trace file of the same name share a default directory); the new
    one by the option this command was ``given`` (``--trace-model``), the old by its value."""
    return f"trace: {_option_of(old)} {_shown(old)} then {given} {_shown(new)}"


def unrecorded_pipe(marker: dict, current: dict) -> str | None:
    """Why the run of ``marker`` cannot be told from ``current``'s when its trace is a pipe
    recorded by its path (``/dev/fd/63``, ``/dev/stdin``, a FIFO: an older sortedrl, before the
    hash of its bytes) and ``current``'s a pipe too, all else the same; None otherwise."""
    old, new = marker.get("source"), current.get("source")
    if not (isinstance(old, str) and isinstance(new, str) and new.startswith("pipe sha256:")):
        return None
    try:
        fifo = stat.S_ISFIFO(os.stat(old).st_mode) if not streams.is_descriptor(old) else False
    except (OSError, ValueError):
        fifo = False
    if (streams.is_descriptor(old) or old == "/dev/stdin" or fifo) and same_options({**marker, "source": new}, current):
        return ("whose piped trace was recorded without its content (by an older sortedrl), so it cannot be "
                "told from this one")
    return None


def _comparable(marker: dict, current: dict) -> tuple[dict, dict]:
    previous = identity(marker)
    for key in _PATHS:
        old, new = previous.get(key), current.get(key)
        if isinstance(old, str) and isinstance(new, str) and old != new and os.path.isfile(old):
            previous[key] = str(Path(old).resolve())
    return _canonical(previous), _canonical(current)


def _canonical(options: dict) -> dict:
    """``options`` with the knobs of :data:`_UNORDERED` sorted: their order changes no output
    (each is set by its key), unless a key is given twice (the last wins): then kept as given."""
    out = dict(options)
    for key in _UNORDERED:
        given = out.get(key)
        if isinstance(given, list) and all(isinstance(g, str) for g in given):
            targets = ["".join(g.partition("=")[0].split()) for g in given]  # (LABEL.key, spaces aside)
            if len(set(targets)) == len(targets):
                out[key] = sorted(given)
    return out


def _shown(value: object) -> str:
    """An option's value in a message: a list's items by spaces, a hash shortened."""
    if isinstance(value, list):
        return " ".join(map(_shown, value)) or "none"
    return "none" if value is None else _HASH.sub(r"\1...", str(value))


def listing(top: Path) -> list[str]:
    """Every file and folder under ``top``, relative, a folder's with a trailing ``/``."""
    out = []
    for folder, dirs, files in os.walk(top):
        rel = Path(folder).relative_to(top)
        out += [(rel / d).as_posix() + "/" for d in dirs] + [(rel / f).as_posix() for f in files]
    return sorted(out)


def added_pages(top: Path, marker: dict) -> list[str]:
    """The pages ``plot`` and ``report`` added to the run directory ``top`` (a ``report.html``,
    a ``timeline.html`` beside a run's timeline) that are there now and that its command did not
    write (its ``marker``'s list): replacing the run deletes them with it, so the note says so."""
    written = marker.get("files")
    written = {w for w in written if isinstance(w, str)} if isinstance(written, list) else set()
    pages = []
    for folder, _, files in os.walk(top):
        rel = Path(folder).relative_to(top)
        pages += [(rel / f).as_posix() for f in files if f in _ADDED and (rel / f).as_posix() not in written]
    return sorted(pages)


def foreign_entry(top: Path, marker: dict) -> str | None:
    """The first entry under the run directory ``top`` (sorted, a folder before what it holds)
    that neither the command of its ``marker`` wrote nor ``plot`` or ``report`` added (their
    default pages, and a temporary one a killed ``plot`` left), as ``name`` or ``folder/``;
    None when there is none. A marker that lists no files is read by :data:`_LAYOUTS`."""
    written = marker.get("files")
    if isinstance(written, list) and all(isinstance(w, str) for w in written):
        dirs = {w.rstrip("/") for w in written if w.endswith("/")}
        files = {w for w in written if not w.endswith("/")}
        files |= {"report.html"} | {posixpath.join(posixpath.dirname(f), "timeline.html")
                                     for f in files if posixpath.basename(f) in _TIMELINES}
    else:
        top_names, sub_names = _LAYOUTS.get(marker.get("command"), (frozenset(), frozenset()))
        files, dirs = set(top_names), set()
        if sub_names:
            with os.scandir(top) as it:
                dirs = {e.name for e in it if e.is_dir(follow_symlinks=False) and is_label(e.name)}
            files |= {f"{d}/{n}" for d in dirs for n in sub_names}
    return _first_foreign(top, "", files, dirs)


def user_entries(top: Path) -> str | None:
    """What ``top``, a directory that holds no run of sortedrl's, holds but sortedrl's work
    directories: its first entry (sorted, a folder as ``name/``) and how many more, for a
    refusal to name what ``--force`` would delete; None when there is nothing else."""
    names = sorted(n for n in os.listdir(top) if n != MARKER and not is_work_dir(top, n))
    if not names:
        return None
    first = names[0] + ("/" if os.path.isdir(top / names[0]) and not os.path.islink(top / names[0]) else "")
    return first + (f" and {len(names) - 1:,} more" if len(names) > 1 else "")


def _first_foreign(folder: Path, prefix: str, files: set[str], dirs: set[str]) -> str | None:
    with os.scandir(folder) as it:
        entries = sorted(it, key=lambda e: e.name)
    for e in entries:
        rel = prefix + e.name
        if rel == MARKER or (not prefix and e.is_dir(follow_symlinks=False) and is_work_entry(e.name)):
            continue
        if prefix and e.name == MARKER and e.is_file(follow_symlinks=False):
            continue  # a run sortedrl wrote into one of this run's directories (simulate --out C/on --force)
        if e.is_dir(follow_symlinks=False):
            if rel not in dirs:
                return rel + "/"
            try:
                found = _first_foreign(Path(e.path), rel + "/", files, dirs)
            except OSError:  # (unreadable: what it holds cannot be told to be the run's)
                return rel + "/"
            if found is not None:
                return found
        elif rel not in files and not _stale_page(prefix, e.name, files) and not _os_metadata(e.name):
            return rel
    return None


def _stale_page(prefix: str, name: str, files: set[str]) -> bool:
    """Whether ``name`` is a default page's temporary or backup that a killed ``plot`` or
    ``report`` left (``Outputs.write``: ``.timeline.html.tmp-*``, ``.timeline.html.old-PID``)."""
    return any(prefix + page in files and (name.startswith(f".{page}.tmp-") or name.startswith(f".{page}.old-"))
               for page in _ADDED)


def _os_metadata(name: str) -> bool:
    """A file a file browser drops in a folder it showed (:data:`OS_METADATA`, macOS's ``._*``)."""
    return name in OS_METADATA or name.startswith("._")
