"""The values the built-in policies' auto knobs (0: "size it from the trace or cluster") took.

A knob left at 0 is resolved by the policy from public facts (the trace's prompts per step, the
engines' total ``max_num_seqs``). Printing ``update_batch=0`` would hide what a run actually did,
and two runs compared side by side could differ in a way nobody sees, so the summary records the
resolved values (``auto_params``) and the tables print ``update_batch=256 (auto)``.

Each entry reads the value the policy settled on after a run (``capacity`` is the engines' total
``max_num_seqs``, which some policies read from the view as they go). A user's ``module:Class``
reports the auto knobs of the built-in policy it derives from, if any.
"""

from __future__ import annotations

from collections.abc import Callable

from sortedrl.policies.base import Policy, params_dict

Resolve = Callable[[Policy, int], int]

RESOLVED: dict[str, dict[str, Resolve]] = {
    "sync": {"rollout_batch": lambda p, cap: p.batch},
    "sortedrl": {"group_prompts": lambda p, cap: p.group_prompts,
                 "oversubscribe": lambda p, cap: _multiple(p.window, cap),
                 "update_batch": lambda p, cap: p.update_batch},
    "partial": {"rollout_batch": lambda p, cap: p.n_groups},
    "tail_batch": {"rollout_batch": lambda p, cap: p.P, "responses": lambda p, cap: p.keep},
    "async": {"batch": lambda p, cap: p.B, "max_concurrent": lambda p, cap: cap},
    "one_step_off": {"rollout_batch": lambda p, cap: p.batch},
    "oracle_sorted": {"rollout_batch": lambda p, cap: p.batch,
                      "update_batch": lambda p, cap: p._size_for(cap)},
}


def _multiple(window: int, capacity: int) -> float:
    """``window / capacity`` rounded *up* to 6 decimals, so that given back with ``--set`` it
    floors to the same window (the policy takes ``floor(oversubscribe x slots)``): rounded to
    the nearest (0.164 for 84 of 512 slots) it floored to 83, another run."""
    return -(-window * 10**6 // capacity) / 10**6


def auto_params(policy: Policy, capacity: int) -> dict[str, int | float]:
    """The knobs of ``policy`` left at 0 (auto), with the values they resolved to."""
    given = params_dict(policy.params)
    out = {}
    for knob, resolve in _resolvers(type(policy)).items():
        if given.get(knob) == 0:
            try:
                value = resolve(policy, capacity)
                out[knob] = value if isinstance(value, float) else int(value)
            except AttributeError:  # a policy that renamed its state: show the knob as given
                continue
    return out


def _resolvers(cls: type) -> dict[str, Resolve]:
    """The auto knobs of the nearest built-in class ``cls`` is or derives from (a user's
    ``class MySync(SyncPolicy)`` keeps ``sync``'s knobs and state under another name)."""
    for klass in cls.__mro__:
        name = klass.__dict__.get("name")
        if klass.__module__.startswith("sortedrl.") and name in RESOLVED:
            return RESOLVED[name]
    return {}


def knob_text(params: dict, auto: dict) -> str:
    """``update_batch=256 (auto), mode=partial``: every knob as it was used."""
    parts = []
    for key, value in params.items():
        if key in auto:
            parts.append(f"{key}={auto[key]} (auto)")
        else:
            parts.append(f"{key}={str(value).lower() if isinstance(value, bool) else value}")
    return ", ".join(parts) or "no knobs"
