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
# what may follow a ``*_done`` hook's stem (``on_sync``) in a name meant as the hook: on_sync,
# on_synced, on_sync_end, on_update_finished
ENDINGS = ("", "d", "ed", "end", "ended", "fin", "finish", "finished", "complete", "completed")
SHORTEST = 3  # letters after "on" for a truncated hook (on_fin, on_upd) to count as one


def check_policy_class(cls: type) -> None:
    """One-line errors (ConfigError) for a policy class that cannot run under interface v2."""
    who = cls.__name__
    _check_misspelled_hooks(cls, who)
    if getattr(cls, "wants_oracle", False) is True and not callable(getattr(cls, "attach_oracle", None)):
        raise ConfigError(no_attach_oracle(who))
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


def no_attach_oracle(who: str) -> str:
    return (f"policy {who} sets wants_oracle but has no attach_oracle method: define "
            "attach_oracle(self, oracle), which gets the true lengths (oracle.predict(view, sample))")


def _check_misspelled_hooks(cls: type, who: str) -> None:
    """A method named like a hook (``on_sync_don``) is never called: say which one was meant.
    Other ``on_*`` helpers (``on_step``, ``on_batch``) are the class's own business."""
    for klass in cls.__mro__:
        if not is_users(klass):
            continue
        for attr, value in vars(klass).items():
            if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)):
                meant = meant_hook(cls, attr)
                if meant:
                    raise ConfigError(f"policy {who} defines {attr}, which is not a hook: did you "
                                      f"mean {meant}? (a helper of yours: rename it)")


def _plain(name: str) -> str:
    return name.casefold().replace("_", "")


def meant_hook(cls: type, attr: str) -> str | None:
    """The hook that a method named ``attr`` of ``cls`` was likely meant to be, or None.

    Only names like a hook's are looked at: ``on_`` in any case, or camelCase ``onX``. Meant as
    a hook: the same name but for case and underscores (``onFinished``, ``On_Start``); a typo
    (difflib, ``CLOSE``: ``on_finsihed``, ``on_idel``); or, where the class does not define that
    hook (then a helper of that name is its own), a truncation (``on_fin``, ``on_upd``) or a
    ``*_done`` hook's stem with another ending (``on_sync``, ``on_synced``, ``on_update_end``).
    A class that routes events itself (``on_event``) keeps such truncations and stems as
    helpers (its ``on_event`` may call an ``on_update`` of its own)."""
    if attr in SIGNATURES or not (attr.lower().startswith("on_")
                                  or (attr[:2] in ("on", "On") and attr[2:3].isupper())):
        return None
    plain = _plain(attr)
    for hook in HOOKS:
        if plain == _plain(hook):
            return hook
    close = difflib.get_close_matches(attr.lower(), HOOKS, n=1, cutoff=CLOSE)
    if close:
        return close[0]
    close = difflib.get_close_matches(plain, [_plain(h) for h in HOOKS], n=1, cutoff=CLOSE)
    if close and not (plain.startswith(close[0].removesuffix("done"))  # (on_finished_batch;
                      or close[0].startswith(plain)):  # on_update, on_updated: below)
        return next(h for h in HOOKS if _plain(h) == close[0])
    if getattr(cls, "on_event", Policy.on_event) is not Policy.on_event:
        return None
    for hook in HOOKS:
        if getattr(cls, hook, None) is not getattr(Policy, hook):
            continue  # the class has that hook: a name like it is a helper
        full = _plain(hook)
        stem = full.removesuffix("done")
        if (len(plain) >= 2 + SHORTEST and full.startswith(plain)) or (
                stem != full and plain.startswith(stem) and plain[len(stem):] in ENDINGS):
            return hook
    return None


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
