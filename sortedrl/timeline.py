"""The timeline: one event log of everything that happened in a run, simulated or real.

Both backends and the controller append to a :class:`Timeline`; :mod:`sortedrl.metrics` computes
every reported number from it alone, so a timeline read back from ``timeline.jsonl`` gives the same
summary as the one in memory. Records are kept as tuples (a million-sample run makes millions of
them) and turned into JSON objects only when written.

Record kinds (``docs/metrics.md`` defines each field):

- ``meta``: the run's configuration: cluster shape, policy, params, trace, seed, lower bound;
- ``span``: one stretch of decoding of one sample on one engine under one policy version, written
  when it ends; ``end`` says how: ``finish``, ``preempt`` (KV cache full; recomputed later) or
  ``abort`` (a policy action). Preempt, finish and abort events are these span ends;
- ``prefill``: the prefill of newly admitted samples, engine-wide or in chunks beside the running
  batch (``recomputed`` counts tokens that had been generated before and are recomputed);
- ``admit``, ``abort``, ``discard``: the controller's decisions; ``filter``: finished groups
  dropped by dynamic sampling (all rewards equal, so no GRPO signal);
- ``train``: one update from ``version`` to ``version + 1``; ``sync``: one weight push;
- ``offload`` / ``onload``: colocated placement only: the engines move their weights and KV
  cache out of GPU memory before an update (vLLM sleep) and back before rollout resumes (wake);
- ``tool``: multi-turn traces: one tool call between two turns of a trajectory: the sample left
  ``engine`` at ``t``, got a sandbox at ``t_start`` and its result came back at ``t_end``
  (``turn`` is the turn it follows). A span that ends with ``end`` = ``tool`` is that turn.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from sortedrl.errors import SortedRLError

KINDS = ("meta", "admit", "prefill", "span", "abort", "discard", "filter", "train", "sync",
         "offload", "onload", "tool")
_ORDER = {k: i for i, k in enumerate(KINDS)}
FIELDS = {  # the JSON field of each tuple position, per record kind
    "span": ("t", "t_end", "engine", "sample", "attempt", "version", "tokens", "end"),
    "prefill": ("t", "t_end", "engine", "samples", "tokens", "recomputed"),
    "admit": ("t", "engine", "samples"),
    "abort": ("t", "samples", "keep_tokens"),
    "discard": ("t", "samples"),
    "filter": ("t", "samples"),
    "train": ("t", "t_end", "version", "samples", "tokens"),
    "sync": ("t", "t_end", "version"),
    "offload": ("t", "t_end", "version"),
    "onload": ("t", "t_end", "version"),
    "tool": ("t", "t_start", "t_end", "engine", "sample", "attempt", "turn"),
}
_LIST = {"span": "spans", "prefill": "prefills", "admit": "admits", "abort": "aborts",
         "discard": "discards", "filter": "filters", "train": "trains", "sync": "syncs",
         "offload": "offloads", "onload": "onloads", "tool": "tools"}


class Timeline:
    """In-memory event log; see the module docstring for the record kinds."""

    def __init__(self, meta: dict | None = None) -> None:
        self.meta: dict = dict(meta or {})
        self.spans: list[tuple] = []  # (t0, t1, engine, sample, attempt, version, tokens, end)
        self.prefills: list[tuple] = []  # (t0, t1, engine, samples, tokens, recomputed)
        self.admits: list[tuple] = []  # (t, engine, samples)
        self.aborts: list[tuple] = []  # (t, samples, keep_tokens)
        self.discards: list[tuple] = []  # (t, samples)
        self.filters: list[tuple] = []  # (t, samples): dynamic sampling dropped these groups
        self.trains: list[tuple] = []  # (t0, t1, version, samples, tokens)
        self.syncs: list[tuple] = []  # (t0, t1, version)
        self.offloads: list[tuple] = []  # (t0, t1, version)
        self.onloads: list[tuple] = []  # (t0, t1, version)
        self.tools: list[tuple] = []  # (t, t_start, t_end, engine, sample, attempt, turn)

    # -- recording ---------------------------------------------------------------------------
    # The simulator appends to the lists directly (hot path); the real runner goes through
    # :meth:`add`, which also streams each record to ``sink`` (crash-safe logs).

    sink = None  # optional callable(kind, row), set by the real runner (see record_line)

    def add(self, kind: str, *row) -> None:
        getattr(self, _LIST[kind]).append(row)
        if self.sink is not None:
            self.sink(kind, row)

    def admit(self, t: float, engine: int, samples: list[int]) -> None:
        self.add("admit", t, engine, list(samples))

    def abort(self, t: float, samples: list[int], keep_tokens: bool) -> None:
        self.add("abort", t, list(samples), keep_tokens)

    def discard(self, t: float, samples: list[int]) -> None:
        self.add("discard", t, list(samples))

    def filter(self, t: float, samples: list[int]) -> None:
        self.add("filter", t, list(samples))

    def train(self, t0: float, t1: float, version: int, samples: list[int], tokens: int) -> None:
        self.add("train", t0, t1, version, list(samples), tokens)

    def sync(self, t0: float, t1: float, version: int) -> None:
        self.add("sync", t0, t1, version)

    def offload(self, t0: float, t1: float, version: int) -> None:
        self.add("offload", t0, t1, version)

    def onload(self, t0: float, t1: float, version: int) -> None:
        self.add("onload", t0, t1, version)

    def tool(self, t: float, t_start: float, t_end: float, engine: int, sample: int, attempt: int,
             turn: int) -> None:
        self.add("tool", t, t_start, t_end, engine, sample, attempt, turn)

    # -- JSONL ---------------------------------------------------------------------------------

    def records(self) -> list[dict]:
        """All records as JSON-ready dicts, ordered by start time (ties: kind, then insertion)."""
        rows: list[tuple] = []
        for kind, name in _LIST.items():
            order = _ORDER[kind]
            rows += [(row[0], order, j, kind, row) for j, row in enumerate(getattr(self, name))]
        rows.sort(key=lambda r: r[:3])
        return [{"kind": "meta", **self.meta}] + [_record(kind, row) for *_, kind, row in rows]

    def write_jsonl(self, path: str | Path) -> None:
        """Write atomically: a failure leaves any previous file untouched."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; give the file the usual mode
        try:
            with os.fdopen(fd, "w") as f:
                for rec in self.records():
                    f.write(_dumps(rec))
                    f.write("\n")
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise

    @classmethod
    def read_jsonl(cls, path: str | Path) -> Timeline:
        tl = cls()
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    r = json.loads(line)
                    kind = r["kind"]
                    if kind == "meta":
                        tl.meta = {k: v for k, v in r.items() if k != "kind"}
                    elif kind in FIELDS:
                        getattr(tl, _LIST[kind]).append(tuple(r[f] for f in FIELDS[kind]))
                    else:
                        raise SortedRLError(f"{path}: line {n}: unknown record kind {kind!r}")
                except json.JSONDecodeError as e:
                    raise SortedRLError(f"{path}: line {n}: not valid JSON ({e.msg})") from None
                except KeyError as e:
                    raise SortedRLError(f"{path}: line {n}: missing field {e.args[0]!r}") from None
                except (TypeError, AttributeError):
                    raise SortedRLError(f"{path}: line {n}: not a timeline record") from None
        return tl


def _record(kind: str, row: tuple) -> dict:
    return {"kind": kind, **dict(zip(FIELDS[kind], row, strict=True))}


_dumps = json.JSONEncoder(separators=(",", ":")).encode


def record_line(kind: str, row: tuple) -> str:
    """One JSONL line, byte-identical to ``write_jsonl``'s; spans take a fast path."""
    if kind == "span":
        t0, t1, e, i, a, v, k, end = row
        return (f'{{"kind":"span","t":{float(t0)!r},"t_end":{float(t1)!r},"engine":{e},"sample":{i},'
                f'"attempt":{a},"version":{v},"tokens":{k},"end":"{end}"}}\n')
    return _dumps(_record(kind, row)) + "\n"
