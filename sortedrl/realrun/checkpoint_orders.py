"""The standing orders in force at a real run's checkpoint, kept for ``--resume``.

A policy that gives its ``Keep`` and ``WakeOn`` once, in ``on_start`` (docs/policies.md's
``Harvest``), is not asked again after a resume, which rebuilds the policy without calling
``on_start``: without its orders the resumed run admitted nothing and stopped ("stalled ...
Admit the waiting ones"). The orders are data but for ``Keep``'s queue, an object of the
policy's: it is kept as the name of the policy's attribute that holds it, and a queue that no
attribute holds (a local deque) leaves the ``Keep`` out, as before. Every field is checked
before any is set.
"""

from __future__ import annotations

from collections import deque
from dataclasses import astuple, fields
from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.policies.base import Keep, WakeOn
from sortedrl.policies.common import SampleQueue
from sortedrl.policies.orders import StandingOrders
from sortedrl.realrun.checkpoint import _count

WAKE_FIELDS = tuple(f.name for f in fields(WakeOn))
WAKE_KINDS = {f.name: type(f.default) for f in fields(WakeOn)}  # (int counts, bool flags)


def orders_state(orders: StandingOrders, policy: object) -> dict:
    """The controller's standing orders as plain data (the ``orders`` field of ``state.json``)."""
    keep = orders.keep
    queue = next((name for name, v in vars(policy).items() if keep is not None and v is keep.queue), None)
    return {"keep": None if queue is None else [queue, keep.window, keep.budget, keep.max_span],
            "budget": orders.budget, "keep_hook": orders.keep_hook,
            "wake": None if orders.wake is None else list(astuple(orders.wake)),
            "unheard": list(orders.unheard)}


def restore_orders(orders: StandingOrders, policy: object, saved: object, where: Path | str) -> None:
    """Put the checkpoint's orders (:func:`orders_state`) back in force on ``orders``, the
    restored ``policy``'s queue in its ``Keep``; one error line, nothing set, if a field is not
    as a run writes it."""
    if not isinstance(saved, dict):
        raise ConfigError(f"{where}: field 'orders': expected an object")
    keep, wake = saved.get("keep"), saved.get("wake")
    keep_order = None if keep is None else _keep(policy, keep, where)
    wake_order = None if wake is None else _wake(wake, where)
    budget, hook, unheard = saved.get("budget"), saved.get("keep_hook"), saved.get("unheard", [])
    if budget is not None and not _count(budget):
        raise ConfigError(f"{where}: field 'orders.budget': expected an integer >= 0 or null")
    if hook is not None and not isinstance(hook, str):
        raise ConfigError(f"{where}: field 'orders.keep_hook': expected text or null")
    if not isinstance(unheard, list) or not all(_count(i) for i in unheard):
        raise ConfigError(f"{where}: field 'orders.unheard': expected a list of sample ids")
    orders.keep, orders.budget, orders.keep_hook = keep_order, budget, hook
    orders.wake, orders.unheard = wake_order, list(unheard)


def _keep(policy: object, keep: object, where: Path | str) -> Keep:
    if not (isinstance(keep, list) and len(keep) == 4 and isinstance(keep[0], str)):
        raise ConfigError(f"{where}: field 'orders.keep': expected [queue attribute, window, budget, max_span]")
    name, window, budget, max_span = keep
    queue = vars(policy).get(name)
    if not isinstance(queue, (SampleQueue, deque)):
        raise ConfigError(f"{where}: field 'orders.keep': the policy has no queue {name!r} (a SampleQueue "
                          "or deque) to keep admitted from")
    if not _count(window) or not all(v is None or _count(v) for v in (budget, max_span)):
        raise ConfigError(f"{where}: field 'orders.keep': window, budget and max_span must be integers >= 0 "
                          "(budget and max_span may be null)")
    return Keep(queue, window, budget, max_span)


def _wake(wake: object, where: Path | str) -> WakeOn:
    if not (isinstance(wake, list) and len(wake) == len(WAKE_FIELDS)):
        raise ConfigError(f"{where}: field 'orders.wake': expected the {len(WAKE_FIELDS)} fields of a "
                          f"WakeOn ({', '.join(WAKE_FIELDS)})")
    order = WakeOn(*wake)
    for name, value in zip(WAKE_FIELDS, wake, strict=True):
        kind = WAKE_KINDS[name]
        if type(value) is not kind or (kind is int and value < 0):
            raise ConfigError(f"{where}: field 'orders.wake': {name} must be "
                              f"{'true or false' if kind is bool else 'an integer >= 0'}")
    return order
