"""What a policy's hook gave back, checked: one error line for each mistake a policy author makes.

The controller applies a hook's actions; before it does, these say in one line what is wrong
with a return that is not a list of actions (a lone ``Admit``, an int), with ids that are not a
sequence (a generator, a float array), and, for a user's policy, where in the user's code a hook
raised. They run once per hook call or action, never per sample: a 1-D integer NumPy array of
ids is converted to a tuple here, once, and the per-sample checks stay the controller's.
"""

from __future__ import annotations

import dataclasses
import inspect
import os

import numpy as np

from sortedrl.errors import PolicyError, SortedRLError
from sortedrl.limits import short_repr
from sortedrl.policies.base import (
    Abort,
    Admit,
    Discard,
    EventKind,
    Filter,
    Keep,
    Policy,
    Sync,
    Train,
    WakeOn,
)
from sortedrl.user_code import PACKAGE, is_users, raised, source_file, users_frame

HOOK_OF = {EventKind.STARTED: "on_start", EventKind.FINISHED: "on_finished",
           EventKind.ENGINE_IDLE: "on_idle", EventKind.UPDATE_DONE: "on_update_done",
           EventKind.SYNC_DONE: "on_sync_done", EventKind.TURN_DONE: "on_turn_done"}
ID_FIELD = {Admit: "samples", Abort: "samples", Discard: "samples", Train: "samples",
            Filter: "groups"}  # the actions that name samples (groups), and the field
ID_SEQUENCES = (tuple, list, range)  # taken as they are; a 1-D integer NumPy array is converted
ACTIONS = (Admit, Abort, Discard, Filter, Train, Sync, Keep, WakeOn)
SHOWN_ITEMS = 3  # items of a list an error line shows


def users_bug(policy: Policy, e: Exception, hook: str) -> Exception:
    """What ``hook`` raised, as the error to raise: from a user's policy, one line naming the
    policy, the hook and where in the user's code (a SortedRLError, e.g. the view's, keeps its
    text); from a built-in, the exception itself, with its traceback."""
    if not is_users(type(policy)):
        return e
    name = policy.name or type(policy).__name__
    home = source_file(type(policy))
    if not isinstance(e, SortedRLError):
        return PolicyError(f"policy {name} raised {raised(e, hook, home)}")
    where = users_frame(e, home)
    return PolicyError(f"policy {name}: {e} (in {hook} at {where})") if where else e


def hook_name(policy: Policy, event) -> str:
    """The hook that handled ``event``: its own, or ``on_event`` for an old-style policy."""
    return HOOK_OF[event.kind] if type(policy).on_event is Policy.on_event else "on_event"


def hook_at(policy: Policy, hook: str | None) -> str:
    """`` (at FILE:LINE)`` of a user's policy's hook, where its author reads what it returned;
    empty for a built-in policy (or a hook it did not define)."""
    line = hook_line(policy, hook)
    return f" (at {line})" if line else ""


def hook_line(policy: Policy, hook: str | None) -> str | None:
    """``FILE:LINE`` of a user's policy's hook (its ``def``); None for a built-in policy's."""
    code = getattr(getattr(type(policy), hook or "", None), "__code__", None)
    if code is None or not is_users(type(policy)) or os.path.realpath(code.co_filename).startswith(PACKAGE):
        return None  # (a hook a user's subclass inherits from sortedrl: no line of the user's)
    return f"{code.co_filename}:{code.co_firstlineno}"


def given_by(policy: Policy, hook: str | None) -> str:
    """`` (from on_start at FILE:LINE)``, ending the error line of an action a hook returned;
    empty where no hook is known."""
    if not hook:
        return ""
    line = hook_line(policy, hook)
    return f" (from {hook} at {line})" if line else f" (from {hook})"


def not_a_list(policy: Policy, returned: object, event) -> PolicyError:
    """The error for a hook (named by ``event``'s kind) that returned no list of actions, with
    the fix for the common ones: a lone action, a generator (a hook that yields)."""
    hook = hook_name(policy, event)
    shown, fix = _shown(returned), ""
    if isinstance(returned, ACTIONS):
        fix = f": wrap it in a list, [{shown}]"
    elif inspect.isgenerator(returned):
        shown, fix = "a generator", ": it yields; return a list of the actions instead"
    return PolicyError(f"policy {policy.name}: {hook}{hook_at(policy, hook)} returned "
                       f"{shown}, expected a list of actions{fix}")


def not_an_action(policy: Policy, item: object, event) -> PolicyError:
    """The error for an item of a hook's list that is no action: an action's class (``Sync``
    for ``Sync()``), a list inside the list, or anything else, shown short."""
    hook = hook_name(policy, event) if event is not None else "a hook"
    head = f"policy {policy.name}: {hook}{hook_at(policy, hook)} returned"
    if isinstance(item, type) and item in ACTIONS:
        call = f"{item.__name__}()" if item in (Sync, Keep, WakeOn) else f"{item.__name__}(...)"
        return PolicyError(f"{head} the class {item.__name__} in its list, not an action: write "
                           f"{call}, an instance")
    if isinstance(item, (list, tuple)):
        return PolicyError(f"{head} a {type(item).__name__} inside its list of actions "
                           f"({_shown(item)}): return one flat list")
    return PolicyError(f"{head} {_shown(item)} in its list, which is not an action")


def with_id_tuple(policy: Policy, action, field: str, hook: str | None = None):
    """``action`` with its ids (``field``) as a tuple of Python ints, if they are a 1-D integer
    NumPy array; one error line (naming ``hook``, which returned it) if they are not a sequence
    of ids at all."""
    ids = getattr(action, field)
    if isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype.kind in "iu":
        return dataclasses.replace(action, **{field: tuple(ids.tolist())})
    got = f"a {ids.ndim}-D {ids.dtype} array" if isinstance(ids, np.ndarray) else type(ids).__name__
    raise PolicyError(f"policy {policy.name}: {type(action).__name__}.{field} must be a tuple or list "
                      f"of {'group' if field == 'groups' else 'sample'} ids (or a 1-D integer NumPy "
                      f"array), got {got}{given_by(policy, hook)}")


def _shown(value: object, depth: int = 2) -> str:
    """An action as ``Admit(...)`` (its ids could fill a screen), a list or tuple as its first
    items shown so (two levels deep), anything else cut short."""
    if type(value) in ID_FIELD or isinstance(value, (Keep, WakeOn)):
        return f"{type(value).__name__}(...)"
    if type(value) in (list, tuple):
        items = [_shown(v, depth - 1) for v in value[:SHOWN_ITEMS]] if depth else ["..."]
        text = ", ".join(items + (["..."] if depth and len(value) > SHOWN_ITEMS else []))
        one = type(value) is tuple and len(value) == 1 and depth  # (x,)
        return f"[{text}]" if type(value) is list else f"({text}{',' if one else ''})"
    return "Sync()" if isinstance(value, Sync) else short_repr(value)
