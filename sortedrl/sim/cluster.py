"""Cluster presets and cluster files: how a ``--cluster`` name or JSON file becomes a
:class:`~sortedrl.sim.cluster_spec.Cluster`.

A preset name reads ``{gpu}-{model}[-tp{N}][-{G}gpu][-{S}seq]``, e.g. ``h100-llama3.1-8b`` or
``h200-qwen2.5-32b-tp2-16gpu`` (``-{S}seq`` sets ``max_num_seqs``; a final ``-disagg`` selects the
disaggregated placement). Without ``-tpN`` an engine takes the fewest GPUs (a power of two) whose
memory holds the weights twice over; without ``-Ngpu`` the cluster takes 8 GPUs, or the fewest (a
power of two) whose trainer holds the weights, gradients and Adam state (a trainer that cannot
offloads its Adam state to host memory, or is refused when even that does not fit). A JSON file
``{"preset": NAME, field: value, ...}`` overrides any field, which is how users describe their own
cluster; a calibrated profile from ``sortedrl calibrate`` is read by :mod:`sortedrl.sim.profile`.

The Cluster itself (its fields, the cost model and KV budget it derives, its checks) lives in
:mod:`sortedrl.sim.cluster_spec`, split out to keep each module short; it is re-exported here with
its constants, so ``from sortedrl.sim.cluster import Cluster, preset`` keeps working.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from sortedrl import file_kinds, jsonio
from sortedrl.errors import ConfigError
from sortedrl.limits import short_repr
from sortedrl.sim.cluster_spec import (  # noqa: F401  (all but two re-exported)
    COMBINE_BYTES,
    COUNT_RANGES,
    DECODE_MODELS,
    MEASURED,
    NET_EFF,
    OFFLOADED_STATE_BYTES,
    PLACEMENTS,
    TRAIN_STATE_BYTES,
    TRAINER_OFFLOADS,
    Cluster,
)
from sortedrl.sim.cost import LEGACY_NAMES, CostModel, renamed, written_labels
from sortedrl.sim.hardware import GPUS, MODELS

# -- presets and parsing ----------------------------------------------------------------------

_PRESET = re.compile(r"^(?P<gpu>" + "|".join(sorted(map(re.escape, GPUS), key=len, reverse=True))
                     + r"|[a-z0-9]+)-(?P<model>.+?)(?:-tp(?P<tp>\d+))?(?:-(?P<g>\d+)gpu)?"
                     r"(?:-(?P<seqs>\d+)seq)?(?P<dis>-disagg)?$", re.ASCII)  # (not -٣gpu)


def preset(name: str) -> Cluster:
    """Parse a preset name such as ``h200-qwen2.5-32b-tp2`` or ``h100-llama3.1-8b-16gpu-64seq``."""
    m = _PRESET.match(name)
    if not m or m["gpu"] not in GPUS or m["model"] not in MODELS:
        raise ConfigError(f"unknown cluster preset {name!r} ({_unread_part(name)}): a preset is "
                          "GPU-MODEL with GPU one of "
                          f"{', '.join(GPUS)} and MODEL one of {', '.join(MODELS)} "
                          "(optional suffixes -tpN, -Ngpu, -Nseq and -disagg)")
    placement = "disaggregated" if m["dis"] else "colocated"
    tp = int(m["tp"]) if m["tp"] else default_tp(m["gpu"], m["model"])
    gpus = int(m["g"]) if m["g"] else default_gpus(m["gpu"], m["model"], tp, placement)
    seqs = int(m["seqs"]) if m["seqs"] else Cluster.max_num_seqs
    return Cluster(name=name, gpu=m["gpu"], model=m["model"], tp=tp, gpus=gpus,
                   max_num_seqs=seqs, placement=placement, chunked_prefill=True).validate(name)


_SUFFIXES = (r"tp\d+", r"\d+gpu", r"\d+seq", "disagg")  # -tpN, -Ngpu, -Nseq, -disagg, in this order


def _unread_part(name: str) -> str:
    """Which part of a name that is no preset could not be read, read left to right: its GPU,
    its MODEL, or the first suffix that is none of the forms or comes out of their order."""
    gpu = max((g for g in GPUS if name == g or name.startswith(g + "-")), key=len, default=None)
    if gpu is None:
        return f"unknown GPU {name.split('-', 1)[0]!r}"
    rest = name[len(gpu) + 1:]
    model = max((m for m in MODELS if rest == m or rest.startswith(m + "-")), key=len, default=None)
    if model is None:  # (_PRESET reads the suffixes off an unknown model's name, if they are whole)
        m = _PRESET.match(name)
        return f"unknown MODEL {m['model'] if m else rest!r}" if rest else "no MODEL"
    last, parts = -1, rest[len(model) + 1:].split("-")
    forms = [next((k for k, pattern in enumerate(_SUFFIXES) if re.fullmatch(pattern, part, re.ASCII)), None)
             for part in parts]
    for part, form in zip(parts, forms, strict=True):
        if form is None:
            return f"unknown suffix {'-' + part!r}"
        if form <= last:
            if form == last:
                return f"suffix {'-' + part!r} repeated"
            if len(set(forms)) == len(forms) and None not in forms:  # (each once: the name in order)
                ordered = "-".join(p for _, p in sorted(zip(forms, parts, strict=True)))
                return f"suffix {'-' + part!r} out of order; in order: {gpu}-{model}-{ordered}"
            return f"suffix {'-' + part!r} out of order"
        last = form
    return "cannot read it"  # (not reached: a name read this far matches _PRESET)


def default_tp(gpu: str, model: str) -> int:
    """The fewest GPUs (a power of two) whose usable memory holds the weights twice over."""
    usable = GPUS[gpu].hbm_bytes * Cluster.gpu_mem_util
    tp = 1
    while 2 * MODELS[model].weight_bytes > tp * usable:
        tp *= 2
    return tp


def default_gpus(gpu: str, model: str, tp: int, placement: str) -> int:
    """8 GPUs, or the fewest (a power of two, whole engines) whose trainer holds its state."""
    need = TRAIN_STATE_BYTES * MODELS[model].params
    gpus = max(8, tp)
    while True:
        trainer = gpus if placement == "colocated" else max(1, gpus // 4)
        if need <= trainer * GPUS[gpu].hbm_bytes:
            return gpus
        gpus *= 2


def preset_names() -> list[str]:
    return [f"{g}-{m}" for g in GPUS for m in MODELS]


def load_cluster(spec: str) -> Cluster:
    """A preset name, a JSON file ``{"preset": NAME, field: value, ...}``, or a calibrated
    profile written by ``sortedrl calibrate``. A name that is no preset but an existing file
    (not ``.json``) or a directory is said to be no cluster file (not an unknown preset)."""
    if not spec.endswith(".json"):
        try:
            return preset(spec)
        except ConfigError:
            if os.path.isdir(spec):
                raise ConfigError(f"{spec}: is a directory, not a cluster file or preset") from None
            if os.path.exists(spec):
                raise ConfigError(f"{spec}: not a cluster file (a cluster file or a profile is a .json "
                                  "file: {\"preset\": NAME, ...}) nor a preset's name") from None
            raise
    path = Path(spec)
    if path.is_file() and (why := file_kinds.not_a_cluster(path)) is not None:
        raise ConfigError(why)
    raw = jsonio.read(spec, ConfigError, "cluster file not found")
    if not isinstance(raw, dict):
        raise ConfigError(f"{spec}: expected a JSON object")
    from sortedrl.sim.profile import is_profile, profile_cluster

    if is_profile(raw):  # a calibrated profile from `sortedrl calibrate`
        cluster = profile_cluster(raw, spec, path.stem)
    else:
        cluster = cluster_from_dict(raw, spec, path.stem, written=True)
        if cluster.placement == "colocated" and cluster.train_gpus >= cluster.gpus:  # (as written: not a
            raise ConfigError(  # shape tune derives from it, for policies that never split)
                f"{spec}: field 'train_gpus': {cluster.train_gpus} trainer GPUs of {cluster.gpus} leave none "
                "to roll out in the disaggregated split that async and one_step_off run on (a colocated "
                "cluster uses train_gpus only for that split)")
    return dataclasses.replace(cluster, source=spec)  # (a later error names the file as given)


# the one Cluster field that was named as a cost term (the roofline's fixed step cost): a cluster
# file (or a profile's ``cluster`` object, a tune.json's ``cluster_fields``) may still say t_fix
LEGACY_FIELDS = {"t_fix": LEGACY_NAMES["t_fix"]}
# the fields that only decode_model "roofline" reads (Cluster.cost); "measured" has its own terms
ROOFLINE_FIELDS = ("mbu", "mfu", "step_fixed_s")
# the fields that derive cost terms and nothing else (Cluster.cost; cluster_split.split_costs
# scales explicit trainer terms by a ratio in which they cancel): beside explicit ``costs`` they
# price nothing
COST_ONLY_FIELDS = ("decode_model", *ROOFLINE_FIELDS, "mfu_prefill", "mfu_train", "extra_forwards",
                    "ref_model", "recompute")


def cluster_from_dict(raw: dict, spec: str, name: str, written: bool = False) -> Cluster:
    """A cluster file's object (or a cluster's fields, as tune.json records them), checked.
    ``written``: a file the user wrote, where a field the cluster's decode model does not read
    (:data:`ROOFLINE_FIELDS` without ``"decode_model": "roofline"``) is refused: it was ignored
    without a word (tune.json records every field, used or not)."""
    from sortedrl.sim.profile import parse_costs

    labels = written_labels(raw, "", LEGACY_FIELDS)  # (an error names t_fix so)
    raw = renamed(raw, spec, None, LEGACY_FIELDS)
    base = preset(str(raw.pop("preset", "h100-llama3.1-8b")))
    known = [f.name for f in dataclasses.fields(Cluster) if f.name != "source"]
    changes: dict[str, object] = {"name": str(raw.pop("name", name))}
    for key, value in raw.items():
        if key not in known:
            raise ConfigError(f"{spec}: unknown field {key!r} (known: {', '.join(known)})")
        want = type(getattr(base, key))
        if key == "costs":
            value, want = parse_costs(value, spec), CostModel
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            if not jsonio.finite(value):  # (float() of a 400-digit integer raised OverflowError)
                raise ConfigError(f"{spec}: field {labels.get(key, repr(key))}: expected a finite "
                                  f"number, got {short_repr(value)}")
            value = float(value)
        if type(value) is not want:
            raise ConfigError(f"{spec}: field {labels.get(key, repr(key))}: expected {want.__name__}, "
                              f"got {value!r}")
        changes[key] = value
    cluster = dataclasses.replace(base, **changes).validate(spec, labels)
    if written and "costs" in raw:
        _refuse_beside_costs(raw, spec, labels)
    unused = [key for key in ROOFLINE_FIELDS if key in raw] if cluster.decode_model != "roofline" else []
    if written and unused:
        named, them = _fields_named(unused, labels)
        raise ConfigError(f"{spec}: {named}: only decode_model 'roofline' uses {them}, and this cluster's is "
                          f"{cluster.decode_model!r} (its own fitted terms: docs/calibration.md, Decode step); "
                          f"add \"decode_model\": \"roofline\" or remove {them}")
    return cluster


def _fields_named(keys: list[str], labels: dict) -> tuple[str, str]:
    """``("fields 'a', 'b' and 'c'", "them")``, or ``("field 'a'", "it")``, each named as the
    file spells it."""
    named = [labels.get(k, repr(k)) for k in keys]
    if len(named) == 1:
        return f"field {named[0]}", "it"
    return f"fields {', '.join(named[:-1])} and {named[-1]}", "them"


def _refuse_beside_costs(raw: dict, spec: str, labels: dict) -> None:
    """A written cluster file's field that derives cost terms, beside explicit ``costs`` that
    give every term: it priced nothing, without a word (an ``mbu`` of 0.3 ran as the costs)."""
    unused = [key for key in COST_ONLY_FIELDS if key in raw]
    if unused:
        named, them = _fields_named(unused, labels)
        raise ConfigError(f"{spec}: {named} beside 'costs': the costs give every term, so nothing reads "
                          f"{them}; remove {them}, or remove 'costs' to derive the terms from the preset "
                          "and these fields")
