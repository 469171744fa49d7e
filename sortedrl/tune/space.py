"""Search spaces: ``--param NAME.key=lo:hi[:log]`` and ``--param NAME.key=v1,v2,...``.

Each dimension is typed by the policy's ``Params`` dataclass: integer knobs take integer ranges,
float knobs continuous ranges (``:log`` for a log scale), and any knob a list of values.
``--param cluster.KEY=...`` searches the cluster's shape as well (KEY one of
:data:`CLUSTER_KEYS`: ``gpus``, ``train_gpus``, ``tp``, ``max_num_seqs``, ``placement``); a
cluster dimension is added to every policy's space as ``cluster.KEY``, and the executor applies
it to the base ``--cluster`` before each trial (:func:`split_cluster`). A space
is *finite* when every dimension is a list or a short integer range; finite spaces are searched
exhaustively, the others by quasi-random sampling (``scipy.stats.qmc``) and local refinement.

A sampled float is kept to :data:`FLOAT_DIGITS` significant digits of its range's width (of the
value itself on a log range): ``window=1.407`` of ``0.5:3``, not ``1.4067939757369459``. The
trial runs that value, so tune.json, the tables and a ``--set`` copied from them hold one run
(rounding only the text made a copied ``oversubscribe`` another run); the search loses nothing a
thousandth of the range would find.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import typing
from dataclasses import dataclass

from sortedrl.errors import ConfigError, did_you_mean
from sortedrl.limits import MAX_NUM_SEQS
from sortedrl.policies.base import check_given, parse_params
from sortedrl.policies.registry import policy_class

MAX_INT_GRID = 16  # an integer range with at most this many values is enumerated
FLOAT_DIGITS = 4  # a sampled float's significant digits (module docstring)
CLUSTER = "cluster"
CLUSTER_KEYS = {"gpus": int, "train_gpus": int, "tp": int, "max_num_seqs": int, "placement": str}


@dataclass(frozen=True)
class Dim:
    key: str
    kind: str  # "choice", "int" or "float"
    values: tuple = ()  # choice: typed values
    lo: float = 0.0
    hi: float = 0.0
    log: bool = False

    @property
    def finite(self) -> bool:
        return self.kind == "choice" or (self.kind == "int" and self.hi - self.lo + 1 <= MAX_INT_GRID)

    def grid(self) -> list:
        if self.kind == "choice":
            return list(self.values)
        return list(range(int(self.lo), int(self.hi) + 1))

    def at(self, u: float):
        """The value at position ``u`` in [0, 1) along this dimension."""
        if self.kind == "choice":
            return self.values[min(len(self.values) - 1, int(u * len(self.values)))]
        if self.log:
            x = math.exp(math.log(self.lo) + u * (math.log(self.hi) - math.log(self.lo)))
        else:
            x = self.lo + u * (self.hi - self.lo)
        if self.kind == "int":
            return int(min(self.hi, max(self.lo, round(x))))
        if self.log:
            x = float(f"{x:.{FLOAT_DIGITS}g}")
        elif self.hi > self.lo:
            x = round(x, FLOAT_DIGITS - 1 - math.floor(math.log10(self.hi - self.lo)))
        return float(min(self.hi, max(self.lo, x)))

    def position(self, value) -> float:
        if self.kind == "choice":
            return (self.values.index(value) + 0.5) / len(self.values)
        if self.hi == self.lo:
            return 0.0
        if self.log:
            return (math.log(value) - math.log(self.lo)) / (math.log(self.hi) - math.log(self.lo))
        return (value - self.lo) / (self.hi - self.lo)


@dataclass(frozen=True)
class Space:
    policy: str
    dims: tuple[Dim, ...]

    @property
    def finite(self) -> bool:
        return all(d.finite for d in self.dims)

    @property
    def size(self) -> float:
        return math.prod(len(d.grid()) for d in self.dims) if self.finite else math.inf

    def grid(self) -> list[dict]:
        keys = [d.key for d in self.dims]
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(d.grid() for d in self.dims))]

    def at(self, point) -> dict:
        return {d.key: d.at(float(u)) for d, u in zip(self.dims, point, strict=True)}


def parse_spaces(policies: list[str], params: list[str]) -> list[Space]:
    """One space per ``--policy`` (in the order given), from the ``--param`` strings that name it:
    its ``cluster.*`` dimensions sorted by key, then its knobs sorted by key, whatever the order
    of the flags (so that the order changes neither the samples nor the grid)."""
    if not policies:
        raise ConfigError("tune needs at least one --policy")
    if len(set(policies)) != len(policies):
        raise ConfigError("tune: each --policy may be given once")
    for name in policies:
        label, eq, rest = name.partition("=")
        if eq and ":" not in label:  # (compare's LABEL=NAME: a tune runs each policy once, by name)
            raise ConfigError(f"--policy {name!r}: tune takes no LABEL= (each policy is tuned once, "
                              f"named as given); give --policy {rest}")
        policy_class(name)
    dims: dict[str, dict[str, Dim]] = {name: {} for name in policies}
    shape: dict[str, Dim] = {}
    for spec in params:
        if spec.partition(".")[0] == CLUSTER:
            dim = _parse_cluster(spec)
            if dim.key in shape:
                raise ConfigError(f"--param {spec!r}: {dim.key} is given twice")
            shape[dim.key] = dim
            continue
        name, dim = _parse_one(spec, policies)
        if dim.key in dims[name]:
            raise ConfigError(f"--param {spec!r}: {name}.{dim.key} is given twice")
        dims[name][dim.key] = dim
    for name in policies:  # (before any trial: each would be refused, as a clash of its knobs)
        check_given(policy_class(name).Params, dims[name], name, f"--param {name}.")
    # in the order of the keys, not of the flags (the i-th Sobol coordinate samples the i-th
    # dimension, and a grid runs in this order): the cluster's shape first, then the knobs
    first = tuple(shape[k] for k in sorted(shape))
    return [Space(name, first + tuple(dims[name][k] for k in sorted(dims[name]))) for name in policies]


def _parse_cluster(spec: str) -> Dim:
    """``cluster.KEY=v1,v2`` or ``cluster.KEY=lo:hi`` (integers; placement takes a list)."""
    from sortedrl.sim.cluster import PLACEMENTS

    where = f"--param {spec!r}"
    target, eq, raw = spec.partition("=")
    key = target.partition(".")[2]
    if key not in CLUSTER_KEYS or not eq or not raw:
        raise ConfigError(f"{where}: expected cluster.KEY=v1,v2,... or cluster.KEY=lo:hi with KEY "
                          f"one of {', '.join(CLUSTER_KEYS)}")
    full, low = f"{CLUSTER}.{key}", 0 if key == "train_gpus" else 1
    if CLUSTER_KEYS[key] is str:
        values = tuple(v.strip() for v in raw.split(","))
        bad = [v for v in values if v not in PLACEMENTS]
        if bad:
            raise ConfigError(f"{where}: unknown placement {bad[0]!r} (known: {', '.join(PLACEMENTS)})")
    else:
        try:
            if ":" in raw:
                lo, hi = (int(x) for x in raw.split(":"))
                if lo > hi:
                    raise ConfigError(f"{where}: lo ({lo}) is above hi ({hi})")
                if hi - lo >= MAX_NUM_SEQS:  # (the widest a cluster field can range)
                    raise ConfigError(f"{where}: {hi - lo + 1:,} values; a cluster range holds at "
                                      f"most {MAX_NUM_SEQS:,} (list the values to try instead)")
                values = tuple(range(lo, hi + 1))
            else:
                values = tuple(int(v) for v in raw.split(","))
        except ValueError:
            raise ConfigError(f"{where}: {key} takes integers (v1,v2,... or lo:hi)") from None
        if min(values) < low:
            raise ConfigError(f"{where}: {key} must be >= {low}")
    if len(set(values)) != len(values):
        raise ConfigError(f"{where}: a value is listed twice")
    return Dim(full, "choice", values=values)


def split_cluster(sets: list[str]) -> tuple[dict, list[str]]:
    """Trial ``key=value`` strings split into cluster changes (typed) and policy knobs."""
    changes, knobs = {}, []
    for item in sets:
        key, _, value = item.partition("=")
        if key.startswith(CLUSTER + "."):
            field = key[len(CLUSTER) + 1:]
            changes[field] = CLUSTER_KEYS[field](value)
        else:
            knobs.append(item)
    return changes, knobs


def _value(cls: type, key: str, value: object, name: str, where: str) -> object:
    """The policy's params with ``key=value``, its error naming the whole ``--param`` spec (it
    named `--param mode=bogus`, without the policy or the list the value came from)."""
    try:
        return parse_params(cls.Params, [f"{key}={value}"], name, "--param")
    except ConfigError as e:
        raise ConfigError(f"{where}: {str(e).removeprefix('--param').lstrip(': ')}") from None


def _parse_one(spec: str, policies: list[str]) -> tuple[str, Dim]:
    where = f"--param {spec!r}"
    target, eq, raw = spec.partition("=")
    named = [p for p in policies if target.startswith(p + ".")]  # (a module:Class may hold dots)
    name, dot, key = (max(named, key=len), ".", target[len(max(named, key=len)) + 1:]) if named \
        else target.partition(".")
    if not eq or not dot or not key or not raw:
        raise ConfigError(f"{where}: expected NAME.key=lo:hi[:log] or NAME.key=v1,v2,...")
    if name not in policies:
        yours = [p for p in policies if p.rpartition(":")[2] == name]  # (compare's label for it)
        hint = f"; name it as given to --policy: {yours[0]}.{key}" if yours else ""
        raise ConfigError(f"{where}: policy {name!r} is not among the --policy list ({', '.join(policies)}){hint}")
    cls = policy_class(name)
    fields = [f.name for f in dataclasses.fields(cls.Params)]  # (in their order: a set's varied by run)
    if key not in fields:
        guess = did_you_mean(key, fields, f"{name}.")
        raise ConfigError(f"{where}: unknown parameter for policy {name}{guess} (known: {', '.join(fields) or 'none'})")
    hint = typing.get_type_hints(cls.Params)[key]
    if ":" in raw:
        parts = raw.split(":")
        log = len(parts) == 3 and parts[2] == "log"
        if len(parts) not in (2, 3) or (len(parts) == 3 and not log):
            raise ConfigError(f"{where}: a range is lo:hi or lo:hi:log")
        if hint not in (int, float):
            raise ConfigError(f"{where}: {key} is not numeric; give a list of values instead")
        try:
            lo, hi = (int(parts[0]), int(parts[1])) if hint is int else (float(parts[0]), float(parts[1]))
        except ValueError:
            raise ConfigError(f"{where}: lo and hi must be {'integers' if hint is int else 'numbers'}") from None
        if lo > hi:
            raise ConfigError(f"{where}: lo ({lo}) is above hi ({hi})")
        if log and lo <= 0:
            raise ConfigError(f"{where}: a log range needs lo > 0")
        for v in (lo, hi):  # the policy's own checks (e.g. minibatches >= 1)
            _value(cls, key, v, name, where)
        return name, Dim(key, "int" if hint is int else "float", lo=lo, hi=hi, log=log)
    values = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            raise ConfigError(f"{where}: an empty value in the list")
        values.append(getattr(_value(cls, key, item, name, where), key))
    if len(set(values)) != len(values):
        raise ConfigError(f"{where}: a value is listed twice")
    return name, Dim(key, "choice", values=tuple(values))


def as_sets(params: dict) -> list[str]:
    """Trial params back to ``key=value`` strings for :func:`make_policy`."""
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in params.items()]
