"""Whether a run directory that exists may be replaced, and the note that says so.

Split out of :mod:`sortedrl.outputs` (which declares and writes a command's outputs): the rules
for an existing ``--out`` directory. It is replaced without ``--force`` only when it is empty
or holds a previous run of the same command with the same options and nothing else; every other
case is refused with one line naming what is in the way (another command's run, a file of the
user's, an interrupted write, a compare's part, other options, a write-protected file).
"""

from __future__ import annotations

import os
from pathlib import Path

from sortedrl.outputs_commit import OutputError, check_writable_into, write_protected
from sortedrl.run_marker import (
    added_pages,
    compare_part,
    differences,
    foreign_entry,
    interrupted_write,
    is_live_work,
    is_work_dir,
    read_marker,
    same_options,
    unrecorded_pipe,
    user_entries,
)


def replacing_note(out: Path, option: str, given: bool, command: str, force: bool, identity: dict,
                   names: dict[str, str | None] | None) -> str | None:
    """Check that the existing directory ``out`` (as given) may be replaced as ``--out`` of
    ``command``; return the note to print (None: it is empty, written into without a word), or
    raise the refusal naming what is in the way."""
    real = Path(os.path.normpath(out))  # (as checked; relative as given, for the messages)
    if not real.is_dir():
        raise OutputError(f"{option} {out}: exists and is not a directory")
    # (empty but for another command's live work and the work directories a killed one left,
    # not a previous run moved aside)
    if all(is_live_work(real, n) or is_work_dir(real, n, ("new", "scratch", "probe")) for n in os.listdir(real)):
        check_writable_into(real, option, out)  # written into without a word, if it can be
        return None
    if force:
        note = f"note: replacing {out} (--force)"
    else:
        previous = read_marker(real)
        moved = interrupted_write(real) if not previous else None
        if moved is not None:
            raise OutputError(f"{option} {out}: holds an interrupted sortedrl write; the previous run "
                              f"is in {out}/{moved}: move its entries back into {out}, or --force to discard it")
        owner = compare_part(real) if not previous else None
        if owner is not None:
            raise OutputError(f"{option} {out}: is the {real.name!r} run of the `sortedrl compare` run in "
                              f"{owner} (its compare.json holds it too); give another directory, or "
                              f"--force to replace it")
        if previous.get("command") != command:
            foreign = foreign_entry(real, previous) if previous else user_entries(real)
            what = f"a `sortedrl {previous['command']}` run" if previous else ""
            mine = f"files not written by sortedrl: {foreign}" if foreign else ""
            said = " and ".join(filter(None, (what, mine))) or "files not written by sortedrl"
            raise OutputError(f"{option} {out}: not empty ({said}); "
                              "give another directory, or --force to replace it"
                              + (", deleting them" if foreign else ""))
        foreign = foreign_entry(real, previous)
        if foreign is not None:  # (replacing the run would delete it with the run)
            raise OutputError(f"{option} {out}: not empty (a `sortedrl {command}` run and files "
                              f"not written by sortedrl: {foreign}); give another directory, or "
                              f"--force to replace it, deleting them")
        if not same_options(previous, identity):  # (an explicit --out too: it held results of their own)
            keep = "give --out DIR to keep both" if not given else "give another directory to keep both"
            if (why := unrecorded_pipe(previous, identity)) is not None:
                raise OutputError(f"{out} holds a `sortedrl {command}` run {why}; give --force to replace it, or {keep[5:]}")
            raise OutputError(f"{out} holds a `sortedrl {command}` run with other options "
                              f"({differences(previous, identity, names)}); {keep}, "
                              f"or --force to replace it")
        pages = added_pages(real, previous)  # (plot's and report's: deleted with the run)
        note = f"note: replacing the previous `sortedrl {command}` run in {out}" + (
            f", and the pages added to it ({', '.join(pages)})" if pages else "")
    locked = write_protected(real)  # replacing it removes every file in it
    if locked is not None:
        raise OutputError(f"{option} {out}: cannot be replaced: {locked} is write-protected "
                          f"(its files cannot be removed)")
    check_writable_into(real, option, out)
    return note

