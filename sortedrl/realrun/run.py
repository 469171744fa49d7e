"""``sortedrl run``: GRPO for real, with the simulator's controller and policies, crash-safe.

RUNDIR gets the same files a simulation writes, plus what a real run needs:
- ``timeline.jsonl``: the simulator's schema, appended and flushed per record;
- ``trace.jsonl``: what the run generated, one row per sample of its dataloader, trained or not
  (filtered groups, responses beyond those kept, and ``abort`` rows for samples that never
  finished: :mod:`sortedrl.realrun.run_trace`); trained samples' rows are appended to
  ``trace.partial.jsonl`` as they are trained; the final file is a canonical trace readable by
  ``simulate --trace``;
- ``summary.json``: the same keys as a simulation (``lower_bound_s`` is 0: a real run has no cost
  model until it is calibrated);
- ``metrics.jsonl``: per update, reward, loss and the vLLM-vs-trainer log-prob mismatch;
- ``checkpoint/``: written atomically after every update.

``--resume`` restores the last checkpoint: the logs are cut back to it, the trainer, the engine's
weights, the controller's bookkeeping and the policy are reloaded, and every sample that was
admitted is submitted again. Checkpoints hold data only (JSON and safetensors, no pickles:
:mod:`sortedrl.realrun.checkpoint`), so resuming a run directory never runs code it carries. Work done after the checkpoint is lost and redone; no sample is lost
or trained twice. A resumed run keeps the settings it started with, and ``--force`` starts a
run directory over (:mod:`sortedrl.realrun.rundir`). A new run stopped before its first checkpoint
(a policy's error, Ctrl-C) removes what it wrote: it has nothing to resume, and the same command
may then be given again (a kill cannot be caught: its logs stay, for ``--force``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace

from sortedrl.errors import ConfigError
from sortedrl.metrics import summarize
from sortedrl.policies.auto import auto_params
from sortedrl.policies.base import SampleState, params_dict
from sortedrl.policies.controller import Controller
from sortedrl.policies.registry import make_policy, policy_class
from sortedrl.realrun import agent, run_trace
from sortedrl.realrun import checkpoint as ckpt_io
from sortedrl.realrun.checkpoint_orders import orders_state, restore_orders
from sortedrl.realrun.engine import import_vllm
from sortedrl.realrun.model import MODEL_CARD, check_model_dir, load_tokenizer
from sortedrl.realrun.progress_lines import RunLines
from sortedrl.realrun.run_checks import check_config
from sortedrl.realrun.run_logs import Appender, add_to_meta, start_logs
from sortedrl.realrun.rundir import (
    LOGS,
    PENDING,
    check_not_complete,
    commit_checkpoint,
    first_missing,
    latest_checkpoint,
    recover_checkpoint,
    sync_to_disk,
    unstart,
)
from sortedrl.realrun.rundir_force import drop, put_back, set_aside
from sortedrl.realrun.task import check_task_words, decode, get_task, grader
from sortedrl.timeline import Timeline
from sortedrl.traces.digest import trace_digest


@dataclass
class RunConfig:
    model: str
    policy: str
    out: str
    steps: int = 3
    sets: list[str] = field(default_factory=list)
    task: str = "sort"
    dataset: str | None = None  # the user's JSONL of prompt/answer rows (replaces ``task``)
    reward: str = "exact"  # how --dataset responses are graded
    prompts: int = 8  # prompts per step
    group_size: int = 4
    max_tokens: int = 64
    temperature: float = 1.0
    lr: float = 1e-3
    kl_coef: float = 0.0
    objective: str = "bypass"  # how stale tokens are trained: bypass or decoupled (trainer.py)
    is_cap: float = 2.0  # the importance weight above which a token is masked (trainer.py)
    max_num_seqs: int = 32
    seed: int = 0
    device: str = "cpu"  # cpu, or cuda (vLLM for GPUs, the [gpu] extra)
    dtype: str = "float32"  # of the engine and the trainer: float32 or bfloat16
    gpu_memory_utilization: float = 0.5  # vLLM's share of the GPU; the colocated trainer has the rest
    engines: int = 1  # vLLM engines; more than one, or disaggregated, runs them as Ray actors
    placement: str = "colocated"  # or "disaggregated": the trainer trains while engines generate
    ray: str | None = None  # a Ray cluster's address; None starts a local Ray when one is needed
    warm_tokens: int = 0  # engine warm-up: every step size up to this many tokens (0: 32 per slot, <= 1024)
    max_turns: int = 2  # multi-turn tasks (sort-tool): turns per trajectory (realrun/agent.py)
    turn_tokens: int = 8  # multi-turn tasks: per-turn token cap, a tool call follows
    tool_latency: float = 0.05  # multi-turn tasks: the tool server's seconds per call
    tool_pool: int = 8  # multi-turn tasks: tool calls served at once

    @property
    def on_ray(self) -> bool:
        return self.engines > 1 or self.placement != "colocated" or self.ray is not None


def prompt_set(cfg: RunConfig, n_groups: int) -> SimpleNamespace:
    """The trace-like facts make_policy sizes a policy by; no lengths exist before generating."""
    return SimpleNamespace(prompts_per_step=cfg.prompts, num_groups=n_groups,
                           meta=SimpleNamespace(group_size=cfg.group_size, max_response_len=cfg.max_tokens),
                           reward=())  # graded as responses finish, so filter_groups works


@dataclass
class _Start:
    """What a run starts from: every check passed, and nothing written yet."""
    turns: object  # a multi-turn task's turn settings (agent.turn_config)
    model_dir: Path
    task: object
    multi_turn: bool
    tok: object
    groups: int  # prompts in the whole run (steps x prompts per step)
    prompts: list[list[int]]  # the token ids of every sample's prompt, group by group
    grade: object
    policy: object


def run_real(cfg: RunConfig, resume: bool = False, progress=None, stats: dict | None = None,
             force: bool = False, lines: RunLines | None = None) -> dict:
    """Run, or resume, a real GRPO run; returns its summary. ``force``: start over in a RUNDIR
    that holds a run (:mod:`sortedrl.realrun.rundir`). ``stats`` (for calibration) receives the
    backend's host-overhead counters and, under ``steps``, every engine step's shape and time.
    ``progress(samples, note)`` is called after each update (the bar); ``lines`` are told as the
    engines start and after each update (a log's lines, :mod:`sortedrl.realrun.progress_lines`)."""
    start = _prepare(cfg, resume, force)
    out = Path(cfg.out)
    aside = set_aside(out) if force else None  # every check passed: kept till a checkpoint
    created = first_missing(out)  # (what a failed start removes)
    out.mkdir(parents=True, exist_ok=True)
    state, timeline = _open_timeline(cfg, out, resume, start)
    logs = {name: Appender(out / name) for name in LOGS}
    timeline.sink = logs["timeline.jsonl"]

    common = dict(prompts=start.prompts, grade=start.grade, group_size=cfg.group_size,
                  max_tokens=cfg.max_tokens, temperature=cfg.temperature,
                  max_num_seqs=cfg.max_num_seqs, timeline=timeline, seed=cfg.seed,
                  eos=start.tok.eos_token_id, clock_offset=state["clock"] if state else 0.0)
    words = (start.model_dir / MODEL_CARD).exists()
    tools = (start.task, start.turns, start.tok,
             lambda ids: decode(start.tok, ids, words)) if start.multi_turn else None
    if lines is not None:
        lines.starting(cfg.engines, cfg.device, cfg.on_ray)
    try:
        backend, engine, trainer = _start_backend(cfg, start.model_dir, common, tools)
    except BaseException:  # a new run that never started leaves no RUNDIR behind
        if not resume:
            unstart(out, created, logs.values())
        if aside is not None:  # (--force: the run it was to replace comes back)
            put_back(out, aside)
        raise
    controller = Controller(start.policy, _ids(start.groups).repeat(cfg.group_size),
                            [len(p) for p in start.prompts], cfg.group_size, backend, timeline,
                            rewards=backend.reward)
    backend.on_update = _update_hook(cfg, start, timeline, logs, (backend, trainer, controller),
                                     aside, progress, lines)
    if stats is not None:
        backend.step_log = []
    backend.flush = lambda: [a.flush() for a in logs.values()]
    if state is not None:
        _restore(state, trainer, engine, controller, backend, out / "checkpoint")
    stopped_unresumable = False
    try:
        controller.run()
    except BaseException:  # (a policy's error, Ctrl-C): a new run with no checkpoint yet is gone
        stopped_unresumable = not resume and latest_checkpoint(out) is None
        raise
    finally:
        try:
            _close(cfg, logs, backend, engine, start.multi_turn, stats)
        finally:  # (even when closing failed: a second Ctrl-C while vLLM shuts down)
            if stopped_unresumable:  # nothing to --resume from: the same command may be given again
                shutil.rmtree(out / PENDING, ignore_errors=True)
                unstart(out, created, ())
                if aside is not None:
                    put_back(out, aside)
    drop(aside)  # (a run that finished without an update, every group filtered, made no checkpoint)
    return _finish(cfg, out, start, backend)


def _prepare(cfg: RunConfig, resume: bool, force: bool) -> _Start:
    """Every check, then the prompts, the grader and the policy, before RUNDIR is touched."""
    turns = agent.turn_config(cfg)  # checked first: a bad tool setting writes nothing
    model_dir = check_model_dir(cfg.model)
    task = get_task(cfg.task, cfg.dataset, cfg.reward)
    multi_turn = agent.check_multi_turn(task, cfg)
    cls = policy_class(cfg.policy)  # unknown policies and bad knobs fail before any work
    check_config(cfg, Path(cfg.out), resume, force, task.name)

    tok = load_tokenizer(model_dir)
    problems = task.problems(cfg.steps * cfg.prompts, cfg.seed)
    if hasattr(task, "check_tokens"):  # --dataset: words the model's tokenizer has never seen
        task.check_tokens(tok, cfg.model)
    else:  # (every problem of the run: a task draws them)
        check_task_words(tok, problems, cfg.task, cfg.model)
    n = cfg.group_size
    prompts = [tok(p.prompt)["input_ids"] for p in problems for _ in range(n)]
    grade = grader(task, problems, tok, n, words=(model_dir / MODEL_CARD).exists())
    policy = make_policy(cfg.policy, cfg.sets, prompt_set(cfg, len(problems)))
    if not hasattr(policy, "state_dict"):  # (its own may read what on_start makes: not called early)
        ckpt_io.policy_state(policy)  # state its checkpoints cannot hold: refused before RUNDIR is touched
    if policy.placements and cfg.placement not in policy.placements:
        raise ConfigError(f"policy {cls.name} needs a {' or '.join(policy.placements)} cluster "
                          f"(--placement {policy.placements[0]})")
    if cfg.on_ray:  # a Ray address that does not answer fails here, before RUNDIR is touched
        from sortedrl.realrun.actors import connect

        connect(cfg.ray, num_cpus=os.cpu_count())
    if cfg.ray is None:  # vLLM runs on this machine: a missing one fails before RUNDIR is touched
        import_vllm()
    return _Start(turns, model_dir, task, multi_turn, tok, len(problems), prompts, grade, policy)


def _open_timeline(cfg: RunConfig, out: Path, resume: bool, start: _Start) -> tuple[dict | None, Timeline]:
    """``(checkpoint state, timeline)``: a new run's logs, started (no state), or a resumed run's
    state, with its logs cut back to that checkpoint and its timeline read from them."""
    if not resume:
        meta = _run_meta(cfg, start.policy, start.task.name, len(start.prompts))
        return None, start_logs(out, meta)
    ckpt = out / "checkpoint"
    recover_checkpoint(out)  # a run killed while it swapped a checkpoint in
    state = ckpt_io.check_state(ckpt_io.read_state(ckpt), ckpt / ckpt_io.STATE,
                                {name: out / name for name in LOGS}, len(start.prompts))
    ckpt_io.check_tensor_files(ckpt, state["optimizer"])
    if cfg.on_ray:
        from sortedrl.realrun.ray_backend import check_in_flight

        check_in_flight(state, ckpt / ckpt_io.STATE, cfg.engines)
    check_not_complete(out, cfg.steps)
    ckpt_io.restore_policy(start.policy, state["policy"], ckpt / ckpt_io.STATE)
    for name, size in state["offsets"].items():
        with open(out / name, "r+", encoding="utf-8") as fh:
            fh.truncate(size)
    return state, Timeline.read_jsonl(out / "timeline.jsonl")


def _update_hook(cfg: RunConfig, start: _Start, timeline: Timeline, logs: dict, parts: tuple,
                 aside, progress, lines: RunLines | None):
    """The backend's hook after each update: the logs, the bar or the lines, and a checkpoint
    (``parts``: backend, trainer, controller; ``aside``: a run that ``--force`` replaces, dropped
    once this one can be resumed)."""
    backend, trainer, controller = parts
    out = Path(cfg.out)

    def on_update(metrics: dict, samples: list[int], train: tuple) -> None:
        logs["metrics.jsonl"].write({"update": timeline.count("train"), **metrics})
        for i in samples:
            row = run_trace.sample_row(i, cfg.group_size, cfg.prompts, start.prompts, backend)
            logs["trace.partial.jsonl"].write(row)
        update = timeline.count("train") + 1  # (this update's train record comes after)
        if progress is not None or lines is not None:  # (the bar on a terminal, else the lines)
            generated = int(timeline.columns("span")["tokens"].sum())
        if progress is not None:
            progress(len(samples), f"{cfg.policy}: update {update}, {generated:,} tokens")
        _checkpoint(out / "checkpoint", out, trainer, start.policy, controller, backend, train)
        drop(aside)  # (--force: the run replaced goes once this one can be resumed)
        if lines is not None:  # (resumable from here)
            trained = timeline.columns("train")["samples"].values.size + len(samples)
            lines.updated(update, trained, generated)

    return on_update


def _close(cfg: RunConfig, logs: dict, backend, engine, multi_turn: bool, stats: dict | None) -> None:
    """Close the logs, the engines and the tool servers; hand ``stats`` the backend's counters."""
    for a in logs.values():
        a.close()
    (backend if cfg.on_ray else engine).close()
    if multi_turn:
        backend.close_tools()
    if stats is not None:
        stats.update(backend.stats, step_log=backend.step_log)


def _finish(cfg: RunConfig, out: Path, start: _Start, backend) -> dict:
    """Summarise the finished run and write its summary and trace; returns the summary."""
    timeline = Timeline.read_jsonl(out / "timeline.jsonl")
    timeline.meta["auto_params"] = auto_params(start.policy, cfg.engines * cfg.max_num_seqs)  # as simulate
    summary = summarize(timeline)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    trace = run_trace.write_run_trace(out, cfg, start.task.name, start.prompts, backend, timeline)  # every sample
    # last: the fingerprint of the trace written, as a simulation of it records (traces/digest.py)
    add_to_meta(out / "timeline.jsonl", {"auto_params": timeline.meta["auto_params"],
                                         "trace_digest": trace_digest(trace)})
    return summary


def _run_meta(cfg: RunConfig, policy, task: str, samples: int) -> dict:
    """The timeline's meta record of a new run (devices counted as the simulator counts them:
    colocated shares the engines', disaggregated adds one for the trainer)."""
    return {"backend": "vllm", "policy": policy.name, "oracle": False,
            "params": params_dict(policy.params), "trace": f"task:{task}",
            "cluster": "local-vllm", "seed": cfg.seed, "placement": cfg.placement,
            "engines": cfg.engines, "max_num_seqs": cfg.max_num_seqs, "kv_budget": 0, "tp": 1,
            "gpus": cfg.engines + (cfg.placement == "disaggregated"),
            "trainer_gpus": cfg.engines if cfg.placement == "colocated" else 1,
            "group_size": cfg.group_size, "samples_total": samples,
            "lower_bound_s": 0.0, "run": asdict(cfg)}


def _start_backend(cfg: RunConfig, model_dir: Path, common: dict, tools: tuple | None) -> tuple:
    """``(backend, engine, trainer)``: vLLM and the trainer in this process, or as Ray actors
    (``engine`` is None then); ``tools`` (task, turn config, tokenizer, decoder) for a
    multi-turn task."""
    from sortedrl.realrun.backend import RealBackend
    from sortedrl.realrun.engine import VllmEngine
    from sortedrl.realrun.trainer import GRPOTrainer

    max_model_len = cfg.max_tokens + max(map(len, common["prompts"])) + 1
    if tools is not None:  # the context also holds the tool outputs
        max_model_len += agent.TOOL_TOKENS_MAX * cfg.max_turns
    trainer_kwargs = dict(lr=cfg.lr, kl_coef=cfg.kl_coef, temperature=cfg.temperature, seed=cfg.seed,
                          device=cfg.device, dtype=cfg.dtype, objective=cfg.objective,
                          is_cap=cfg.is_cap)
    engine_kwargs = dict(seed=cfg.seed, dtype=cfg.dtype, device=cfg.device, warm_tokens=cfg.warm_tokens,
                         gpu_memory_utilization=cfg.gpu_memory_utilization)
    if cfg.on_ray:
        from sortedrl.realrun.actors import RemoteTrainer, start_actors
        from sortedrl.realrun.ray_backend import RayBackend

        workers, actor = start_actors(cfg.engines, str(model_dir), cfg.max_num_seqs, max_model_len,
                                      engine_kwargs, trainer_kwargs)
        return RayBackend(workers, actor, cfg.placement, **common), None, RemoteTrainer(actor)
    engine = VllmEngine(str(model_dir), cfg.max_num_seqs, max_model_len, **engine_kwargs)
    trainer = GRPOTrainer(str(model_dir), **trainer_kwargs)
    if tools is not None:
        task, turns, tok, decoder = tools
        return agent.start(engine, trainer, task, turns, tok, cfg.seed, common, decoder), engine, trainer
    return RealBackend(engine, trainer, **common), engine, trainer


def _ids(k: int):
    """One id per prompt (the controller takes one per sample: repeat each ``group_size`` times)."""
    import numpy as np

    return np.array([f"p{g:06d}" for g in range(k)])


def _checkpoint(ckpt: Path, out: Path, trainer, policy, controller, backend, train: tuple) -> None:
    """Everything needed to continue after this update. The update's own ``train`` record is
    stored here rather than in the logs' offsets: it is written once the checkpoint is done, so
    that its duration includes the checkpoint."""
    tmp = out / PENDING
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    optimizer = trainer.save(str(tmp)) if hasattr(trainer, "actor") else ckpt_io.save_trainer(tmp, trainer)
    if backend.synced is not None:
        ckpt_io.save_tensors(tmp / "engine.safetensors", backend.synced)
    s = controller.s
    public = {k: v for k, v in vars(s).items() if k != "engines"}
    b = backend
    state = {"policy": ckpt_io.policy_state(policy), "orders": orders_state(controller.orders, policy),
             "optimizer": optimizer, "public": public,
             "settled": controller.settled, "rollout_on": controller.rollout_on, "engine_version": backend.state.version,
             "backend": {"kept": b.kept, "kept_lp": b.kept_lp, "kept_ver": b.kept_ver,
                         "reward": b.reward, "reason": b.reason, "rewards": b.rewards,
                         "segment": b.segment,
                         **(b.turn_state() if hasattr(b, "turn_state") else {}),
                         **(b.flight_state() if hasattr(b, "flight_state") else {})},
             "admitted": [i for i, st in enumerate(s.state) if st == SampleState.ADMITTED],
             "clock": b.now()}
    backend.flush()  # the offsets below must be on disk
    for name in LOGS:
        sync_to_disk(out / name)
    state["offsets"] = {name: os.path.getsize(out / name) for name in LOGS}
    state["train"] = (*train, backend.now())
    ckpt_io.write_state(tmp, state)  # last: a checkpoint counts once its state reads back
    commit_checkpoint(out)


def _restore(state: dict, trainer, engine, controller, backend, ckpt: Path) -> None:
    if hasattr(trainer, "actor"):
        trainer.load(str(ckpt), state["optimizer"])
    else:
        ckpt_io.load_trainer(ckpt, trainer, state["optimizer"])
    if (ckpt / "engine.safetensors").exists():
        weights = ckpt_io.load_tensors(ckpt / "engine.safetensors")
        backend.restore_weights(weights, state["engine_version"])
    backend.state.version = state["engine_version"]
    engines = controller.s.engines
    ckpt_io.assign(controller.s, state["public"], ckpt / ckpt_io.STATE, same_shape=True)
    controller.s.engines = engines
    controller.settled, controller.rollout_on = state["settled"], state["rollout_on"]
    if "orders" in state:  # (a checkpoint of an earlier version has none: orders given again or lost)
        restore_orders(controller.orders, controller.policy, state["orders"], ckpt / ckpt_io.STATE)
    saved = dict(state["backend"])
    backend.reward.update(saved.pop("reward", {}))  # the controller reads rewards through this dict
    ckpt_io.assign(backend, saved, ckpt / ckpt_io.STATE, same_shape=True)
    backend.state._kept = backend.kept
    backend.enabled = state["rollout_on"]
    backend.ctl = controller
    admitted = state["admitted"]
    if admitted:  # they were in the engines: submit them again from what they kept
        backend.readmit(admitted)
    t0, version, samples, tokens, t1 = state["train"]
    backend.timeline.train(t0, t1, version, samples, tokens)  # the update the checkpoint closed
    backend.jobs.append(controller.update_done)  # the checkpoint was taken just before it
