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
- ``prefill``: an engine-wide prefill of newly admitted samples (``recomputed`` counts tokens that
  had been generated before and are recomputed);
- ``admit``, ``abort``, ``discard``: the controller's decisions;
- ``train``: one update from ``version`` to ``version + 1``; ``sync``: one weight push.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from sortedrl.errors import SortedRLError

KINDS = ("meta", "admit", "prefill", "span", "abort", "discard", "train", "sync")
_ORDER = {k: i for i, k in enumerate(KINDS)}


class Timeline:
    """In-memory event log; see the module docstring for the record kinds."""

    def __init__(self, meta: dict | None = None) -> None:
        self.meta: dict = dict(meta or {})
        self.spans: list[tuple] = []  # (t0, t1, engine, sample, attempt, version, tokens, end)
        self.prefills: list[tuple] = []  # (t0, t1, engine, samples, tokens, recomputed)
        self.admits: list[tuple] = []  # (t, engine, samples)
        self.aborts: list[tuple] = []  # (t, samples, keep_tokens)
        self.discards: list[tuple] = []  # (t, samples)
        self.trains: list[tuple] = []  # (t0, t1, version, samples, tokens)
        self.syncs: list[tuple] = []  # (t0, t1, version)

    # -- recording ---------------------------------------------------------------------------

    def admit(self, t: float, engine: int, samples: list[int]) -> None:
        self.admits.append((t, engine, list(samples)))

    def abort(self, t: float, samples: list[int], keep_tokens: bool) -> None:
        self.aborts.append((t, list(samples), keep_tokens))

    def discard(self, t: float, samples: list[int]) -> None:
        self.discards.append((t, list(samples)))

    def train(self, t0: float, t1: float, version: int, samples: list[int], tokens: int) -> None:
        self.trains.append((t0, t1, version, list(samples), tokens))

    def sync(self, t0: float, t1: float, version: int) -> None:
        self.syncs.append((t0, t1, version))

    # -- JSONL ---------------------------------------------------------------------------------

    def records(self) -> list[dict]:
        """All records as JSON-ready dicts, ordered by start time (ties: kind, then insertion)."""
        rows: list[tuple] = []
        for j, (t0, t1, e, i, a, v, k, end) in enumerate(self.spans):
            rows.append((t0, _ORDER["span"], j, {"kind": "span", "t": t0, "t_end": t1, "engine": e,
                         "sample": i, "attempt": a, "version": v, "tokens": k, "end": end}))
        for j, (t0, t1, e, ss, k, r) in enumerate(self.prefills):
            rows.append((t0, _ORDER["prefill"], j, {"kind": "prefill", "t": t0, "t_end": t1, "engine": e,
                         "samples": ss, "tokens": k, "recomputed": r}))
        for j, (t, e, ss) in enumerate(self.admits):
            rows.append((t, _ORDER["admit"], j, {"kind": "admit", "t": t, "engine": e, "samples": ss}))
        for j, (t, ss, keep) in enumerate(self.aborts):
            rows.append((t, _ORDER["abort"], j, {"kind": "abort", "t": t, "samples": ss, "keep_tokens": keep}))
        for j, (t, ss) in enumerate(self.discards):
            rows.append((t, _ORDER["discard"], j, {"kind": "discard", "t": t, "samples": ss}))
        for j, (t0, t1, v, ss, k) in enumerate(self.trains):
            rows.append((t0, _ORDER["train"], j, {"kind": "train", "t": t0, "t_end": t1, "version": v,
                         "samples": ss, "tokens": k}))
        for j, (t0, t1, v) in enumerate(self.syncs):
            rows.append((t0, _ORDER["sync"], j, {"kind": "sync", "t": t0, "t_end": t1, "version": v}))
        rows.sort(key=lambda r: r[:3])
        return [{"kind": "meta", **self.meta}] + [r[3] for r in rows]

    def write_jsonl(self, path: str | Path) -> None:
        """Write atomically: a failure leaves any previous file untouched."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                dumps = json.JSONEncoder(separators=(",", ":")).encode
                for rec in self.records():
                    f.write(dumps(rec))
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
                    elif kind == "span":
                        tl.spans.append((r["t"], r["t_end"], r["engine"], r["sample"], r["attempt"],
                                         r["version"], r["tokens"], r["end"]))
                    elif kind == "prefill":
                        tl.prefills.append((r["t"], r["t_end"], r["engine"], r["samples"], r["tokens"],
                                            r["recomputed"]))
                    elif kind == "admit":
                        tl.admits.append((r["t"], r["engine"], r["samples"]))
                    elif kind == "abort":
                        tl.aborts.append((r["t"], r["samples"], r["keep_tokens"]))
                    elif kind == "discard":
                        tl.discards.append((r["t"], r["samples"]))
                    elif kind == "train":
                        tl.trains.append((r["t"], r["t_end"], r["version"], r["samples"], r["tokens"]))
                    elif kind == "sync":
                        tl.syncs.append((r["t"], r["t_end"], r["version"]))
                    else:
                        raise SortedRLError(f"{path}: line {n}: unknown record kind {kind!r}")
                except json.JSONDecodeError as e:
                    raise SortedRLError(f"{path}: line {n}: not valid JSON ({e.msg})") from None
                except KeyError as e:
                    raise SortedRLError(f"{path}: line {n}: missing field {e.args[0]!r}") from None
        return tl
