"""Checkpoints of a real run that hold data, never code.

A run directory may come from someone else, and ``--resume`` must not run code that it carries,
so nothing here is pickled: the bookkeeping is JSON, written by a small tagged codec that knows
only plain data (numbers, strings, lists, tuples, dicts with any plain keys, sets, deques,
bytearrays, typed arrays (``array.array``), NumPy arrays and
:class:`~sortedrl.policies.base.SampleState`), and every tensor is a safetensors file. The
policy is rebuilt from its name and knobs, as at the start of the run, and then given back its
recorded state (its attributes other than ``params`` and ``ctx``); a user policy whose state is
not plain data gets one error naming the attribute, or may define ``state_dict()`` /
``load_state_dict(state)`` itself.

Layout of ``checkpoint/``: ``state.json`` (controller, backend, policy, log offsets, the update
the checkpoint closed), ``model.safetensors`` and ``optimizer.safetensors`` + the optimizer's
``param_groups`` in ``state.json``, and ``engine.safetensors`` (the weights last pushed to the
engine) when there was a push.
"""

from __future__ import annotations

import json
from array import array
from collections import deque
from enum import IntEnum
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.policies.base import SampleState, params_dict

STATE = "state.json"
ENUMS: dict[str, type[IntEnum]] = {"SampleState": SampleState}
SKIPPED = ("params", "ctx")  # rebuilt from the run's configuration


class Attrs(dict):
    """The decoded attributes of one of our helper objects."""


class NotPlainData(TypeError):
    """A value the codec does not store (code, open handles, unknown objects)."""


# -- a tagged JSON codec for plain data ---------------------------------------------------------

def encode(value: object, where: str = "state") -> object:
    """``value`` as JSON-ready data; containers other than str-keyed dicts and lists are tagged."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, IntEnum) and type(value).__name__ in ENUMS:
        return {"$enum": type(value).__name__, "value": int(value)}
    if isinstance(value, (int, float, np.integer, np.floating)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (tuple, set, deque)):
        items = sorted(value) if isinstance(value, set) else value
        tag = {tuple: "$tuple", set: "$set", deque: "$deque"}[type(value)]
        return {tag: [encode(v, f"{where}[{i}]") for i, v in enumerate(items)]}
    if isinstance(value, bytearray):
        return {"$bytearray": list(value)}
    if isinstance(value, array):
        return {"$array": value.tolist(), "typecode": value.typecode}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biufU":
        return {"$ndarray": value.tolist(), "dtype": value.dtype.str}
    if type(value).__module__.startswith("sortedrl.") and hasattr(value, "__dict__"):
        # one of our helpers (a length predictor, the runner's group rewards): its attributes,
        # restored into the helper that the rebuilt run made: a checkpoint never names a class
        return {"$attrs": encode(vars(value), where)}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v, f"{where}.{k}") for k, v in value.items()}
        return {"$dict": [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    raise NotPlainData(f"{where}: a {type(value).__name__} is not plain data")


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
    if "$bytearray" in value:
        return bytearray(value["$bytearray"])
    if "$array" in value:
        return array(value["typecode"], value["$array"])
    if "$ndarray" in value:
        return np.array(value["$ndarray"], dtype=np.dtype(value["dtype"]))
    if "$dict" in value:
        return {decode(k): decode(v) for k, v in value["$dict"]}
    if "$attrs" in value:
        return Attrs(decode(value["$attrs"]))
    return {k: decode(v) for k, v in value.items()}


# -- the policy ---------------------------------------------------------------------------------

def policy_state(policy) -> object:
    """The policy's own state: ``state_dict()`` if it defines one, else its plain attributes."""
    if hasattr(policy, "state_dict"):
        raw = policy.state_dict()
    else:
        raw = {k: v for k, v in vars(policy).items() if k not in SKIPPED}
    try:
        return {"params": params_dict(policy.params), "state": encode(raw, f"policy {policy.name}")}
    except NotPlainData as e:
        raise ConfigError(f"cannot checkpoint the policy: {e}; keep policy state in plain data or "
                          "define state_dict() and load_state_dict(state)") from None


def restore_policy(policy, saved: dict, where: Path) -> None:
    """Give a policy rebuilt from the run's configuration the state it had at the checkpoint."""
    if params_dict(policy.params) != saved["params"]:
        raise ConfigError(f"{where}: the checkpoint's policy knobs {saved['params']} differ from "
                          f"this run's {params_dict(policy.params)}")
    state = decode(saved["state"])
    if hasattr(policy, "load_state_dict"):
        policy.load_state_dict(state)
    else:
        assign(policy, state, where)


def assign(target: object, attrs: dict, where: Path | str) -> None:
    """Set ``attrs`` on ``target``; a helper object's attributes go into the one it holds."""
    for name, value in attrs.items():
        if isinstance(value, Attrs):
            helper = getattr(target, name, None)
            if helper is None or not hasattr(helper, "__dict__"):
                raise ConfigError(f"{where}: the policy has no helper object {name!r} to restore")
            assign(helper, value, where)
        else:
            setattr(target, name, value)


# -- files --------------------------------------------------------------------------------------

def write_state(directory: Path, state: dict) -> None:
    (directory / STATE).write_text(json.dumps(encode(state)))


def read_state(directory: Path) -> dict:
    try:
        return decode(json.loads((directory / STATE).read_text()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{directory / STATE}: not a readable checkpoint ({e})") from None


def save_tensors(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    # clones: tied weights share storage, which safetensors refuses
    save_file({k: v.detach().clone().contiguous() for k, v in tensors.items()}, str(path))


def load_tensors(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path))


def save_trainer(directory: Path, trainer) -> dict:
    """Model and optimizer tensors to safetensors; returns the optimizer's non-tensor part."""
    save_tensors(directory / "model.safetensors", trainer.model.state_dict())
    opt = trainer.opt.state_dict()
    flat = {f"{p}.{name}": t for p, slots in opt["state"].items() for name, t in slots.items()}
    save_tensors(directory / "optimizer.safetensors", flat)
    return {"param_groups": opt["param_groups"], "slots": {str(p): sorted(s) for p, s in opt["state"].items()}}


def load_trainer(directory: Path, trainer, optimizer: dict) -> None:
    trainer.model.load_state_dict(load_tensors(directory / "model.safetensors"))
    flat = load_tensors(directory / "optimizer.safetensors")
    state = {int(p): {name: flat[f"{p}.{name}"] for name in names}
             for p, names in optimizer["slots"].items()}
    trainer.opt.load_state_dict({"state": state, "param_groups": optimizer["param_groups"]})
