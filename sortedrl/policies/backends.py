"""The interface a backend implements for the controller: the simulator and the real runner.

Kept apart from :mod:`sortedrl.policies.controller` so that a backend author reads only what to
implement: execute actions, report time, and drive the run.
"""

from __future__ import annotations

import typing
from abc import ABC, abstractmethod

from sortedrl.policies.view import EngineInfo


class Backend(ABC):
    """Executes actions and reports events; the simulator and the real runner implement it.

    Besides the calls below, a backend keeps two of the controller's lists current, because only
    it sees tokens being made: ``controller.s.oldest[i]``, the policy version of sample i's
    oldest kept token (set when its first token is generated), and it reports finishes through
    ``controller.samples_finished`` (preemptions through ``sample_preempted``). It then
    dispatches a ``FINISHED`` event when the policy listens to finishes; the controller decides
    whether the policy hears it (``hears``) and serves the standing orders either way.
    """

    placement: str = "colocated"

    @abstractmethod
    def engine_infos(self) -> list[EngineInfo]:
        """The public halves of the engines, in index order."""

    @abstractmethod
    def now(self) -> float:
        """Current time in seconds since the run started."""

    @abstractmethod
    def admit(self, engine: int, samples: list[int], generated: list[int]) -> None:
        """Queue samples on an engine; ``generated`` tokens are resumed (re-prefilled)."""

    @abstractmethod
    def abort(self, samples: list[int]) -> list[int]:
        """Stop admitted samples; return the tokens each had generated."""

    @abstractmethod
    def train(self, samples: list[int], version: int) -> None:
        """Start one update; report ``controller.update_done()`` when it ends."""

    @abstractmethod
    def sync(self, version: int) -> None:
        """Push weights of ``version`` to every engine; report ``controller.sync_done()``."""

    @abstractmethod
    def set_rollout(self, enabled: bool) -> None:
        """Stop or restart generation on every engine (colocated placement)."""

    @abstractmethod
    def run(self, controller: Controller) -> None:
        """Drive time until nothing is left to happen, then return."""


if typing.TYPE_CHECKING:  # pragma: no cover
    from sortedrl.policies.controller import Controller
