"""The tagged JSON codec of a real run's checkpoints (:mod:`sortedrl.realrun.checkpoint`).

Plain data only: numbers, strings, lists, tuples, dicts with any plain keys, sets, frozensets,
deques, ranges, ``Counter``, ``OrderedDict``, a ``defaultdict`` whose factory is a built-in type
(:data:`FACTORIES`), ``random.Random`` (its state), bytearrays, typed arrays (``array.array``),
NumPy arrays, :class:`~sortedrl.policies.base.SampleState`, and the attributes of sortedrl's own
helper objects (restored into the run's, or, for :func:`helper_classes`, into one made new).
Decoding names no class and imports nothing: tags map to a fixed set of types.
"""

from __future__ import annotations

import random
from array import array
from collections import Counter, OrderedDict, defaultdict, deque
from enum import IntEnum

import numpy as np

from sortedrl.policies.base import SampleState

ENUMS: dict[str, type[IntEnum]] = {"SampleState": SampleState}
# a defaultdict's factory, by name: only these (a factory is code, never read from a checkpoint)
FACTORIES: dict[str, type] = {t.__name__: t for t in (int, float, str, list, dict, set, tuple, deque)}
# what decoding a crafted state.json may raise (an int past C's, in a Random's state or an array)
UNREADABLE = (OSError, KeyError, TypeError, ValueError, OverflowError, RecursionError)


class Attrs(dict):
    """The decoded attributes of one of our helper objects; ``helper``: its class's name when it
    is one of :func:`helper_classes`, which a policy may make in a hook (then rebuilt new and
    given them, where the rebuilt policy has none)."""

    def __init__(self, attrs: dict, helper: str | None = None) -> None:
        super().__init__(attrs)
        self.helper = helper


def helper_classes() -> dict[str, type]:
    """The helper classes a policy may hold that a checkpoint may name (by name only: a key in
    this table, never an import): the documented ones a policy makes in ``on_start``."""
    from sortedrl.policies.common import SampleQueue

    return {"SampleQueue": SampleQueue}


class NotPlainData(TypeError):
    """A value the codec does not store (code, open handles, unknown objects)."""


# -- a tagged JSON codec for plain data ---------------------------------------------------------

def encode(value: object, where: str = "state", attr: bool = False) -> object:
    """``value`` as JSON-ready data; containers other than str-keyed dicts and lists are tagged.
    ``attr``: ``value`` is an attribute that a restore sets itself (a policy's or a helper's),
    where a helper of :func:`_helpers` can be rebuilt; inside a container it could not be."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, IntEnum) and type(value).__name__ in ENUMS:
        return {"$enum": type(value).__name__, "value": int(value)}
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if type(value) in (tuple, set, frozenset, deque):
        items = _sorted(value) if isinstance(value, (set, frozenset)) else value
        tag = {tuple: "$tuple", set: "$set", frozenset: "$frozenset", deque: "$deque"}[type(value)]
        return {tag: [encode(v, f"{where}[{i}]") for i, v in enumerate(items)]}
    if isinstance(value, range):
        return {"$range": [value.start, value.stop, value.step]}
    if type(value) is random.Random:  # a policy's own generator (docs/policies.md): its state
        return {"$random": encode(value.getstate(), where)}
    if type(value) in (Counter, OrderedDict, defaultdict):
        return _tagged_dict(value, where)
    if isinstance(value, bytearray):
        return {"$bytearray": list(value)}
    if isinstance(value, array):
        return {"$array": value.tolist(), "typecode": value.typecode}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufU":
        return {"$ndarray": value.tolist(), "dtype": value.dtype.str}
    if type(value) in helper_classes().values() and not attr:
        raise NotPlainData(f"{where}: a {type(value).__name__} inside a list or dict is not restored: keep "
                           "it as an attribute of its own")
    if type(value).__module__.startswith("sortedrl.") and hasattr(value, "__dict__"):
        # one of our helpers (a length predictor, the runner's group rewards): its attributes,
        # restored into the helper that the rebuilt run made: a checkpoint never names a class
        helper = type(value).__name__
        return {"$attrs": {k: encode(v, f"{where}.{k}", attr=True) for k, v in vars(value).items()},
                **({"helper": helper} if helper_classes().get(helper) is type(value) else {})}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v, f"{where}.{k}") for k, v in value.items()}
        return {"$dict": [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    raise NotPlainData(f"{where}: a {type(value).__name__} is not plain data")


def _sorted(items: set | frozenset) -> list:
    """A set's items in one order every run (sorted; by type and repr where they do not compare:
    ``{1, 'a'}``)."""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=lambda v: (type(v).__name__, repr(v)))


def _tagged_dict(value: dict, where: str) -> dict:
    """A ``Counter``, ``OrderedDict`` or ``defaultdict`` (whose factory must be one of
    :data:`FACTORIES`), kept as what it is: read back as a plain dict, a defaultdict lost its
    default and a Counter its zero for a missing key."""
    items = [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]
    if type(value) is not defaultdict:
        return {f"${type(value).__name__.lower()}": items}
    factory = value.default_factory
    if factory is not None and FACTORIES.get(getattr(factory, "__name__", "")) is not factory:
        raise NotPlainData(f"{where}: a defaultdict of {getattr(factory, '__name__', type(factory).__name__)} "
                           f"is not plain data (its factory may be one of {', '.join(FACTORIES)}, or None)")
    return {"$defaultdict": items, "factory": None if factory is None else factory.__name__}


def decode(value: object) -> object:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if "$enum" in value:
        return ENUMS[value["$enum"]](value["value"])
    if "$tuple" in value:
        return tuple(decode(v) for v in value["$tuple"])
    if "$set" in value:
        return {decode(v) for v in value["$set"]}
    if "$deque" in value:
        return deque(decode(v) for v in value["$deque"])
    if "$frozenset" in value:
        return frozenset(decode(v) for v in value["$frozenset"])
    if "$range" in value:
        return range(*value["$range"])
    if "$random" in value:
        rng, state = random.Random(), decode(value["$random"])
        if not isinstance(state, tuple) or len(state) != 3 or not (state[2] is None or isinstance(state[2], float)):
            raise ValueError("a Random's state is (version, internal state, gauss_next)")
        rng.setstate(state)
        return rng
    if "$counter" in value:
        return Counter({decode(k): decode(v) for k, v in value["$counter"]})
    if "$ordereddict" in value:
        return OrderedDict((decode(k), decode(v)) for k, v in value["$ordereddict"])
    if "$defaultdict" in value:
        factory = value["factory"]
        return defaultdict(None if factory is None else FACTORIES[factory],
                           ((decode(k), decode(v)) for k, v in value["$defaultdict"]))
    if "$bytearray" in value:
        return bytearray(value["$bytearray"])
    if "$array" in value:
        return array(value["typecode"], value["$array"])
    if "$ndarray" in value:
        return np.array(value["$ndarray"], dtype=np.dtype(value["dtype"]))
    if "$dict" in value:
        return {decode(k): decode(v) for k, v in value["$dict"]}
    if "$attrs" in value:
        return Attrs(decode(value["$attrs"]), value.get("helper"))
    return {k: decode(v) for k, v in value.items()}
