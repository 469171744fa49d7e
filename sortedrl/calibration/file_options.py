"""Options that take several files after one flag: ``calibrate --from-vllm-bench a.json b.json``
and ``--from-metrics a.csv b.csv``, each file belonging to the flag it follows.

click gives an option one value; the names after it are extra arguments, and which flag they
followed is lost by then. :class:`FileListCommand` restores it before click parses: each name
after a file option's value, up to the next option, is given that option again
(``--from-metrics a.csv b.csv`` reads as ``--from-metrics a.csv --from-metrics b.csv``). The
command has no positional arguments, so such a name can be nothing else; one anywhere else is
left to the command, which refuses it (:data:`STRAY`). A file option with no file after it (at the
end, before another option, or an empty name) is one error line naming the option.
"""

from __future__ import annotations

from pathlib import Path

from typer.core import TyperCommand

from sortedrl.errors import ConfigError

try:  # typer 0.2x carries its own copy of click (as sortedrl.cli_common imports it)
    from typer._click.exceptions import UsageError
except ImportError:  # pragma: no cover - older typer
    from click.exceptions import UsageError

FILE_OPTIONS = ("--from-vllm-bench", "--from-metrics")
STRAY = ("unexpected argument {!r}: give each file after --from-vllm-bench or --from-metrics "
         "(FILE ... or repeat the flag)")


def spread(args: list[str], options: tuple[str, ...] = FILE_OPTIONS) -> list[str]:
    """``args`` with each name that follows a file option's value (before the next option, or
    ``--``) preceded by that option."""
    out: list[str] = []
    owner: str | None = None  # the file option whose values the names are, while they last
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            return [*out, *args[i:]]
        if a in options:
            value = args[i + 1] if i + 1 < len(args) else None
            if value == "--help":  # (click shows the help, eagerly)
                return [*out, value]
            _check_value(a, value)
            out += [a, value]
            owner, i = a, i + 2
            continue
        flag = a.partition("=")[0]
        if flag in options and "=" in a:
            _check_value(flag, a.partition("=")[2], joined=True)
        if a.startswith("-") and a != "-":
            owner = flag if flag in options and "=" in a else None
            out.append(a)
        elif owner is not None:
            _check_value(owner, a)  # (an empty name among them)
            out += [owner, a]
        else:
            out.append(a)
        i += 1
    return out


def _check_value(option: str, value: str | None, joined: bool = False) -> None:
    """A file option's value names a file: not missing, not empty (an unset shell variable left
    ``--from-metrics --cluster NAME``, whose --cluster was then read as the file and NAME as a
    second one) and not a long option (a file named so is given as ./--NAME)."""
    if value == "":  # (among files given too: an empty name is not "no file")
        raise UsageError(f"{option}: an empty file name (an unset shell variable?); give FILE ... after it")
    if value is None:
        why = ""
    elif value.startswith("--") and not joined:
        why = f" (the next argument, {value}, is an option)"
    else:
        return
    raise UsageError(f"{option}: no file given{why}; give FILE ... after it")


class FileListCommand(TyperCommand):
    """A typer command whose file options (:data:`FILE_OPTIONS`) take every name after them."""

    file_options = FILE_OPTIONS  # (their empty names are checked here: sortedrl/cli_empty.py)

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        return super().parse_args(ctx, spread(list(args)))


def refuse_repeats(paths: list, kind: str) -> None:
    """One error line for a file given twice to an option (by the same path, or another path to
    the same file): ``kind`` names the files (``benchmark``, ``metrics``)."""
    seen: dict[Path, int] = {}
    for i, p in enumerate(paths):
        first = seen.setdefault(Path(p).resolve(), i)
        if first != i:
            also = "" if str(paths[first]) == str(p) else f" (the same file as {paths[first]})"
            raise ConfigError(f"{p}: {kind} file given twice{also}; give each file once")
