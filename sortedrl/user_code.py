"""The user's own code, named ``module:name`` (a policy class, a task factory, a reward).

Importing a module runs it, and a policy's hooks run inside a simulation: a typo in the name, a
module that raises or does not parse, a hook that raises would each end in a traceback through
sortedrl. Here they become one error line that names the option or the policy, the exception,
and the file and line of the user's code where it was raised: the innermost frame of the user's
own (the policy's file, or any outside sortedrl, the standard library and site-packages), with
the library's frame after it when a library call raised (``statistics.mean([])``).
"""

from __future__ import annotations

import importlib
import os
import site
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType

from sortedrl.errors import ConfigError

PACKAGE = os.path.realpath(Path(__file__).parent) + os.sep  # sortedrl's own files start with this
# the standard library's and installed packages' files start with one of these (numpy, statistics)
LIBRARIES = tuple(sorted({os.path.realpath(d) + os.sep for d in (
    *(sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")),
    *site.getsitepackages(), site.getusersitepackages())}))


def import_user_module(spec: str, option: str) -> tuple[ModuleType, str]:
    """The module that ``spec`` (``module:name``, as given to ``option``) names, imported, and
    the name after the colon; a ConfigError naming ``option`` if it cannot be."""
    module, _, name = spec.partition(":")
    if not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"{option} {spec!r}: {module!r} is not a module name (module:name, the "
                          "module's full dotted name on the Python path, e.g. my_policies:MyPolicy)")
    if not name.isidentifier():
        raise ConfigError(f"{option} {spec!r}: {name!r} is not a name in a module (module:name, "
                          "e.g. my_policies:MyPolicy)")
    try:
        return importlib.import_module(module), name
    except ImportError as e:
        if not _names_the_module(e, module):  # the module's own import of another one failed
            raise ConfigError(f"{option} {spec!r}: importing module {module!r} raised "
                              f"{raised(e)}") from None
        hint = ""
        if module.endswith(".py"):
            hint = f"; drop the .py suffix: {module.removesuffix('.py')}:{name}"
        raise ConfigError(f"{option} {spec!r}: cannot import module {module!r} ({e}){hint}") from None
    except Exception as e:  # the module's own code raised, or it does not parse
        raise ConfigError(f"{option} {spec!r}: importing module {module!r} raised "
                          f"{raised(e)}") from None


def _names_the_module(e: ImportError, module: str) -> bool:
    """Whether ``e`` says that ``module`` itself (or a package above it) is not found, rather
    than that an import inside the module failed."""
    missing = getattr(e, "name", None)
    if not isinstance(e, ModuleNotFoundError) or missing is None:
        return False
    return module == missing or module.startswith(missing + ".")


def raised(e: BaseException, hook: str | None = None, home: str | None = None) -> str:
    """``ExcType: message (at file:line)``, on one line: what was raised and where (the
    innermost frame of the traceback; for a SyntaxError, the line that does not parse). Raised
    inside sortedrl or a library by the user's call, it names the user's line first: ``(at
    mypolicy.py:7, raised in .../policies/common.py:143)`` (:func:`users_frame`; ``home``: the
    policy's file). ``hook``: the policy's hook it was raised in, ``(in on_finished at ...)``."""
    if isinstance(e, SyntaxError):
        message, file, line = e.msg, e.filename, e.lineno
    else:
        frames = [f for f in traceback.extract_tb(e.__traceback__)
                  if not f.filename.startswith("<frozen")]
        message = str(e)
        file, line = (frames[-1].filename, frames[-1].lineno) if frames else (None, None)
    text = " ".join(f"{type(e).__name__}: {message}".split()).removesuffix(":")
    if not file:
        return text
    mine = None if isinstance(e, SyntaxError) else users_frame(e, home)
    where = f"{file}:{line}"
    at = f"in {hook} at " if hook else "at "
    return f"{text} ({at}{where})" if mine in (None, where) else f"{text} ({at}{mine}, raised in {where})"


def users_frame(e: BaseException, home: str | None = None) -> str | None:
    """``file:line`` of the innermost frame of ``e``'s traceback in the user's code: in the file
    ``home`` (the policy's module), or outside sortedrl, the standard library (its frozen
    modules included) and site-packages; else the innermost outside sortedrl (a user's module
    installed in site-packages); None if there is none."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")
              and not os.path.realpath(f.filename).startswith(PACKAGE)]
    home = os.path.realpath(home) if home else None
    mine = [f for f in frames if os.path.realpath(f.filename) == home
            or not os.path.realpath(f.filename).startswith(LIBRARIES)]
    frames = mine or frames
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else None


def source_file(cls: type) -> str | None:
    """The file that defines ``cls`` (a policy's module), or None (a class made at run time)."""
    return getattr(sys.modules.get(cls.__module__), "__file__", None)


def is_users(cls: type) -> bool:
    """Whether ``cls`` is the user's (defined outside sortedrl): what it raises is the user's
    bug, reported in one line; what a built-in raises is sortedrl's, shown with its traceback."""
    return cls.__module__.split(".")[0] != "sortedrl"
