"""A policy that never ends: the controller's guards against loops, and what a stalled run says.

A run ends when every sample is trained or discarded. A policy can keep it from ending in three
ways, and each is stopped with one error line that says what to change:

- it stops acting: nothing is in flight and samples are left. The backend runs out of events,
  and :func:`stall_reason` counts the samples by state, with a hint for each state;
- it drops and re-admits responses forever (``Abort(keep_tokens=False)`` then ``Admit``):
  :class:`RegenWatch` stops it once the responses regenerated since a sample was last trained,
  discarded or filtered exceed ``REGEN_PER_SAMPLE`` per sample of the run (``REGEN_FLOOR`` at
  least). The controller keeps its per-sample guard too (``MAX_ATTEMPTS``). Measured with every
  built-in policy (each knob that regenerates: ``sortedrl`` both modes and harvests,
  ``partial keep_partial=false``, ``tail_batch``, ``async drop_stale=true``, ``filter_groups``)
  on the bundled traces, a synthetic ``agentic-retool`` (64 x 8 x 4) and a synthetic
  ``math-16k`` of 98,304 samples (512 x 16 x 12), on colocated and disaggregated H100 presets,
  the most responses regenerated between two settles was 0.63 per sample at default knobs
  (``sortedrl filter_groups=true`` on ``math-16k.jsonl``, 8 GPUs) and 0.82 with harvests as small
  as ``sortedrl update_batch=8``; the most in a whole run was 467.5 per sample (``sortedrl
  update_batch=1 harvest=samples`` on ``math-16k.jsonl``; one sample 1,421 times), which trains
  between its drops: a limit on the run's total would stop a policy that makes progress;
- it syncs forever and never trains (``on_sync_done`` returns ``Sync()``): events keep coming,
  so the run never stalls. :class:`SyncWatch` stops it at the ``IDLE_SYNCS``-th sync in a row
  with nothing between: no new version, and no sample finished, admitted, aborted, trained,
  discarded or filtered, and no turn ended. In the same runs no built-in policy synced twice
  without an update between, so refusing such a sync outright would also be possible; it is
  not, because a redundant sync only wastes time, a policy that does it a few times still ends
  (a ``Sync`` in ``on_start``), and a real run resumed from a checkpoint would need the version
  last synced restored; only a loop is stopped.
"""

from __future__ import annotations

from sortedrl.errors import PolicyError
from sortedrl.policies.base import SampleState

REGEN_PER_SAMPLE = 10  # responses regenerated between two settles, per sample (built-ins: <= 0.82)
REGEN_FLOOR = 1_000  # ... and at least this many (a trace of a few samples)
IDLE_SYNCS = 100  # syncs in a row with nothing between them: stopped at this one (built-ins: 1)

# what to do about the samples a stalled run is left with, by state
HINTS = {
    SampleState.WAITING: "Admit the waiting ones (or keep them in a Keep queue)",
    SampleState.PAUSED: "re-admit the paused ones (Abort leaves a sample paused, or waiting "
                        "with keep_tokens=False)",
    SampleState.FINISHED: "return Train(...) for the finished ones",
}


def stall_reason(states) -> str:
    """The samples left when nothing is in flight, counted by state, and what to do about them.
    ``states``: each sample's state code (``PublicState.state``, a bytearray)."""
    counts = {st: states.count(int(st)) for st in SampleState}
    told = ", ".join(f"{n:,} {st.name.lower()}" for st, n in counts.items() if n)
    hints = [hint for st, hint in HINTS.items() if counts[st]]
    return f"{told} samples, nothing in flight" + (": " + "; ".join(hints) if hints else "")


class RegenWatch:
    """Responses regenerated since a sample was last settled (trained, discarded, filtered)."""

    __slots__ = ("count", "limit")

    def __init__(self, samples: int) -> None:
        self.count = 0
        self.limit = max(REGEN_FLOOR, REGEN_PER_SAMPLE * samples)

    def dropped(self, n: int) -> bool:
        """Count ``n`` responses dropped to be regenerated; whether that passes the limit."""
        self.count += n
        return self.count > self.limit

    def error(self, policy: str, hook: str | None) -> PolicyError:
        by = f" (the last from {hook})" if hook else ""
        return PolicyError(f"policy {policy} regenerated more than {self.limit:,} responses{by} "
                           "since it last trained, discarded or filtered a sample: it drops and "
                           "re-admits responses forever (Abort with keep_tokens=False, then Admit)")


class SyncWatch:
    """Syncs in a row with nothing between them (see the module doc)."""

    __slots__ = ("mark", "count", "turns")

    def __init__(self) -> None:
        self.mark: tuple | None = None
        self.count = 0
        self.turns = 0  # TURN_DONE events heard (the controller counts them, as progress)

    def synced(self, mark: tuple) -> bool:
        """Count a sync; ``mark``: the run's progress counters at it (version, settled, admitted,
        ...). Whether the syncs in a row with nothing between pass the limit."""
        self.count = self.count + 1 if mark == self.mark else 1
        self.mark = mark
        return self.count >= IDLE_SYNCS

    def error(self, policy: str, hook: str | None) -> PolicyError:
        by = f" (the last from {hook})" if hook else ""
        return PolicyError(f"policy {policy} synced {self.count} times in a row{by} with no update "
                           "and no sample moving between: it syncs forever and never trains (Sync "
                           "once after each update, as on_update_done's default does; a Sync is no "
                           "way to wait)")
