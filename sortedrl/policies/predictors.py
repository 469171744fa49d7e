"""Length predictors: how a length-aware policy guesses how long a response will be.

A policy never sees true lengths (the no-peeking contract), so any length-aware decision goes
through a :class:`LengthPredictor`:

- :class:`OracleLengths` **is an oracle**: it reads the trace's true lengths. It exists as an upper
  reference (what perfect knowledge would buy) and every run that uses it is labelled
  ``"oracle": true`` in its summary. It is built only by the registry, explicitly, from the trace.
- :class:`HistoryLengths` predicts the last length observed for the same prompt (responses of a
  prompt recur across epochs and have similar lengths; RhymeRL, Seer), and the mean of everything
  observed so far for a prompt never seen. It learns only from finished responses.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from sortedrl.policies.view import ClusterView


class LengthPredictor(ABC):
    oracle: ClassVar[bool] = False

    def observe(self, view: ClusterView, samples: tuple[int, ...]) -> None:  # noqa: B027
        """Learn from samples that just finished (their lengths are observations)."""

    @abstractmethod
    def predict(self, view: ClusterView, sample: int) -> float:
        """Predicted response length of a sample, in tokens."""

    def predict_many(self, view: ClusterView, samples) -> list[float]:
        """``predict`` of each of ``samples``, in order (a predictor may do it faster at once)."""
        return [self.predict(view, i) for i in samples]


class OracleLengths(LengthPredictor):
    """ORACLE: the true lengths, read from the trace. An upper reference, never deployable."""

    oracle = True

    def __init__(self, true_lengths: list[int]) -> None:
        self._true = list(true_lengths)
        self._array = np.asarray(self._true, dtype=np.float64)

    def predict(self, view: ClusterView, sample: int) -> float:
        return float(self._true[sample])

    def predict_many(self, view: ClusterView, samples) -> list[float]:
        return self._array[np.asarray(samples, dtype=np.int64)].tolist()


class HistoryLengths(LengthPredictor):
    """The last observed length of the same prompt; the running mean for unseen prompts."""

    def __init__(self, default: float) -> None:
        self.last: dict[str, float] = {}
        self.total = 0.0
        self.count = 0
        self.default = default

    def observe(self, view: ClusterView, samples: tuple[int, ...]) -> None:
        for i in samples:
            n = view.response_len(i)
            self.last[view.prompt_id(view.group_of(i))] = float(n)
            self.total += n
            self.count += 1

    def predict(self, view: ClusterView, sample: int) -> float:
        pid = view.prompt_id(view.group_of(sample))
        if pid in self.last:
            return self.last[pid]
        return self.total / self.count if self.count else self.default
