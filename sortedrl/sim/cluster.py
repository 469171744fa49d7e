"""Cluster presets: which GPUs, which model, how they are split into engines and a trainer.

A preset name reads ``{gpu}-{model}[-tp{N}][-{G}gpu][-{S}seq]``, e.g. ``h100-llama3.1-8b`` or
``h200-qwen2.5-32b-tp2-16gpu`` (``-{S}seq`` sets ``max_num_seqs``; a final ``-disagg`` selects the disaggregated placement). From the hardware and model constants (see
../shared/reference/anchors.md §A3) it derives the roofline :class:`~sortedrl.sim.cost.CostModel`
and the KV-token budget of each engine. A JSON file ``{"preset": NAME, field: value, ...}``
overrides any field, which is how users describe their own cluster.

Placement ``colocated`` means the same GPUs alternate between rollout and training (verl's hybrid
engine): ``gpus / tp`` engines, and the trainer uses all ``gpus``. ``disaggregated`` splits them
into a trainer pool of ``train_gpus`` (default a quarter, AReaL's 75/25 split) and a rollout pool
of the rest, which generate at the same time (needed by ``async`` and ``one_step_off``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from sortedrl.errors import ConfigError
from sortedrl.sim.cost import CostModel


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_bytes: float
    mem_bw: float  # bytes/s
    flops: float  # dense BF16 FLOP/s
    link_bw: float  # bytes/s, one direction (NVLink)


@dataclass(frozen=True)
class Model:
    name: str
    params: float
    n_layers: int
    d_model: int
    kv_heads: int
    head_dim: int
    default_tp: int = 1

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params  # BF16

    @property
    def kv_bytes_per_token(self) -> int:
        return self.n_layers * self.kv_heads * self.head_dim * 2 * 2  # K and V, BF16


GPUS = {
    "h100": GPU("h100", 80e9, 3.35e12, 989e12, 450e9),
    "h200": GPU("h200", 141e9, 4.8e12, 989e12, 450e9),
}
MODELS = {
    "llama3.1-8b": Model("llama3.1-8b", 8.03e9, 32, 4096, 8, 128),
    "qwen2.5-7b": Model("qwen2.5-7b", 7.62e9, 28, 3584, 4, 128),
    "qwen2.5-32b": Model("qwen2.5-32b", 32.8e9, 64, 5120, 8, 128, default_tp=2),
}


@dataclass(frozen=True)
class Cluster:
    """Everything the simulator needs to know about the hardware, with help text per field."""

    name: str = field(metadata={"help": "preset name or a label for a custom cluster"})
    gpu: str = field(default="h100", metadata={"help": "GPU type: " + ", ".join(GPUS)})
    model: str = field(default="llama3.1-8b", metadata={"help": "model: " + ", ".join(MODELS)})
    tp: int = field(default=1, metadata={"help": "tensor-parallel degree of one rollout engine"})
    gpus: int = field(default=8, metadata={"help": "GPUs in the cluster"})
    placement: str = field(default="colocated", metadata={"help": "colocated (rollout and training alternate on the same GPUs) or disaggregated (separate pools)"})
    train_gpus: int = field(default=0, metadata={"help": "disaggregated: GPUs of the trainer pool (0: a quarter of the GPUs); the rest run rollout"})
    max_num_seqs: int = field(default=256, metadata={"help": "max running sequences per engine (vLLM max_num_seqs)"})
    gpu_mem_util: float = field(default=0.9, metadata={"help": "share of HBM given to weights + KV cache"})
    kv_budget_tokens: int = field(default=0, metadata={"help": "KV tokens per engine; 0 derives it from HBM, weights and KV size"})
    kv_watermark: float = field(default=0.01, metadata={"help": "share of the KV budget kept free when admitting"})
    mbu: float = field(default=0.75, metadata={"help": "memory-bandwidth utilisation of decode"})
    mfu: float = field(default=0.5, metadata={"help": "FLOP utilisation of decode"})
    mfu_prefill: float = field(default=0.55, metadata={"help": "FLOP utilisation of prefill"})
    mfu_train: float = field(default=0.4, metadata={"help": "FLOP utilisation of training"})
    t_fix: float = field(default=0.002, metadata={"help": "fixed cost per decode step or prefill, s"})
    extra_forwards: int = field(default=1, metadata={"help": "forward passes per update besides forward+backward (old log-probs, reference)"})
    train_fix: float = field(default=1.0, metadata={"help": "fixed time per update, s"})
    sync_fix: float = field(default=0.5, metadata={"help": "fixed time per weight sync on top of bytes / link bandwidth, s"})
    costs: CostModel | None = field(default=None, metadata={"help": "explicit cost terms (a calibrated profile); replaces the roofline"})

    # -- derived ----------------------------------------------------------------------------

    @property
    def trainer_gpus(self) -> int:
        if self.placement == "colocated":
            return self.gpus
        return self.train_gpus or max(1, self.gpus // 4)

    @property
    def rollout_gpus(self) -> int:
        return self.gpus if self.placement == "colocated" else self.gpus - self.trainer_gpus

    @property
    def engines(self) -> int:
        return self.rollout_gpus // self.tp

    @property
    def kv_budget(self) -> int:
        if self.kv_budget_tokens > 0:
            return self.kv_budget_tokens
        g, m = GPUS[self.gpu], MODELS[self.model]
        free = self.tp * g.hbm_bytes * self.gpu_mem_util - m.weight_bytes
        return max(0, int(free // m.kv_bytes_per_token))

    @property
    def kv_admit_budget(self) -> int:
        """KV tokens an engine may fill when admitting (the budget minus the watermark)."""
        return int(self.kv_budget * (1.0 - self.kv_watermark))

    def cost(self) -> CostModel:
        if self.costs is not None:
            return self.costs
        g, m = GPUS[self.gpu], MODELS[self.model]
        bw, fl = self.tp * g.mem_bw * self.mbu, self.tp * g.flops
        train_flops = (6.0 + 2.0 * self.extra_forwards) * m.params
        return CostModel(
            t_fix=self.t_fix,
            a0=m.weight_bytes / bw,
            a1=m.kv_bytes_per_token / bw,
            c1=2.0 * m.params / (fl * self.mfu),
            p1=2.0 * m.params / (fl * self.mfu_prefill),
            p2=4.0 * m.n_layers * m.d_model / (fl * self.mfu_prefill),
            train_per_token=train_flops / (self.trainer_gpus * g.flops * self.mfu_train),
            train_fix=self.train_fix,
            sync_s=self.sync_fix + m.weight_bytes / g.link_bw,
        )

    def describe(self) -> dict:
        d = dataclasses.asdict(self)
        d["costs"] = dataclasses.asdict(self.cost())
        d.update(engines=self.engines, trainer_gpus=self.trainer_gpus, kv_budget=self.kv_budget)
        return d

    # -- checks -----------------------------------------------------------------------------

    def validate(self, where: str = "cluster") -> Cluster:
        if self.gpu not in GPUS:
            raise ConfigError(f"{where}: field 'gpu': unknown GPU {self.gpu!r} (known: {', '.join(GPUS)})")
        if self.model not in MODELS:
            raise ConfigError(f"{where}: field 'model': unknown model {self.model!r} (known: {', '.join(MODELS)})")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"{where}: field 'placement': unknown placement {self.placement!r} "
                              f"(known: {', '.join(PLACEMENTS)})")
        for name in ("tp", "gpus", "max_num_seqs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{where}: field '{name}': must be >= 1, got {getattr(self, name)}")
        if self.train_gpus < 0:
            raise ConfigError(f"{where}: field 'train_gpus': must be >= 0, got {self.train_gpus}")
        if self.rollout_gpus < self.tp:
            raise ConfigError(f"{where}: field 'train_gpus': {self.trainer_gpus} trainer GPUs of {self.gpus} "
                              f"leave no rollout engine of tp={self.tp}")
        if self.rollout_gpus % self.tp:
            raise ConfigError(f"{where}: field 'gpus': {self.rollout_gpus} rollout GPUs do not split into "
                              f"tp={self.tp} engines")
        for name in ("gpu_mem_util", "mbu", "mfu", "mfu_prefill", "mfu_train"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ConfigError(f"{where}: field '{name}': must be in (0, 1], got {v}")
        if not 0.0 <= self.kv_watermark < 1.0:
            raise ConfigError(f"{where}: field 'kv_watermark': must be in [0, 1), got {self.kv_watermark}")
        for name in ("t_fix", "train_fix", "sync_fix"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{where}: field '{name}': must be >= 0, got {getattr(self, name)}")
        if self.kv_budget <= 0:
            m = MODELS[self.model]
            raise ConfigError(
                f"{where}: impossible cluster: {m.name} weights ({m.weight_bytes / 1e9:.1f} GB) leave no KV cache "
                f"on tp={self.tp} x {GPUS[self.gpu].hbm_bytes / 1e9:.0f} GB at gpu_mem_util={self.gpu_mem_util}"
            )
        return self

    def check_fits(self, longest_sequence: int, where: str = "cluster") -> None:
        """Raise unless one engine can hold the longest sequence (prompt + response) alone."""
        need = longest_sequence + 1
        if need > self.kv_admit_budget:
            raise ConfigError(
                f"{where}: impossible cluster: the KV budget of {self.kv_admit_budget} tokens per engine "
                f"cannot hold one sequence of {longest_sequence} tokens"
            )


# -- presets and parsing ----------------------------------------------------------------------

PLACEMENTS = ("colocated", "disaggregated")
_PRESET = re.compile(r"^(?P<gpu>[a-z0-9]+)-(?P<model>.+?)(?:-tp(?P<tp>\d+))?(?:-(?P<g>\d+)gpu)?"
                     r"(?:-(?P<seqs>\d+)seq)?(?P<dis>-disagg)?$")


def preset(name: str) -> Cluster:
    """Parse a preset name such as ``h200-qwen2.5-32b-tp2`` or ``h100-llama3.1-8b-16gpu-64seq``."""
    m = _PRESET.match(name)
    if not m or m["gpu"] not in GPUS or m["model"] not in MODELS:
        raise ConfigError(f"unknown cluster preset {name!r} (known: {', '.join(preset_names())}; "
                          "optional suffixes -tpN, -Ngpu, -Nseq and -disagg)")
    model = MODELS[m["model"]]
    tp = int(m["tp"]) if m["tp"] else model.default_tp
    gpus = int(m["g"]) if m["g"] else 8
    seqs = int(m["seqs"]) if m["seqs"] else Cluster.max_num_seqs
    placement = "disaggregated" if m["dis"] else "colocated"
    return Cluster(name=name, gpu=m["gpu"], model=model.name, tp=tp, gpus=gpus,
                   max_num_seqs=seqs, placement=placement).validate(name)


def preset_names() -> list[str]:
    return [f"{g}-{m}{d}" for g in GPUS for m in MODELS for d in ("", "-disagg")]


def load_cluster(spec: str) -> Cluster:
    """A preset name, a JSON file ``{"preset": NAME, field: value, ...}``, or a calibrated
    profile written by ``sortedrl calibrate``."""
    if not spec.endswith(".json"):
        return preset(spec)
    path = Path(spec)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{spec}: cluster file not found") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{spec}: line {e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{spec}: expected a JSON object")
    from sortedrl.sim.profile import is_profile, profile_cluster

    if is_profile(raw):  # a calibrated profile from `sortedrl calibrate`
        return profile_cluster(raw, spec, path.stem)
    base = preset(str(raw.pop("preset", "h100-llama3.1-8b")))
    known = {f.name: f for f in dataclasses.fields(Cluster)}
    changes: dict[str, object] = {"name": str(raw.pop("name", path.stem))}
    for key, value in raw.items():
        f = known.get(key)
        if f is None:
            raise ConfigError(f"{spec}: unknown field {key!r} (known: {', '.join(known)})")
        if key == "costs":
            changes[key] = _costs(value, spec)
            continue
        want = type(getattr(base, key))
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not want:
            raise ConfigError(f"{spec}: field {key!r}: expected {want.__name__}, got {value!r}")
        changes[key] = value
    return dataclasses.replace(base, **changes).validate(spec)


def _costs(raw: object, where: str) -> CostModel:
    names = [f.name for f in dataclasses.fields(CostModel)]
    required = [f.name for f in dataclasses.fields(CostModel) if f.default is dataclasses.MISSING]
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: field 'costs': expected an object with {', '.join(names)}")
    missing = [n for n in required if n not in raw]
    if missing:
        raise ConfigError(f"{where}: field 'costs': missing {', '.join(missing)}")
    extra = [k for k in raw if k not in names]
    if extra:
        raise ConfigError(f"{where}: field 'costs': unknown {', '.join(extra)}")
    vals = {}
    for n in (n for n in names if n in raw):
        v = raw[n]
        if n == "step_table":
            from sortedrl.sim.profile import _table

            vals[n] = _table(v, where)
            continue
        if n in ("prefill_in_step", "train_padded"):
            if not isinstance(v, bool):
                raise ConfigError(f"{where}: field 'costs.{n}': expected true or false, got {v!r}")
            vals[n] = v
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"{where}: field 'costs.{n}': expected a number >= 0, got {v!r}")
        vals[n] = float(v)
    if vals["t_fix"] + vals["a0"] <= 0 and not (vals.get("step_table") and min(vals["step_table"]) > 0):
        raise ConfigError(f"{where}: field 'costs': t_fix + a0 must be > 0 (a decode step takes time)")
    return CostModel(**vals)
