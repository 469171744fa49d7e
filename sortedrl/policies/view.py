"""What a policy may see: the read-only :class:`ClusterView`.

The view is built over :class:`PublicState`, the controller's bookkeeping, and over the engines'
public halves (:class:`EngineInfo`). Neither holds a sample's true length, the trace, or the
backend, so nothing reachable from a view can reveal how long an unfinished response will be.
``tests/test_no_peeking.py`` walks every object reachable from a view to prove it.

An id a getter takes (a sample's, a group's, an engine's) is checked as it is used: a negative
one by a comparison (Python's indexing would read it from the end: ``state(-1)``, the last
sample's), one past the end by the IndexError of the indexing itself (a ``try``, which costs
nothing until it raises); either is the same IndexError, ``no sample -1: sample ids are 0 to
511``. Nothing else is checked per call: the getters are the policies' hot path (``group_of``
indexes nothing, so it checks the sign alone; ``group_samples``, called per group, both ends).
"""

from __future__ import annotations

from array import array
from typing import Protocol

import numpy as np

from sortedrl.errors import PolicyError
from sortedrl.policies.base import SampleState


class EngineInfo(Protocol):
    """The public half of a rollout engine."""

    index: int
    max_num_seqs: int
    version: int

    def running(self) -> tuple[int, ...]: ...

    def queued(self) -> tuple[int, ...]: ...

    def tokens(self, sample: int, now: float) -> int: ...

    def load(self) -> int: ...


class PublicState:
    """Controller bookkeeping that a policy may read: per-sample arrays and cluster flags.

    Per-sample state lives in compact typed arrays indexed by sample id (``array.array`` and a
    ``bytearray``: 4 or 8 bytes per sample, and Python ints on reading), not in lists or dicts
    of Python objects (a list costs 8 bytes a sample and a dict about 70, plus boxed ints), so
    that a 10M-sample run holds it in about 300 MB. Token counts are int32, as in the timeline."""

    def __init__(self, prompt_id: np.ndarray, prompt_len, group_size: int,
                 engines: list[EngineInfo], placement: str) -> None:
        n = len(prompt_len)
        self.group_size = group_size
        self.num_groups = n // group_size
        self.prompt_id = prompt_id[::group_size].copy()  # one per group
        self.prompt_len = int_array("i", prompt_len)  # lengths: int32, as the timeline's
        self.state = bytearray(n)  # a SampleState per sample (WAITING is 0)
        self.generated = array("i", bytes(4 * n))  # tokens kept at the last report (finish, pause, preempt)
        self.response_len = array("i", [-1]) * n  # observed: finished samples only (-1: none)
        self.reward = array("d", bytes(8 * n))  # observed when response_len is (the grader's verdict)
        self.rewarded = False  # the run has rewards (a trace without them has none)
        self.attempt = array("i", bytes(4 * n))
        self.oldest = array("i", [-1]) * n  # version of the oldest kept token (-1: none yet)
        self.engine_of = array("i", [-1]) * n
        self.buffer: dict[int, None] = {}  # finished, untrained, in finish order
        self.paused: dict[int, None] = {}
        self.started = bytearray(self.num_groups)
        self.started_count = 0
        self.next_group = 0  # first group never admitted
        self.engines = engines
        self.load = [0] * len(engines)  # admitted (running or queued) samples per engine
        self.admitted = 0  # admitted samples in all
        self.finished_in = [0] * self.num_groups  # finished, untrained members per group
        self.complete_at = group_size  # members finished for a group to count as complete
        self.complete = 0  # groups with at least ``complete_at`` finished members
        self.placement = placement
        self.version = 0  # the trainer's latest version
        self.trainer_busy = False
        self.syncing = False
        self.now = 0.0  # set by the controller before each event; not shown to policies


def int_array(typecode: str, values) -> array:
    """``values`` (a list or an integer NumPy array) as a typed array, without a Python loop."""
    if isinstance(values, np.ndarray):
        dtype = np.dtype(f"i{array(typecode).itemsize}")
        if values.size and not (np.iinfo(dtype).min <= values.min() and values.max() <= np.iinfo(dtype).max):
            raise OverflowError(f"a value does not fit in {dtype}")  # as array() itself says
        return array(typecode, np.ascontiguousarray(values, dtype=dtype).tobytes())
    return array(typecode, values)


STATES = tuple(SampleState)  # a state code read from ``PublicState.state`` -> its SampleState
ADMITTED = SampleState.ADMITTED


def no_such(what: str, i: object, count: int) -> IndexError:
    """The error of a getter given an id that names nothing: ``no sample 512: sample ids are 0
    to 511`` (``what``: sample, group or engine; ``count``: how many there are)."""
    return IndexError(f"no {what} {i!r}: {what} ids are 0 to {count - 1}")


class ClusterView:
    """Read-only access to the cluster for a policy. Every method returns a copy or a number.
    A sample, group or engine id out of range raises IndexError (:func:`no_such`)."""

    __slots__ = ("_s",)

    def __init__(self, state: PublicState) -> None:
        self._s = state

    def _no_sample(self, sample: object) -> IndexError:
        return no_such("sample", sample, len(self._s.state))

    def _no_group(self, group: object) -> IndexError:
        return no_such("group", group, self._s.num_groups)

    def _no_engine(self, engine: object) -> IndexError:
        return no_such("engine", engine, len(self._s.engines))

    # cluster ------------------------------------------------------------------------------
    @property
    def engines(self) -> int:
        return len(self._s.engines)

    def capacity(self, engine: int) -> int:
        if engine < 0:
            raise self._no_engine(engine)
        try:
            return self._s.engines[engine].max_num_seqs
        except IndexError:
            raise self._no_engine(engine) from None

    @property
    def total_capacity(self) -> int:
        return sum(e.max_num_seqs for e in self._s.engines)

    @property
    def placement(self) -> str:
        return self._s.placement

    @property
    def version(self) -> int:
        return self._s.version

    def engine_version(self, engine: int) -> int:
        if engine < 0:
            raise self._no_engine(engine)
        try:
            return self._s.engines[engine].version
        except IndexError:
            raise self._no_engine(engine) from None

    @property
    def trainer_busy(self) -> bool:
        return self._s.trainer_busy

    @property
    def syncing(self) -> bool:
        return self._s.syncing

    @property
    def busy(self) -> bool:
        """The trainer is updating or a weight sync is running (the usual guard before acting)."""
        return self._s.trainer_busy or self._s.syncing

    # prompts ------------------------------------------------------------------------------
    @property
    def group_size(self) -> int:
        return self._s.group_size

    @property
    def num_groups(self) -> int:
        return self._s.num_groups

    @property
    def groups_left(self) -> int:
        """Groups never admitted yet (the dataloader's remaining prompts)."""
        return self._s.num_groups - self._s.started_count

    def next_groups(self, k: int) -> tuple[int, ...]:
        """The next ``k`` never-admitted groups in dataloader order."""
        s, out, g = self._s, [], self._s.next_group
        while g < s.num_groups and len(out) < k:
            if not s.started[g]:
                out.append(g)
            g += 1
        return tuple(out)

    def group_samples(self, group: int) -> range:
        s = self._s
        if not 0 <= group < s.num_groups:
            raise self._no_group(group)
        n = s.group_size
        return range(group * n, (group + 1) * n)

    def group_of(self, sample: int) -> int:
        """The group of ``sample`` (arithmetic only: an id past the end is not looked up)."""
        if sample < 0:
            raise self._no_sample(sample)
        return sample // self._s.group_size

    def prompt_id(self, group: int) -> str:
        if group < 0:
            raise self._no_group(group)
        try:
            return str(self._s.prompt_id[group])
        except IndexError:
            raise self._no_group(group) from None

    def prompt_len(self, sample: int) -> int:
        if sample < 0:
            raise self._no_sample(sample)
        try:
            return self._s.prompt_len[sample]
        except IndexError:
            raise self._no_sample(sample) from None

    # samples ------------------------------------------------------------------------------
    def state(self, sample: int) -> SampleState:
        if sample < 0:
            raise self._no_sample(sample)
        try:
            return STATES[self._s.state[sample]]
        except IndexError:
            raise self._no_sample(sample) from None

    def states(self, samples) -> np.ndarray:
        """``state`` of many samples at once: their SampleState codes as a uint8 array (compare
        with ``SampleState.X``, an int enum); the first unknown sample is named, as by ``state``."""
        idx = np.asarray(samples, dtype=np.int64).reshape(-1)
        s = self._s
        bad = np.flatnonzero((idx < 0) | (idx >= len(s.state)))
        if bad.size:
            raise self._no_sample(int(idx[bad[0]]))
        return np.frombuffer(s.state, dtype=np.uint8)[idx]

    def oldest_versions(self, samples) -> np.ndarray:
        """``oldest_version`` of many samples at once, as an int64 array (-1: no kept token;
        the first unknown sample is named, as by ``oldest_version``)."""
        idx = np.asarray(samples, dtype=np.int64).reshape(-1)
        s = self._s
        bad = np.flatnonzero((idx < 0) | (idx >= len(s.oldest)))
        if bad.size:
            raise self._no_sample(int(idx[bad[0]]))
        return np.frombuffer(s.oldest, dtype=np.int32)[idx].astype(np.int64)

    def attempt(self, sample: int) -> int:
        if sample < 0:
            raise self._no_sample(sample)
        try:
            return self._s.attempt[sample]
        except IndexError:
            raise self._no_sample(sample) from None

    def oldest_version(self, sample: int) -> int | None:
        """The policy version that generated the sample's oldest kept token (None: no tokens)."""
        if sample < 0:
            raise self._no_sample(sample)
        try:
            v = self._s.oldest[sample]
        except IndexError:
            raise self._no_sample(sample) from None
        return None if v < 0 else v

    def generated(self, sample: int) -> int:
        """Tokens generated so far: live for running samples; for queued ones (admitted, not
        yet running) and ones away on a tool call, the tokens they hold (0 for a fresh one)."""
        s = self._s
        if sample < 0:
            raise self._no_sample(sample)
        try:
            admitted = s.state[sample] == ADMITTED
        except IndexError:
            raise self._no_sample(sample) from None
        if admitted:
            n = s.engines[s.engine_of[sample]].tokens(sample, s.now)
            if n is not None:  # (an engine that does not know it yet: the tokens it was admitted with)
                return n
        return s.generated[sample]

    def response_len(self, sample: int) -> int:
        """The length of a finished response. Unfinished samples have no length yet."""
        if sample < 0:
            raise self._no_sample(sample)
        try:
            n = self._s.response_len[sample]
        except IndexError:
            raise self._no_sample(sample) from None
        if n < 0:
            raise PolicyError(f"sample {sample} has not finished: its length is unknown")
        return n

    def response_lens(self, samples) -> np.ndarray:
        """``response_len`` of many finished samples at once, as an int64 array (the same errors:
        the first sample that is unknown or unfinished is named)."""
        idx = np.asarray(samples, dtype=np.int64).reshape(-1)
        s = self._s
        bad = np.flatnonzero((idx < 0) | (idx >= len(s.response_len)))
        if bad.size:
            raise self._no_sample(int(idx[bad[0]]))
        lens = np.frombuffer(s.response_len, dtype=np.int32)[idx].astype(np.int64)
        if lens.size and lens.min() < 0:
            return self.response_len(int(idx[np.flatnonzero(lens < 0)[0]]))  # (raises)
        return lens

    def reward(self, sample: int) -> float:
        """The reward of a finished response (graded when it finished)."""
        s = self._s
        if sample < 0:
            raise self._no_sample(sample)
        try:
            unknown = not s.rewarded or s.response_len[sample] < 0
        except IndexError:
            raise self._no_sample(sample) from None
        if unknown:
            raise PolicyError(f"sample {sample} has no reward: it has not finished, or the trace "
                              "has no reward column")
        return s.reward[sample]

    def engine_of(self, sample: int) -> int | None:
        if sample < 0:
            raise self._no_sample(sample)
        try:
            e = self._s.engine_of[sample]
        except IndexError:
            raise self._no_sample(sample) from None
        return None if e < 0 else e

    def _engine(self, engine: int) -> EngineInfo:
        if engine < 0:
            raise self._no_engine(engine)
        try:
            return self._s.engines[engine]
        except IndexError:
            raise self._no_engine(engine) from None

    def running(self, engine: int) -> tuple[int, ...]:
        return self._engine(engine).running()

    def queued(self, engine: int) -> tuple[int, ...]:
        return self._engine(engine).queued()

    def in_tool(self, engine: int) -> tuple[int, ...]:
        """Samples admitted to an engine that are away on a tool call (or waiting for a
        sandbox) between two turns: they hold no slot and come back to this engine."""
        away = getattr(self._engine(engine), "in_tool", None)
        return away() if away is not None else ()

    def load(self, engine: int) -> int:
        """Admitted samples on an engine: running, queued, or away on a tool call."""
        if engine < 0:
            raise self._no_engine(engine)
        try:
            return self._s.load[engine]
        except IndexError:
            raise self._no_engine(engine) from None

    @property
    def admitted(self) -> int:
        """Running plus queued samples on every engine."""
        return self._s.admitted

    def paused(self) -> tuple[int, ...]:
        return tuple(self._s.paused)

    def finished(self) -> tuple[int, ...]:
        """Finished, untrained samples in finish order (the rollout buffer)."""
        return tuple(self._s.buffer)

    @property
    def finished_count(self) -> int:
        return len(self._s.buffer)

    def finished_in(self, group: int) -> int:
        """Finished, untrained samples of a group."""
        if group < 0:
            raise self._no_group(group)
        try:
            return self._s.finished_in[group]
        except IndexError:
            raise self._no_group(group) from None

    @property
    def complete_groups(self) -> int:
        """Groups all of whose samples are finished and untrained (or as many as the policy's
        ``WakeOn(members=...)`` asks)."""
        return self._s.complete
