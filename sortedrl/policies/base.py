"""The policy interface: events in, actions out, through a read-only view of the cluster.

A policy is a pure decision-maker. It has no clock and does no I/O; the same class runs in the
simulator and in the real runner. It sees what a real controller could see — prompt lengths,
tokens generated so far, finished responses — and never a sample's true length (the
**no-peeking contract**). Lengths of finished samples are observations and are allowed.

Shape borrowed from vLLM's ``RequestQueue``: one abstract class with one method, small concrete
policies, and a registry from name to class (:mod:`sortedrl.policies.registry`).
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import ClassVar, Literal, Union

from sortedrl.errors import ConfigError

# -- events ------------------------------------------------------------------------------------


class EventKind(StrEnum):
    STARTED = "started"  # the run begins
    FINISHED = "finished"  # samples finished on an engine (only for policies that listen)
    ENGINE_IDLE = "engine_idle"  # an engine has nothing running and nothing queued
    UPDATE_DONE = "update_done"  # the trainer produced a new policy version
    SYNC_DONE = "sync_done"  # the engines now run the trainer's latest version


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


Action = Admit | Abort | Discard | Filter | Train | Sync


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


class Policy(ABC):
    """Base class of every scheduling policy.

    Subclasses set ``name`` and ``Params`` (a frozen dataclass whose fields are the knobs, each
    with ``metadata={"help": ...}``) and implement :meth:`on_event`. ``listens_to_finishes``
    says whether the policy wants a ``FINISHED`` event for every finish; a policy that only
    reacts to idle engines (``sync``) sets it to False and the simulator runs much faster.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type] = NoParams
    listens_to_finishes: ClassVar[bool] = True
    oracle: ClassVar[bool] = False  # True only for policies that read true lengths on purpose
    placements: ClassVar[tuple[str, ...] | None] = None  # cluster placements it runs on (None: all)

    def __init__(self, params: object | None = None, ctx: RunContext | None = None) -> None:
        self.params = params if params is not None else self.Params()
        self.ctx = ctx if ctx is not None else RunContext()

    @abstractmethod
    def on_event(self, event: Event, view: ClusterView) -> list[Action]:
        """React to one event with a list of actions (possibly empty)."""

    def staleness_bound(self) -> int | None:
        """The most policy versions a trained token may lag behind, if the policy bounds it."""
        return None


# -- knobs from ``--set key=value`` ------------------------------------------------------------------


def parse_params(params_cls: type, pairs: list[str], policy: str) -> object:
    """Build ``params_cls`` from ``key=value`` strings, with one-line errors."""
    fields = {f.name: f for f in dataclasses.fields(params_cls)}
    hints = typing.get_type_hints(params_cls)
    values: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected key=value")
        if key not in fields:
            known = ", ".join(fields) or "none"
            raise ConfigError(f"--set {key}: unknown parameter for policy {policy} (known: {known})")
        values[key] = _coerce(raw.strip(), hints[key], f"--set {key}={raw}")
    try:
        return params_cls(**values)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"--set: policy {policy}: {e}") from None


def _coerce(raw: str, hint: object, where: str) -> object:
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if raw not in choices:
            raise ConfigError(f"{where}: expected one of {', '.join(map(str, choices))}")
        return raw
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
            return int(raw)
        except ValueError:
            raise ConfigError(f"{where}: expected an integer") from None
    if hint is float:
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"{where}: expected a number") from None
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number")
        return value
    return raw


def params_dict(params: object) -> dict:
    return dataclasses.asdict(params) if dataclasses.is_dataclass(params) else {}


if typing.TYPE_CHECKING:  # pragma: no cover
    from sortedrl.policies.view import ClusterView
