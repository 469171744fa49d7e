"""The tuner: grid when the space is small, else quasi-random search then local refinement.

Budget accounting is per policy: each ``--policy`` gets an equal share of ``--budget`` trials
(small finite spaces take only their size and leave the rest to the others; a remainder goes one
trial each to the first policies by name). The policy's
defaults are a trial (unless a knob of a user's policy has no default), so the best feasible
trial is never worse than leaving its knobs alone, when that meets ``--max-staleness``. A policy
whose space is finite and fits its share (with the defaults) is searched exhaustively: its grid,
after its default knobs on each shape of its ``cluster.*`` dimensions (``{}`` without them)
unless a grid point has the default of every knob. Otherwise its first trial is its defaults on
the ``--cluster`` as given (when its share is more than one trial), 60% of the rest of its share
samples a scrambled Sobol sequence (``scipy.stats.qmc``, seeded) and the rest refines: each round
tries the neighbours of the policy's best feasible trial (one step up and down along each
axis, every other value of a list) and halves the step when a round finds nothing better.

The order of the ``--policy`` and ``--param`` flags changes nothing: policies are searched in
the order of their names (the k-th by name samples with seed ``--seed`` + k, and its trials are
numbered in that order: a policy alone is the 0th) and each policy's dimensions are in the order
of their keys (:func:`~sortedrl.tune.space.parse_spaces`), so the same flags in any order write
the same ``tune.json``, but for the order of ``best.per_policy`` (the ``--policy`` order).

``--max-staleness`` is a hard constraint on ``staleness_max`` (no trained token more than that
many versions behind); trials that break it are kept in ``tune.json`` as infeasible, never best
and never on the Pareto front. The front is over the feasible trials: ``learnable_tokens_per_s``
up (tokens a GRPO update can learn from; ``tokens_per_s`` for summaries without it),
``staleness_mean`` down.

A combination of knobs the policy refuses (they clash with each other or with the trace) is not
a trial: it is listed under ``skipped`` with the reason (naming the ``--param`` values), never
simulated, and the search carries on; it counts against the budget, as a trial would. (A policy
that refuses every combination is refused before the search: ``executors.check_spaces``.)

Cluster planning: when the space has ``cluster.*`` dimensions, a shape that cannot run (trainer
GPUs leaving no rollout engine, GPUs that do not split into tp-wide engines, a KV budget too small
for the longest sequence) is not simulated and is listed under ``skipped``, and the report adds
``cluster_pareto``: the trials no other feasible trial beats on wall-clock (``makespan_s``),
``gpu_hours`` and ``staleness_mean`` together (all down), and its knee: among the front's members
that are also undominated on wall-clock and GPU-hours alone, the interior one farthest below the
straight line between the fastest and the cheapest, both axes scaled to [0, 1] (none when no
member lies below it: such a front has no knee).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

from scipy.stats import qmc

from sortedrl.compare import placement_for
from sortedrl.errors import ConfigError
from sortedrl.metrics import rank_rate
from sortedrl.policies.registry import policy_class
from sortedrl.tune.executors import SKIPPED, Executor, shaped
from sortedrl.tune.space import CLUSTER, Space, as_sets, split_cluster

SPLIT = f"{CLUSTER}.train_gpus"

OBJECTIVES = {"learnable_tokens_per_s": 1.0, "tokens_per_s": 1.0, "makespan_s": -1.0,
              "gpu_hours": -1.0}  # +1 max, -1 min


@dataclass(frozen=True)
class TuneConfig:
    objective: str = "learnable_tokens_per_s"
    max_staleness: float | None = None
    budget: int = 64
    seed: int = 0


def trial_counts(spaces: list[Space]) -> list[float]:
    """The trials each space takes searched whole: its grid and its defaults trials (inf for a
    space with a continuous range)."""
    return [s.size + len(defaults_trials(s)) for s in spaces]


def defaults_trials(space: Space) -> list[dict]:
    """The trials of the policy's defaults that its grid lacks: its default knobs on each shape
    of the ``cluster.*`` dimensions (``{}`` without them). No trial when a grid point has the default
    of every knob, or when a knob has no default (a user's policy may have one to give)."""
    fields = dataclasses.fields(policy_class(space.policy).Params)
    if not _has_defaults(space.policy):
        return []
    shape = tuple(d for d in space.dims if d.key.startswith(CLUSTER + "."))
    knobs = [d for d in space.dims if d not in shape]
    defaults = {f.name: f.default for f in fields}
    if all(d.finite and defaults[d.key] in d.grid() for d in knobs):
        return []
    return Space(space.policy, shape).grid()


def _has_defaults(policy: str) -> bool:
    return all(f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
               for f in dataclasses.fields(policy_class(policy).Params))


class Tuner:
    def __init__(self, spaces: list[Space], cfg: TuneConfig, executor: Executor,
                 progress: Callable[[int], None] = lambda n: None) -> None:
        self.given = spaces  # (the report lists each policy's best in the --policy order)
        self.spaces = sorted(spaces, key=lambda s: s.policy)  # searched by name: see the docstring
        self.cfg, self.ex, self.progress = cfg, executor, progress
        self.defaults = [defaults_trials(s) for s in self.spaces]
        self.sizes = [s.size + len(d) for s, d in zip(self.spaces, self.defaults, strict=True)]
        self.trials: list[dict] = []
        self.skipped: list[dict] = []
        self.seen: set[tuple] = set()

    # -- bookkeeping -------------------------------------------------------------------------

    def _key(self, policy: str, params: dict) -> tuple:
        return (policy, tuple(sorted(params.items())))

    def _fresh(self, policy: str, candidates: list[dict]) -> list[dict]:
        out = []
        for p in candidates:
            if SPLIT in p and self._colocated(policy, p):  # the split is not used: one trial, not
                p = {k: v for k, v in p.items() if k != SPLIT}  # one a value, shown as a shape
            elif p.get(SPLIT) == 0:  # 0: the default quarter, the same trial as its value
                gpus = p.get(f"{CLUSTER}.gpus", self.ex.cluster.gpus)
                p = {**p, SPLIT: max(1, gpus // 4)}
            k = self._key(policy, p)
            if k not in self.seen:
                self.seen.add(k)
                out.append(p)
        return out

    def _colocated(self, policy: str, params: dict) -> bool:
        """Whether ``policy`` runs colocated on the trial's cluster, where every GPU trains and
        ``cluster.train_gpus`` changes nothing."""
        placement = params.get(f"{CLUSTER}.placement", self.ex.cluster.placement)
        return placement_for(policy_class(policy).placements, placement) == "colocated"

    def _runnable(self, batch: list[tuple[str, dict]]) -> list[tuple[str, dict]]:
        """The trials whose cluster shape can run the trace; the others go to ``skipped``."""
        out = []
        for name, params in batch:
            changes, _ = split_cluster(as_sets(params))
            if changes:
                try:
                    shaped(self.ex.cluster, changes, self.ex.trace, policy_class(name).placements, name)
                except ConfigError as e:
                    self.skipped.append({"policy": name, "params": params, "reason": str(e)})
                    self.progress(1)
                    continue
            out.append((name, params))
        return out

    def _evaluate(self, batch: list[tuple[str, dict]]) -> None:
        batch = self._runnable(batch)
        summaries = self.ex.map([(name, as_sets(p)) for name, p in batch], self.progress)
        for (name, params), summary in zip(batch, summaries, strict=True):
            if SKIPPED in summary:  # knobs the policy refuses: not a trial
                self.skipped.append({"policy": name, "params": params, "reason": summary[SKIPPED]})
                continue
            feasible = (self.cfg.max_staleness is None
                        or summary["staleness_max"] <= self.cfg.max_staleness)
            self.trials.append({"id": len(self.trials), "policy": name, "params": params,
                                "feasible": feasible, "summary": summary})

    def _score(self, t: dict) -> float:
        return OBJECTIVES[self.cfg.objective] * t["summary"][self.cfg.objective]

    def best(self, policy: str | None = None, explicit: bool = False) -> dict | None:
        """The best feasible trial; ``explicit`` skips the defaults trial (no params to refine)."""
        pool = [t for t in self.trials if t["feasible"] and (policy is None or t["policy"] == policy)
                and (t["params"] or not explicit)]
        return max(pool, key=lambda t: (self._score(t), -t["id"])) if pool else None

    # -- search --------------------------------------------------------------------------------

    def run(self) -> dict:
        shares = self._shares()
        exhaustive = sum(self.sizes) <= self.cfg.budget
        first: list[tuple[str, dict]] = []
        refine: dict[str, tuple[Space, int]] = {}
        for idx, (space, share, size) in enumerate(zip(self.spaces, shares, self.sizes, strict=True)):
            # the policy's defaults are a trial, so the best is never worse than them
            if exhaustive or size <= share:
                grid = self.defaults[idx] + space.grid()
                first += [(space.policy, p) for p in self._fresh(space.policy, grid)]
                continue
            if share > 1 and _has_defaults(space.policy):
                first += [(space.policy, p) for p in self._fresh(space.policy, [{}])]
                share -= 1
            n0 = max(1, math.ceil(0.6 * share))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # Sobol balance warnings for n not a power of 2
                points = qmc.Sobol(len(space.dims), scramble=True, seed=self.cfg.seed + idx).random(n0)
            picked = self._fresh(space.policy, [space.at(u) for u in points])
            first += [(space.policy, p) for p in picked]
            refine[space.policy] = (space, share - len(picked))
        self._evaluate(first)
        self._refine(refine)
        return self.report("grid" if exhaustive else "qmc+refine")

    def _refine(self, todo: dict[str, tuple[Space, int]]) -> None:
        step = {name: 0.125 for name in todo}
        left = {name: n for name, (_, n) in todo.items()}
        while True:
            batch: list[tuple[str, dict]] = []
            before = {name: self.best(name, explicit=True) for name in todo}
            for name, (space, _) in todo.items():
                centre = before[name] or self._any_best(name)
                if centre is None:
                    left[name] = 0
                if left[name] <= 0 or step[name] < 1 / 64:
                    continue
                cands = self._fresh(name, _neighbours(space, centre["params"], step[name])[: left[name]])
                left[name] -= len(cands)
                batch += [(name, p) for p in cands]
                if not cands:
                    step[name] /= 2
            if not batch:
                if all(left[n] <= 0 or step[n] < 1 / 64 for n in todo):
                    return
                continue
            self._evaluate(batch)
            for name in todo:
                after, prev = self.best(name, explicit=True), before[name]
                if (after and after["id"]) == (prev and prev["id"]):
                    step[name] /= 2  # no better neighbour: look closer

    def _shares(self) -> list[int]:
        """Budget per policy: small finite spaces take their size, the rest split what is left."""
        shares = [0] * len(self.spaces)
        left, open_ = self.cfg.budget, list(range(len(self.spaces)))
        changed = True
        while changed and open_:
            changed = False
            fair = _split(left, len(open_))
            for k, idx in enumerate(list(open_)):
                size = self.sizes[idx]
                if size <= fair[k]:
                    shares[idx] = int(size)
                    left -= int(size)
                    open_.remove(idx)
                    changed = True
                    break
        for idx, share in zip(open_, _split(left, len(open_)) if open_ else [], strict=True):
            shares[idx] = share
        return shares

    def _any_best(self, policy: str) -> dict | None:
        pool = [t for t in self.trials if t["policy"] == policy and t["params"]]
        return max(pool, key=lambda t: (self._score(t), -t["id"])) if pool else None

    def report(self, search: str) -> dict:
        overall = self.best()
        return {
            "objective": self.cfg.objective,
            "max_staleness": self.cfg.max_staleness,
            "budget": self.cfg.budget,
            "seed": self.cfg.seed,
            "search": search,
            "trials": self.trials,
            "best": {"overall": overall["id"] if overall else None,
                     "per_policy": {s.policy: (b["id"] if (b := self.best(s.policy)) else None)
                                    for s in self.given}},
            "pareto": pareto([t for t in self.trials if t["feasible"]]),
            **self._plan(),
        }

    def _plan(self) -> dict:
        if not any(d.key.startswith(CLUSTER + ".") for s in self.spaces for d in s.dims):
            return {"skipped": self.skipped} if self.skipped else {}
        front = cluster_front(self.trials)
        return {"skipped": self.skipped,
                "cluster_pareto": {"front": front, "knee": knee(self.trials, front)}}


def pareto(trials: list[dict]) -> list[int]:
    """Ids of the trials no other trial beats on both learnable tokens/s (up) and staleness (down).

    Of trials with exactly the same two numbers only the first is listed.
    """
    pts = [(rank_rate(t["summary"]), t["summary"]["staleness_mean"], t["id"]) for t in trials]
    front, taken = [], set()
    for tps, st, i in pts:
        dominated = any((o_tps >= tps and o_st <= st) and (o_tps > tps or o_st < st)
                        for o_tps, o_st, _ in pts)
        if not dominated and (tps, st) not in taken:
            taken.add((tps, st))
            front.append((st, -tps, i))
    return [i for _, _, i in sorted(front)]


def cluster_front(trials: list[dict]) -> list[int]:
    """Ids of the feasible trials no other feasible trial beats on makespan_s, gpu_hours and
    staleness_mean together (all down), fastest first; of equal points only the first."""
    keys = ("makespan_s", "gpu_hours", "staleness_mean")
    pts = [(tuple(t["summary"][k] for k in keys), t["id"]) for t in trials if t["feasible"]]
    return [i for _, i in sorted(_undominated(pts))]


def knee(trials: list[dict], front: list[int]) -> int | None:
    """The front's knee on wall-clock against GPU-hours (see the module docstring); None when no
    member lies below the line from the fastest to the cheapest (a straight or concave front has
    no knee: every step along it trades wall-clock for GPU-hours at the same rate or worse)."""
    pts = [((trials[i]["summary"]["makespan_s"], trials[i]["summary"]["gpu_hours"]), i)
           for i in front]
    flat = sorted(_undominated(pts))
    if len(flat) < 3:
        return None
    (x0, y0), (x1, y1) = flat[0][0], flat[-1][0]  # fastest (dearest) .. slowest (cheapest)
    span_x, span_y = (x1 - x0) or 1.0, (y0 - y1) or 1.0

    def below(p: tuple[float, float]) -> float:  # distance below the line, in scaled units
        u, v = (p[0] - x0) / span_x, (p[1] - y1) / span_y
        return 1.0 - u - v

    depth, _, best = max((below(p), -i, i) for p, i in flat[1:-1])
    return best if depth > 1e-9 else None


def _undominated(pts: list[tuple[tuple, int]]) -> list[tuple[tuple, int]]:
    out, taken = [], set()
    for p, i in pts:
        dominated = any(all(a <= b for a, b in zip(q, p, strict=True)) and q != p for q, _ in pts)
        if not dominated and p not in taken:
            taken.add(p)
            out.append((p, i))
    return out


def _split(budget: int, parts: int) -> list[int]:
    """``budget`` in ``parts`` shares as equal as can be, the remainder to the first parts (the
    first policies by name: :class:`Tuner` holds them in that order)."""
    base, extra = divmod(budget, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def _neighbours(space: Space, params: dict, step: float) -> list[dict]:
    out = []
    for d in space.dims:
        if d.key not in params:  # dropped from a trial where it is unused (train_gpus, colocated)
            continue
        here = params[d.key]
        if d.kind == "choice":
            moves = [v for v in d.values if v != here]
        else:
            u = d.position(here)
            moves = [d.at(min(0.999999, max(0.0, u + s))) for s in (-step, step)]
        for v in moves:
            if v != here:
                out.append({**params, d.key: v})
    return out
