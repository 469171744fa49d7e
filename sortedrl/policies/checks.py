"""The class check of a user's policy (``--policy module:Class``): one error line before any work.

A policy class that cannot run would otherwise fail late, and far from its cause: a hook whose
signature is wrong raises a TypeError pointing into sortedrl, a misspelled hook (``on_sync_don``)
is never called and the run stalls, a ``Params`` that is not a dataclass or a ``placements`` value
nobody knows raise a traceback, a class without a ``name`` runs under a blank one. These checks
read the class only (names, signatures, attributes), once, when the name is resolved; nothing here
runs per event. The built-in policies are not checked: their tests are their check.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import typing

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Policy
from sortedrl.sim.cluster import PLACEMENTS
from sortedrl.user_code import is_users

# each hook as the controller calls it (positionally), and as docs/policies.md gives it
SIGNATURES = {
    "on_start": "on_start(self, view)",
    "on_finished": "on_finished(self, view, samples, engine)",
    "on_idle": "on_idle(self, view, engine)",
    "on_update_done": "on_update_done(self, view)",
    "on_sync_done": "on_sync_done(self, view)",
    "on_turn_done": "on_turn_done(self, view, samples, engine)",
    "on_event": "on_event(self, event, view)",
    "__init__": "__init__(self, params=None, ctx=None)",
}
HOOKS = tuple(h for h in SIGNATURES if h.startswith("on_"))
CLOSE = 0.8  # difflib ratio: on_finish, on_stat, on_sync_don are typos; on_step, on_batch are not


def check_policy_class(cls: type) -> None:
    """One-line errors (ConfigError) for a policy class that cannot run under interface v2."""
    who = cls.__name__
    _check_misspelled_hooks(cls, who)
    if cls.on_event is Policy.on_event and cls.on_start is Policy.on_start:
        raise ConfigError(f"policy {who} overrides neither on_event nor on_start, so it would "
                          f"never admit a sample: implement on_start (and the hooks it needs: "
                          f"{', '.join(HOOKS[1:-1])})")
    for hook in SIGNATURES:
        if hook != "__init__" and not callable(getattr(cls, hook)):
            raise ConfigError(f"policy {who}: {hook} is not a method; rename that attribute "
                              "(interface v2 calls it as a hook)")
        if getattr(cls, hook) is not getattr(Policy, hook):
            _check_signature(cls, hook, who)
    _check_params(cls, who)
    _check_placements(cls, who)
    _check_name(cls, who)


def _check_name(cls: type, who: str) -> None:
    name = cls.name
    if not isinstance(name, str):
        raise ConfigError(f"policy class {who}: name must be a string, got {type(name).__name__}")
    if not name.strip():
        raise ConfigError(f'policy class {who} has no name: set name = "..." on the class '
                          "(summaries and tables show it)")


def _check_misspelled_hooks(cls: type, who: str) -> None:
    """A method named like a hook (``on_sync_don``) is never called: say which one was meant.
    Other ``on_*`` helpers (``on_step``, ``on_batch``) are the class's own business."""
    for klass in cls.__mro__:
        if not is_users(klass):
            continue
        for attr, value in vars(klass).items():
            if (not attr.lower().startswith("on_") or attr in SIGNATURES
                    or not (inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)))):
                continue
            close = difflib.get_close_matches(attr.lower(), HOOKS, n=1, cutoff=CLOSE)
            if close:
                raise ConfigError(f"policy {who} defines {attr}, which is not a hook: did you "
                                  f"mean {close[0]}?")


def _check_signature(cls: type, hook: str, who: str) -> None:
    """The hook (or ``__init__``) takes the arguments the controller (the registry) passes."""
    raw = inspect.getattr_static(cls, hook)
    if isinstance(raw, staticmethod):
        func, given = raw.__func__, SIGNATURES[hook].count(",")  # no self
    elif isinstance(raw, classmethod):
        func, given = raw.__func__, SIGNATURES[hook].count(",") + 1  # cls in self's place
    elif inspect.isfunction(raw):
        func, given = raw, SIGNATURES[hook].count(",") + 1
    else:
        return  # a callable object: its call is its own business
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):  # pragma: no cover - a function always has one
        return
    try:
        sig.bind(*([None] * given))
    except TypeError:
        raise ConfigError(f"policy {who}: {hook}{sig} does not take the arguments sortedrl passes: "
                          f"define it as {SIGNATURES[hook]}") from None


def _check_params(cls: type, who: str) -> None:
    params = cls.Params
    if not (isinstance(params, type) and dataclasses.is_dataclass(params)):
        got = f"class {params.__name__}" if isinstance(params, type) else type(params).__name__
        raise ConfigError(f"policy {who}: Params must be a dataclass (@dataclass(frozen=True), "
                          f"a field per knob), got {got}")
    try:
        typing.get_type_hints(params)
    except Exception as e:  # a name in an annotation that does not resolve
        raise ConfigError(f"policy {who}: the annotations of Params do not resolve "
                          f"({type(e).__name__}: {e})") from None


def _check_placements(cls: type, who: str) -> None:
    placements = cls.placements
    if placements is None:
        return
    if isinstance(placements, str) or not isinstance(placements, (tuple, list)) or not placements:
        raise ConfigError(f"policy {who}: placements must be None or a tuple of "
                          f"{' and/or '.join(map(repr, PLACEMENTS))}, got {placements!r}")
    bad = [p for p in placements if p not in PLACEMENTS]
    if bad:
        raise ConfigError(f"policy {who}: unknown placement {bad[0]!r} in placements (known: "
                          f"{', '.join(PLACEMENTS)})")
