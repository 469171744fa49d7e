"""``calibrate --from-metrics FILE --trace T``: each metrics row's trained tokens and attention
pairs, from the same run's length trace.

The metrics hold only the lengths' mean, max and min, so Σ L(L+1)/2 over a step's samples (the
simulator's pair term) is unknown without the samples. The trace has them: a sample trains
``L = prompt_len + response_len`` tokens (plus its tool-output tokens in a multi-turn trace, as
the simulator's trainer counts them), and a step's update costs what :meth:`CostModel.train_tokens`
and :meth:`CostModel.train_pairs` give for the step's samples under the base cluster's settings
(padding, micro-batches).

Steps match by number (verl logs steps from 1 and its dump importer keeps verl's numbers): a row
of verl's synchronous trainer is the trace's step of its number, also with ``--updates-per-row K``
(its K mini-batches are K updates of that one step); a row of a fully-async file (told by its keys)
sums ``n`` updates, the trace steps ``u - n + 1 .. u``, ``u`` its last update: the row's
``training/global_step``, else its step times K. Rows whose steps are all in the trace are fitted;
the others, and the trace steps no such row covers, are left out with a note.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sortedrl.calibration.metrics_layouts import GLOBAL_STEP, async_marks
from sortedrl.errors import ConfigError
from sortedrl.sim.cost import CostModel
from sortedrl.traces.io import read_trace
from sortedrl.traces.schema import Trace

TERMS = ("train_fix", "train_per_token", "train_per_pair")
TOKEN_TOLERANCE = 0.01  # the trace's tokens of a row against the metrics': beyond this, not this run's


class TraceSteps:
    """Per trace step: (tokens, pairs, unpadded tokens) of its update under ``costs``' settings."""

    def __init__(self, path: str | Path, costs: CostModel):
        self.where = str(path)
        trace = read_trace(path)
        if trace.step is None:
            raise ConfigError(f"--trace {self.where}: the trace has no 'step' column: the fit matches its "
                              "samples to the metrics' steps by it")
        order = np.argsort(trace.step, kind="stable")  # each step's samples, in trace order
        steps, starts = np.unique(trace.step[order], return_index=True)
        groups = np.split(_trained_lengths(trace)[order], starts[1:])
        self.counts: dict[int, tuple[int, int, int]] = {}
        for step, group in zip(steps.tolist(), groups, strict=True):
            ls = group.tolist()
            self.counts[step] = (costs.train_tokens(ls), costs.train_pairs(ls), sum(ls))

    def design(self, metrics: dict, where: str, updates: dict[int, int], k: int,
               logged: tuple[str, dict[int, float]] | None) -> tuple[list[int], np.ndarray, list[str]]:
        """The rows fitted, their [updates, tokens, pairs] and the notes: ``updates`` maps a
        metrics row to its updates; ``logged``: the metrics' tokens of a row, to compare."""
        spans = {s: _covered_steps(metrics, s, updates[s], k) for s in updates}
        rows = [s for s in sorted(spans) if all(u in self.counts for u in spans[s])]
        if len(rows) < len(TERMS) + 1:
            raise ConfigError(f"--trace {self.where}: {len(rows)} of the {len(spans)} metrics rows match the "
                              f"trace's steps: fitting {', '.join(TERMS)} needs at least {len(TERMS) + 1} "
                              f"(metrics {where}: steps {_span(spans)}; trace {self.where}: steps "
                              f"{_span(self.counts)})")
        sums = np.array([[sum(self.counts[u][i] for u in spans[s]) for i in range(3)] for s in rows], dtype=float)
        X = np.column_stack([[float(updates[s]) for s in rows], sums[:, 0], sums[:, 1]])
        notes = self._left_out(spans, rows, where)
        if logged is not None:
            notes += self._token_check(rows, sums[:, 2], logged)
        return rows, X, notes

    def _left_out(self, spans: dict[int, range], rows: list[int], where: str) -> list[str]:
        used = {u for s in rows for u in spans[s]}
        rows_out, steps_out = len(spans) - len(rows), len(set(self.counts) - used)
        if not rows_out and not steps_out:
            return []
        return [f"--trace {self.where}: {len(rows)} metrics rows matched; left out {rows_out} row(s) of "
                f"{where} whose steps the trace lacks and {steps_out} trace step(s) no fitted row covers"]

    def _token_check(self, rows: list[int], unpadded: np.ndarray, logged: tuple[str, dict[int, float]]) -> list[str]:
        pairs = [(s, t, logged[1][s]) for s, t in zip(rows, unpadded, strict=True) if s in logged[1]]
        off = [(abs(t - m) / m if m else float("inf"), s, t, m) for s, t, m in pairs
               if abs(t - m) > TOKEN_TOLERANCE * abs(m)]
        if not off:
            return []
        _, s, t, m = max(off)
        return [f"the trace's tokens differ from {logged[0]} by more than {100 * TOKEN_TOLERANCE:g}% in "
                f"{len(off)} of {len(pairs)} rows (most at step {s}: {t:.0f} against {m:.0f}): {self.where} "
                "is probably not the trace of this run"]


def _trained_lengths(trace: Trace) -> np.ndarray:
    """Prompt + response of each sample, with its tool-output tokens (trained, masked)."""
    lengths = trace.prompt_len.astype(np.int64) + trace.response_len
    if trace.turn_offsets is not None and trace.turn_tool_tokens is not None:
        lengths = lengths + np.add.reduceat(trace.turn_tool_tokens, trace.turn_offsets[:-1])
    return lengths


def _covered_steps(metrics: dict, step: int, updates: int, k: int) -> range:
    """The trace steps a metrics row trained. In a fully-async file a row sums ``updates``
    updates, each a trace step, up to its last: its ``training/global_step``, else its step x
    ``k``. Elsewhere a row is one step of the trace, whatever ``--updates-per-row`` says: verl's
    synchronous trainer logs a step per row and dumps it as one trace step, and K counts its
    mini-batches (the optimizer steps of the row), not steps."""
    if not async_marks(metrics):
        return range(step, step + 1)
    gs = metrics.get(GLOBAL_STEP)
    last = int(gs[step]) if gs and step in gs else step * k
    return range(last - updates + 1, last + 1)


def _span(steps) -> str:
    return f"{min(steps)}-{max(steps)}" if steps else "none"
