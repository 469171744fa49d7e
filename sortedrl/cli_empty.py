"""An empty path on the command line (``--out ''``), named as given before a command runs.

A path option or argument given ``''`` (a shell variable that was never set: ``--out "$DIR"``)
reaches the command as ``Path('')``, which is ``.``: the errors that followed named ``--out .``
or ``.: is a directory``, a path the user never typed. The arguments are read once here, before
click parses them, against each command's parameters annotated ``Path`` (or a list of them).
"""

from __future__ import annotations

import typing
from pathlib import Path


def _takes_path(param) -> bool:
    """Whether a typer parameter's annotation is a Path, an optional one or a list of them."""
    ann = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if ann is Path:
        return True
    return any(a is Path for a in typing.get_args(ann))


def empty_path(group, args: list[str]) -> str | None:
    """The error line for the first empty path in ``args`` of the command they run under
    ``group`` (a click group), or None. A command's own file-list options (``file_options``:
    calibrate's ``--from-metrics A B ...``, :mod:`sortedrl.calibration.file_options`) check
    their names themselves; the names after one are theirs."""
    command, path = group, []
    while args and hasattr(command, "commands") and args[0] in command.commands:
        command = command.commands[args[0]]
        path.append(args[0])
        args = args[1:]
    if "--" in args:  # (after it, every word is an argument: read only what comes before)
        args = args[:args.index("--")]
    if hasattr(command, "commands") or "" not in args and not any(a.endswith("=") for a in args):
        return None
    if "--help" in args:  # (help is what was asked for)
        return None
    options = {o: p for p in command.params if getattr(p, "param_type_name", "") == "option" for o in p.opts}
    takes_arg = any(getattr(p, "param_type_name", "") == "argument" and _takes_path(p) for p in command.params)
    own = getattr(command, "file_options", ())
    in_list = False  # after one of ``own``: its names, not a positional argument
    i = 0
    while i < len(args):
        a = args[i]
        opt, eq, value = a.partition("=")
        param = options.get(opt) if opt.startswith("-") else None
        if opt.startswith("-") and param is None and opt not in own:
            return None  # (an unknown option: click's error says so, and what followed it is unknown)
        if opt.startswith("-"):
            in_list = opt in own
        if param is not None and not in_list and not getattr(param, "is_flag", False):
            if not eq:
                value = args[i + 1] if i + 1 < len(args) else None
                i += 1
            if value == "" and _takes_path(param):
                return f"{opt}: an empty path (an unset shell variable?); give a file or directory name"
        elif a == "" and takes_arg and not in_list:
            return (f"{' '.join(path)}: an empty path argument (an unset shell variable?); "
                    "give a file or directory name")
        i += 1
    return None
