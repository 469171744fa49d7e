"""Policy names: the registry from a name to its class, plus ``module:Class`` for a user's own.

A new built-in policy is one class and one line in ``BUILTIN``.
"""

from __future__ import annotations

import importlib
import inspect

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Policy, RunContext, parse_params
from sortedrl.policies.sync import SyncPolicy

BUILTIN: dict[str, type[Policy]] = {
    "sync": SyncPolicy,
}


def policy_class(name: str) -> type[Policy]:
    """Resolve a built-in name or ``package.module:ClassName``."""
    if name in BUILTIN:
        return BUILTIN[name]
    if ":" not in name:
        raise ConfigError(f"unknown policy {name!r} (known: {', '.join(BUILTIN)}; "
                          "or module:Class for your own)")
    mod_name, _, cls_name = name.partition(":")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ConfigError(f"policy {name!r}: cannot import module {mod_name!r} ({e})") from None
    cls = getattr(mod, cls_name, None)
    if not (inspect.isclass(cls) and issubclass(cls, Policy)):
        raise ConfigError(f"policy {name!r}: {cls_name!r} is not a Policy subclass in {mod_name}")
    return cls


def make_policy(name: str, sets: list[str], ctx: RunContext) -> Policy:
    """Instantiate a policy with its ``--set key=value`` knobs."""
    cls = policy_class(name)
    return cls(parse_params(cls.Params, sets, name), ctx)
