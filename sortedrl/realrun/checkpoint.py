"""Checkpoints of a real run that hold data, never code.

A run directory may come from someone else, and ``--resume`` must not run code that it carries,
so nothing here is pickled: the bookkeeping is JSON, written by a small tagged codec that knows
only plain data (:mod:`sortedrl.realrun.checkpoint_codec`), and every tensor is a safetensors
file. The policy is rebuilt from its name and knobs, as at the start of the run, and then given
back its recorded state (its attributes other than ``params`` and ``ctx``; a ``SampleQueue`` it made in a
hook is rebuilt for it); a user policy whose state is not plain data gets one error naming the
attribute, or may define ``state_dict()`` / ``load_state_dict(state)`` itself.

Layout of ``checkpoint/``: ``state.json`` (controller, backend, policy, log offsets, the update
the checkpoint closed), ``model.safetensors`` and ``optimizer.safetensors`` + the optimizer's
``param_groups`` in ``state.json``, and ``engine.safetensors`` (the weights last pushed to the
engine) when there was a push.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.jsonio import finite
from sortedrl.limits import short_repr
from sortedrl.outputs import umask
from sortedrl.policies.base import params_dict
from sortedrl.realrun.checkpoint_codec import (  # (Attrs, encode and decode: the tests' too)
    UNREADABLE,
    Attrs,
    NotPlainData,
    decode,
    encode,
    helper_classes,
)

STATE = "state.json"
SKIPPED = ("params", "ctx")  # rebuilt from the run's configuration
SHOWN = 200  # characters of a value an error line shows (a path whole, not a megabyte of it)


# -- the policy ---------------------------------------------------------------------------------

def policy_state(policy) -> object:
    """The policy's own state: ``state_dict()`` if it defines one, else its plain attributes."""
    try:
        if hasattr(policy, "state_dict"):
            state = encode(policy.state_dict(), f"policy {policy.name}'s state_dict()")
        else:  # each attribute named as the policy's (not "policy p.log", a file's name)
            state = {k: encode(v, f"policy {policy.name}'s attribute {k!r}", attr=True)
                     for k, v in vars(policy).items() if k not in SKIPPED}  # (as encode writes {name: value})
        return {"params": params_dict(policy.params), "state": state}
    except NotPlainData as e:
        raise ConfigError(f"cannot checkpoint the policy: {e}; keep policy state in plain data (docs/policies.md, "
                          "\"State a real run keeps\") or define state_dict() and load_state_dict(state)") from None


def restore_policy(policy, saved: dict, where: Path) -> None:
    """Give a policy rebuilt from the run's configuration the state it had at the checkpoint."""
    if params_dict(policy.params) != saved["params"]:
        raise ConfigError(f"{where}: the checkpoint's policy knobs {saved['params']} differ from "
                          f"this run's {params_dict(policy.params)}")
    try:  # (the policy's state is encoded within the state: its own tags are read here)
        state = decode(saved["state"])
    except UNREADABLE as e:
        raise ConfigError(f"{where}: field 'policy.state': not a readable policy state ({e})") from None
    if hasattr(policy, "load_state_dict"):
        policy.load_state_dict(state)
    else:
        assign(policy, state, where)


def assign(target: object, attrs: dict, where: Path | str, same_shape: bool = False) -> None:
    """Set ``attrs`` on ``target``; a helper object's attributes go into the one it holds.

    A name that is not a plain attribute (a dunder, or a method or property of the class) is
    refused: a checkpoint holds data, and data must not replace code. ``same_shape``: ``target``
    was built by this run with every attribute the checkpoint restores (the controller's and
    the backend's state), so each value must be one the run already holds: same type, and the
    same length where the run's is a per-sample or per-engine sequence (non-empty). Every field
    is checked before any is set: a refused checkpoint leaves ``target`` as it was."""
    _check_all(target, attrs, where, same_shape)
    _set_all(target, attrs)


def _check_all(target: object, attrs: dict, where: Path | str, same_shape: bool) -> None:
    for name, value in attrs.items():
        _check_name(target, name, where)
        if isinstance(value, Attrs):
            helper = getattr(target, name, None)
            if helper is None and isinstance(value.helper, str) and value.helper in helper_classes():
                helper = helper_classes()[value.helper]()  # made in a hook: rebuilt as new, then given its state
            if helper is None or not hasattr(helper, "__dict__"):
                raise ConfigError(f"{where}: the {type(target).__name__} has no helper object "
                                  f"{name!r} to restore")
            _check_all(helper, value, where, same_shape)
        elif same_shape:
            _check_like(getattr(target, name, _MISSING), value, name, where)


def _set_all(target: object, attrs: dict) -> None:
    for name, value in attrs.items():
        if isinstance(value, Attrs):
            if getattr(target, name, None) is None:  # (checked: one of the helpers)
                setattr(target, name, helper_classes()[value.helper]())
            _set_all(getattr(target, name), value)
        else:
            setattr(target, name, value)


_MISSING = object()
_SEQUENCES = (list, array, bytearray, np.ndarray)


def _check_name(target: object, name: object, where: Path | str) -> None:
    found = getattr(type(target), name, None) if isinstance(name, str) else None
    if (not isinstance(name, str) or not name.isidentifier() or name.startswith("__")
            or callable(found) or isinstance(found, property)):
        raise ConfigError(f"{where}: {name!r} is not a data attribute of the "
                          f"{type(target).__name__} to restore")


def _check_like(current: object, value: object, name: str, where: Path | str) -> None:
    """``value`` may replace ``current``: see :func:`assign`'s ``same_shape``."""
    if current is _MISSING:
        raise ConfigError(f"{where}: field {name!r}: not part of this run's state")
    if current is None or value is None:
        return
    numbers = (int, float)
    same = (type(value) is type(current) or (isinstance(value, numbers)
            and isinstance(current, numbers) and not isinstance(value, bool)
            and not isinstance(current, bool)))
    if same and isinstance(current, array):
        same = value.typecode == current.typecode
    if same and isinstance(current, np.ndarray):
        same = value.dtype == current.dtype
    if not same:
        raise ConfigError(f"{where}: field {name!r}: expected {_kind(current)}, got {_kind(value)}")
    if isinstance(current, _SEQUENCES) and len(current) and len(value) != len(current):
        raise ConfigError(f"{where}: field {name!r}: expected {len(current)} entries, "
                          f"got {len(value)}")


def _kind(value: object) -> str:
    if isinstance(value, array):
        return f"an array of typecode {value.typecode!r}"
    if isinstance(value, np.ndarray):
        return f"an ndarray of {value.dtype}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


# -- the checkpoint's own fields ----------------------------------------------------------------

def _number(v) -> bool:
    return finite(v) and v >= 0  # (an int past a float is not: math.isfinite would raise)


def _count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _ids(v) -> bool:
    return isinstance(v, list) and all(map(_count, v))


# field -> (what it must be, in words; the check)
_FIELDS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "policy": ("an object with 'params' and 'state'",
               lambda v: isinstance(v, dict) and isinstance(v.get("params"), dict)
               and "state" in v),
    "optimizer": ("an object with 'param_groups' and 'slots'",
                  lambda v: isinstance(v, dict) and isinstance(v.get("param_groups"), list)
                  and isinstance(v.get("slots"), dict)
                  and all(isinstance(k, str) and k.isdigit() and isinstance(s, list)
                          and all(isinstance(x, str) for x in s) for k, s in v["slots"].items())),
    "public": ("an object", lambda v: isinstance(v, dict)),
    "backend": ("an object with 'reward' an object",
                lambda v: isinstance(v, dict) and isinstance(v.get("reward", {}), dict)),
    "settled": ("an integer >= 0", _count),
    "rollout_on": ("true or false", lambda v: isinstance(v, bool)),
    "engine_version": ("an integer >= 0", _count),
    "admitted": ("a list of sample indices", _ids),
    "clock": ("a number >= 0", _number),
    "offsets": ("an object", lambda v: isinstance(v, dict)),
    "train": ("[t0, version, samples, tokens, t1]",
              lambda v: isinstance(v, (list, tuple)) and len(v) == 5 and _number(v[0])
              and _count(v[1]) and _ids(v[2]) and _count(v[3]) and _number(v[4])),
}


def check_state(state: object, where: Path, logs: dict[str, Path], samples: int) -> dict:
    """Refuse a checkpoint that is not as the run wrote it, before anything is touched.

    ``logs``: the run's log files by name; the checkpoint's ``offsets`` must name exactly these,
    each at most the file's size (a resume cuts each log back to its offset, so a name of any
    other file, or a path, would cut that file). ``samples``: the run's samples, which every
    sample index (admitted, trained, rewarded) must lie below."""
    if not isinstance(state, dict):
        raise ConfigError(f"{where}: not a checkpoint (expected an object)")
    for key, (what, ok) in _FIELDS.items():
        if key not in state:
            raise ConfigError(f"{where}: field {key!r} is missing")
        if not ok(state[key]):
            raise ConfigError(f"{where}: field {key!r}: expected {what}, got "
                              f"{short_repr(state[key], SHOWN)}")
    _check_samples(state, where, samples)
    offsets = state["offsets"]
    unknown = sorted((k for k in offsets if k not in logs), key=repr)
    if unknown:
        raise ConfigError(f"{where}: field 'offsets': {short_repr(unknown[0], SHOWN)} is not "
                          f"one of the run's logs ({', '.join(logs)})")
    for name in logs:
        if name not in offsets:
            raise ConfigError(f"{where}: field 'offsets': the offset of {name} is missing")
    for name, path in logs.items():
        size = path.stat().st_size if path.is_file() else None
        if size is None:
            raise ConfigError(f"{where}: field 'offsets': the run's log {path} is missing")
        if not _count(offsets[name]) or offsets[name] > size:
            raise ConfigError(f"{where}: field 'offsets': {name} at "
                              f"{short_repr(offsets[name], SHOWN)}, expected an integer from 0 "
                              f"to its size, {size}")
    return state


def _check_samples(state: dict, where: Path, samples: int) -> None:
    for key, ids in (("admitted", state["admitted"]), ("train", state["train"][2])):
        if ids and max(ids) >= samples:
            raise ConfigError(f"{where}: field {key!r}: sample {max(ids)}, but the run has "
                              f"{samples}")
    for i, r in state["backend"].get("reward", {}).items():
        if not _count(i) or i >= samples or not finite(r):
            raise ConfigError(f"{where}: field 'backend.reward': {short_repr(i, SHOWN)}: "
                              f"{short_repr(r, SHOWN)} is not a sample's reward")


# -- files --------------------------------------------------------------------------------------

def write_state(directory: Path, state: dict) -> None:
    (directory / STATE).write_text(json.dumps(encode(state)), encoding="utf-8")


def read_state(directory: Path) -> dict:
    try:
        return decode(json.loads((directory / STATE).read_text(encoding="utf-8")))
    except UNREADABLE as e:
        raise ConfigError(f"{directory / STATE}: not a readable checkpoint ({e})") from None


def save_tensors(path: Path, tensors: dict) -> None:
    from safetensors.torch import save_file

    # clones: tied weights share storage, which safetensors refuses
    save_file({k: v.detach().clone().contiguous() for k, v in tensors.items()}, str(path))
    os.chmod(path, 0o666 & ~umask())  # (safetensors writes 0600, whatever the umask)


def load_tensors(path: Path) -> dict:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise ConfigError(_unreadable(path, None))
    try:
        return load_file(str(path))
    except (OSError, SafetensorError) as e:
        raise ConfigError(_unreadable(path, e)) from None


TENSORS = ("model.safetensors", "optimizer.safetensors")  # and engine.safetensors once synced


def check_tensor_files(directory: Path, optimizer: dict) -> None:
    """Refuse a checkpoint whose tensor files are missing, cut short or not safetensors, before
    a resume touches anything: each file's header is read and checked against the file's size
    (safetensors does that). The engine's weights must have the model's names and shapes, and
    the optimizer file every slot the checkpoint's state names."""
    shapes = {name: _shapes(directory / name) for name in TENSORS}
    if (directory / "engine.safetensors").exists():
        engine = _shapes(directory / "engine.safetensors")
        if engine != shapes["model.safetensors"]:
            raise ConfigError(f"{directory / 'engine.safetensors'}: not the weights of "
                              f"{directory / 'model.safetensors'} (other tensor names or shapes)")
    for p, names in optimizer["slots"].items():
        for name in names:
            if f"{p}.{name}" not in shapes["optimizer.safetensors"]:
                raise ConfigError(f"{directory / 'optimizer.safetensors'}: has no tensor "
                                  f"{short_repr(f'{p}.{name}', SHOWN)}, which {directory / STATE} "
                                  "names")


def _shapes(path: Path) -> dict[str, tuple[int, ...]]:
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise ConfigError(_unreadable(path, None))
    try:
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}  # noqa: SIM118
    except (OSError, SafetensorError) as e:
        raise ConfigError(_unreadable(path, e)) from None


def _unreadable(path: Path, e: Exception | None) -> str:
    what = "missing" if e is None else f"not a readable checkpoint file ({e})"
    return f"{path}: {what}; the run cannot be resumed from it (--force without --resume starts it over)"


def save_trainer(directory: Path, trainer) -> dict:
    """Model and optimizer tensors to safetensors; returns the optimizer's non-tensor part."""
    save_tensors(directory / "model.safetensors", trainer.model.state_dict())
    opt = trainer.opt.state_dict()
    flat = {f"{p}.{name}": t for p, slots in opt["state"].items() for name, t in slots.items()}
    save_tensors(directory / "optimizer.safetensors", flat)
    return {"param_groups": opt["param_groups"], "slots": {str(p): sorted(s) for p, s in opt["state"].items()}}


def load_trainer(directory: Path, trainer, optimizer: dict) -> None:
    """Give the trainer the checkpoint's weights and optimizer state; tensors that do not fit
    this run's model (another --model, a file from another run) are one error."""
    path = directory / "model.safetensors"
    try:
        trainer.model.load_state_dict(load_tensors(path))
        path = directory / "optimizer.safetensors"
        flat = load_tensors(path)
        state = {int(p): {name: flat[f"{p}.{name}"] for name in names}
                 for p, names in optimizer["slots"].items()}
        trainer.opt.load_state_dict({"state": state, "param_groups": optimizer["param_groups"]})
    except (KeyError, ValueError, TypeError, RuntimeError) as e:
        why = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
        why = why if len(why) <= SHOWN else why[:SHOWN] + "..."
        raise ConfigError(f"{path}: does not fit this run's model ({why})") from None
