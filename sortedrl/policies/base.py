"""The policy interface: events in, actions out, through a read-only view of the cluster.

A policy is a pure decision-maker. It has no clock and does no I/O; the same class runs in the
simulator and in the real runner. It sees what a real controller could see — prompt lengths,
tokens generated so far, finished responses — and never a sample's true length (the
**no-peeking contract**). Lengths of finished samples are observations and are allowed.

Shape borrowed from vLLM's ``RequestQueue``: one small base class (a hook per event kind, each
with a default), small concrete policies, and a registry from name to class
(:mod:`sortedrl.policies.registry`). Standing orders (``Keep``, ``WakeOn``) let a policy leave the
per-finish work to the controller, as vLLM's waiting queue does for its scheduler.
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import ClassVar, Literal, NoReturn, Union

from sortedrl.errors import ConfigError, did_you_mean
from sortedrl.limits import INT32_MAX

# -- events ------------------------------------------------------------------------------------


class EventKind(StrEnum):
    STARTED = "started"  # the run begins
    FINISHED = "finished"  # samples finished on an engine (only for policies that listen)
    ENGINE_IDLE = "engine_idle"  # an engine has nothing running and nothing queued
    UPDATE_DONE = "update_done"  # the trainer produced a new policy version
    SYNC_DONE = "sync_done"  # the engines now run the trainer's latest version
    TURN_DONE = "turn_done"  # turns of multi-turn samples ended (a tool call follows)


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    engine: int | None = None
    samples: tuple[int, ...] = ()


# -- actions -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admit:
    """Queue waiting or paused samples on an engine (``None``: spread over the least loaded).

    ``keep_groups`` (a placement hint, used when ``engine`` is ``None``): keep each GRPO group's
    members on one engine where capacity allows, so that prefix caching prefills and holds the
    group's shared prompt once there. False spreads samples by load alone."""

    samples: tuple[int, ...]
    engine: int | None = None
    keep_groups: bool = True


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop samples. ``keep_tokens=True`` pauses admitted samples with their partial responses.
    ``keep_tokens=False`` drops the response of admitted, paused or finished samples (its tokens
    are wasted) and makes them wait to be regenerated from scratch."""

    samples: tuple[int, ...]
    keep_tokens: bool = True


@dataclass(frozen=True, slots=True)
class Discard:
    """Give up on samples that are not admitted; their tokens are wasted and never trained."""

    samples: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Filter:
    """Dynamic sampling (DAPO): drop finished GRPO groups whose rewards are all equal. Their
    advantages would all be zero, so they teach nothing; their tokens are wasted."""

    groups: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Train:
    """Run one update on finished samples."""

    samples: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Sync:
    """Push the trainer's latest weights to every engine."""


# -- standing orders: actions that stay in force until replaced ---------------------------------


@dataclass(frozen=True, slots=True)
class Keep:
    """Keep ``window`` samples admitted in all, topping up from ``queue`` (front first) after
    every event, finishes included, without calling the policy. ``budget``: admit at most this
    many more from this order (None: no limit). A paused sample whose oldest token is more than
    ``max_span`` versions behind is regenerated (its tokens dropped) as it is admitted.
    ``queue`` is the policy's own :class:`~sortedrl.policies.common.SampleQueue` (or deque):
    the controller pops from its front, the policy may add to it. ``Keep()`` cancels."""

    queue: object = None
    window: int = 0
    budget: int | None = None
    max_span: int | None = None


@dataclass(frozen=True, slots=True)
class WakeOn:
    """Call ``on_finished`` only at a finish after which one of these holds, instead of at every
    finish (the controller serves ``Keep`` at the others). ``finished``: at least this many
    finished samples wait in the buffer; ``groups``: at least this many groups are complete
    (``members`` of their samples finished and untrained; 0: the whole group); ``drained``:
    nothing is admitted and ``Keep`` may admit nothing (queue empty or budget spent);
    ``any_group``: the finish completed a group. All but ``any_group`` wait while the trainer
    or a sync is busy (``on_update_done`` and ``on_sync_done`` come then). Zero/False turns a
    condition off; ``WakeOn()`` never wakes. ``on_finished`` then gets every sample finished
    since it was last called."""

    finished: int = 0
    groups: int = 0
    members: int = 0
    drained: bool = False
    any_group: bool = False


Action = Admit | Abort | Discard | Filter | Train | Sync | Keep | WakeOn


class SampleState(IntEnum):
    WAITING = 0  # not admitted: never started, or dropped to be regenerated
    ADMITTED = 1  # queued or running on an engine
    PAUSED = 2  # aborted with its partial response kept
    FINISHED = 3  # complete, not yet trained
    TRAINED = 4
    DISCARDED = 5  # given up on, or filtered (dynamic sampling)


# -- the policy ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class NoParams:
    """This policy has no knobs."""


@dataclass(frozen=True)
class RunContext:
    """Public facts about the run a policy may use to size itself (never per-sample lengths)."""

    prompts_per_step: int = 0
    group_size: int = 1
    num_groups: int = 0
    max_response_len: int = 0


class Policy:
    """Base class of every scheduling policy: override the hooks you need.

    Subclasses set ``name`` and ``Params`` (a frozen dataclass whose fields are the knobs, each
    with ``metadata={"help": ...}``). Each hook gets the read-only view and returns a list of
    actions (or nothing); the defaults do nothing, except that a finished update is synced:

    ======================================  =======================================================
    ``on_start(view)``                      the run begins: admit the first samples
    ``on_finished(view, samples, engine)``  samples finished on an engine (see ``WakeOn``)
    ``on_idle(view, engine)``               an engine has nothing running and nothing queued
    ``on_update_done(view)``                the trainer made a new version (default: ``[Sync()]``)
    ``on_sync_done(view)``                  the engines run the trainer's latest version
    ``on_turn_done(view, samples, engine)`` turns of multi-turn samples ended (default: nothing)
    ======================================  =======================================================

    Standing orders (``Keep``, ``WakeOn``) are actions too: returned from any hook, they stay in
    force until replaced, and the controller serves them at every finish without calling the
    policy. ``on_event`` routes an event to its hook; a policy written against the old single
    ``on_event`` overrides it and keeps working (docs/policies.md, "Migrating").

    ``listens_to_finishes``: whether ``on_finished`` (or an old ``on_event``) hears every finish
    while no ``WakeOn`` order is in force; by default, whether the class overrides either (a
    subclass of another policy inherits its parent's unless it overrides ``on_finished``).
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    listens_to_finishes: ClassVar[bool] = False  # set per subclass (see above)
    oracle: ClassVar[bool] = False  # True only for policies that read true lengths on purpose
    placements: ClassVar[tuple[str, ...] | None] = None  # cluster placements it runs on (None: all)
    # multi-turn traces: TURN_DONE events go to policies that override on_turn_done, or that
    # set this (an old-style on_event policy that handles them)
    listens_to_turns: ClassVar[bool] = False

    def __init_subclass__(cls, **kw) -> None:
        super().__init_subclass__(**kw)
        if "listens_to_finishes" in cls.__dict__:
            return
        if cls.__mro__[1] is not Policy and "on_finished" not in cls.__dict__:
            return  # a subclass of a policy hears what its parent hears
        cls.listens_to_finishes = (cls.on_finished is not Policy.on_finished
                                   or cls.on_event is not Policy.on_event)

    def __init__(self, params: object | None = None, ctx: RunContext | None = None) -> None:
        self.params = params if params is not None else self.Params()
        self.ctx = ctx if ctx is not None else RunContext()

    # -- hooks ---------------------------------------------------------------------------------

    def on_start(self, view: ClusterView) -> list[Action]:
        return []

    def on_finished(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                    ) -> list[Action]:
        return []

    def on_idle(self, view: ClusterView, engine: int | None) -> list[Action]:
        return []

    def on_update_done(self, view: ClusterView) -> list[Action]:
        return [Sync()]

    def on_sync_done(self, view: ClusterView) -> list[Action]:
        return []

    def on_turn_done(self, view: ClusterView, samples: tuple[int, ...], engine: int | None
                     ) -> list[Action]:
        return []

    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        """Route one event to its hook. Old-style policies override this instead of the hooks."""
        kind = event.kind
        if kind is EventKind.FINISHED:
            return self.on_finished(view, event.samples, event.engine)
        if kind is EventKind.ENGINE_IDLE:
            return self.on_idle(view, event.engine)
        if kind is EventKind.UPDATE_DONE:
            return self.on_update_done(view)
        if kind is EventKind.SYNC_DONE:
            return self.on_sync_done(view)
        if kind is EventKind.STARTED:
            return self.on_start(view)
        if kind is EventKind.TURN_DONE:
            return self.on_turn_done(view, event.samples, event.engine)
        return []

    def staleness_bound(self) -> int | None:
        """The most policy versions a trained token may lag behind, if the policy bounds it."""
        return None


def hears_turns(policy: Policy) -> bool:
    """Whether ``policy`` gets ``TURN_DONE`` events (multi-turn traces, both backends): its class
    overrides ``on_turn_done`` or sets ``listens_to_turns``. An old-style ``on_event`` policy
    sets it to hear them: by default it gets no event kind it might not know."""
    return bool(policy.listens_to_turns) or type(policy).on_turn_done is not Policy.on_turn_done


# -- knobs from ``--set key=value`` ------------------------------------------------------------------


def parse_params(params_cls: type, pairs: list[str], policy: str, option: str = "--set",
                 label: str = "") -> object:
    """Build ``params_cls`` from ``key=value`` strings, with one-line errors naming ``option``
    (the one the user gave them to) and each key as the user wrote it: ``label.key`` for
    compare's and forecast's ``--set LABEL.key=value`` (the label was dropped)."""
    fields = {f.name: f for f in dataclasses.fields(params_cls)}
    hints = typing.get_type_hints(params_cls)
    values: dict[str, object] = {}
    at = f"{label}." if label else ""
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{option} {at + pair!r}: expected {at}key=value")
        named = key  # (as given: simulate's --set takes POLICY.key too, as compare and tune print it)
        if not label:  # (compare's label of a module:Class policy is its class name: taken too)
            key = key.removeprefix(f"{policy}.").removeprefix(f"{policy.rpartition(':')[2]}.")
        if key not in fields:  # (a dotted key, ``sync.mdoe``, is matched by its last part)
            prefix = named[:len(named) - len(key)] if named != key else at
            known, hint = ", ".join(fields) or "none", did_you_mean(key.rpartition(".")[2], fields, prefix)
            if params_cls is NoParams:  # (a class that forgot `Params = ...`: say where knobs go)
                known = "none: the class sets no Params, a frozen dataclass of its knobs (docs/policies.md)"
            raise ConfigError(f"{option} {at}{named}: unknown parameter for policy {policy}{hint} (known: {known})")
        shown = raw if len(raw) <= 40 else f"{raw[:20]}... ({len(raw):,} characters)"
        values[key] = _coerce(raw.strip(), hints[key], f"{option} {at}{named}={shown}")
    check_given(params_cls, values, policy, f"{option} {at}")
    try:
        return params_cls(**values)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{option}: policy {policy}: {e}") from None


def check_given(params_cls: type, given: Iterable[str], policy: str, give: str) -> None:
    """Refuse a knob without a default that ``given`` lacks, saying to give it as ``give`` +
    ``key=VALUE`` (``--set ``, compare's ``--set LABEL.``, tune's ``--param NAME.``): the
    dataclass's own TypeError said "__init__() missing 1 required positional argument"."""
    missing = [f.name for f in dataclasses.fields(params_cls) if f.name not in given and f.init
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        where = _defined_at(params_cls)
        raise ConfigError(f"policy {policy}: knob {missing[0]} has no default: give it with {give}"
                          f"{missing[0]}=VALUE, or give it a default in its Params" + (f" ({where})" if where else ""))


def _defined_at(cls: type) -> str | None:
    """``file:line`` of a class defined outside sortedrl (a user's Params), else None."""
    import inspect

    try:
        path, line = inspect.getsourcefile(cls), inspect.getsourcelines(cls)[1]
    except (OSError, TypeError):
        return None
    return None if path is None or "/sortedrl/" in path.replace("\\", "/") else f"{path}:{line}"


MAX_FLOAT_KNOB = 1e9  # a knob that is a factor or a share (1e308 x a count overflowed)


def _coerce(raw: str, hint: object, where: str) -> object:
    origin = typing.get_origin(hint)
    if origin is Literal:
        return _choice(raw, hint, where)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if raw.lower() in ("none", "null") and len(args) < len(typing.get_args(hint)):
            return None
        return _coerce(raw, args[0], where)
    if hint is bool:
        if raw.lower() in ("1", "true", "yes", "on"):
            return True
        if raw.lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected a boolean (true/false)")
    if hint is int:
        try:
            value = int(raw)
        except ValueError:  # (one of over 4,300 digits too: Python's int() refuses it)
            if re.fullmatch(r"[+-]?\d+(?:_\d+)*", raw):
                raise ConfigError(f"{where}: expected an integer of at most {INT32_MAX:,}") from None
            raise ConfigError(f"{where}: expected an integer") from None
        if abs(value) > INT32_MAX:  # a count (a batch, a span): past 32 bits it counts nothing
            raise ConfigError(f"{where}: expected an integer of at most {INT32_MAX:,}")
        return value
    if hint is float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{where}: expected a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number")
        if abs(value) > MAX_FLOAT_KNOB:  # a factor or a share; 1e308 x a count overflowed
            raise ConfigError(f"{where}: expected a number of at most {MAX_FLOAT_KNOB:g}")
        return value
    if hint is str:
        return raw
    _unparsed(hint, where)


def _choice(raw: str, hint: object, where: str) -> object:
    """The choice of ``Literal[...]`` that ``raw`` names, as the Literal holds it: ``c=2`` of
    ``Literal[1, 2]`` is the int 2 (it was compared as the text "2" and refused), ``true`` of a
    bool one True, ``none`` None."""
    choices = typing.get_args(hint)
    if not all(c is None or isinstance(c, (str, int)) for c in choices):  # (an Enum member, bytes)
        _unparsed(hint, where)
    for choice in choices:
        if choice is None or isinstance(choice, bool):
            if raw.lower() == str(choice).lower():
                return choice
        elif isinstance(choice, int):
            try:
                if int(raw) == choice:
                    return choice
            except ValueError:
                pass
        elif raw == choice:
            return choice
    raise ConfigError(f"{where}: expected one of {', '.join(_shown_choice(c) for c in choices)}")


def _shown_choice(choice: object) -> str:
    return str(choice).lower() if choice is None or isinstance(choice, bool) else str(choice)


def _unparsed(hint: object, where: str) -> NoReturn:
    shown = hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint)
    raise ConfigError(f"{where}: the knob's type {shown} is not one --set parses (supported: int, "
                      f"float, bool, str, Literal[...] of strings, integers or booleans, and X | None "
                      f"of these)")


def params_dict(params: object) -> dict:
    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


if typing.TYPE_CHECKING:  # pragma: no cover
    from sortedrl.policies.view import ClusterView
