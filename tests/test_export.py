"""`sortedrl export verl|slime|areal`: every key written exists in the framework's own schema
(the config files in the verl 0.9.1 and AReaL 1.0.4 wheels from PyPI, slime's argument parser at
a pinned commit), the unit conversions, and the policies with no equivalent."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.export import GROUP_SIZE_DEFAULT, NoEquivalent, export, node_split
from sortedrl.sim.cluster import load_cluster

WHEELS = {"verl": "verl==0.9.1", "areal": "areal==1.0.4"}
SLIME_ARGS = Path(__file__).parent / "fixtures" / "slime" / "arguments.py.txt"
POLICIES = ("sync", "partial", "sortedrl", "async", "one_step_off", "tail_batch", "oracle_sorted")
CLUSTERS = ("h100-llama3.1-8b-16gpu", "h100-llama3.1-8b-12gpu-disagg", "h200-qwen2.5-32b-tp2")


def wheel(name: str) -> zipfile.ZipFile:
    """The framework's wheel, downloaded once (without dependencies) into a cache directory."""
    cache = Path(os.environ.get("SORTEDRL_TEST_CACHE", Path.home() / ".cache" / "sortedrl-tests"))
    cache.mkdir(parents=True, exist_ok=True)
    spec = WHEELS[name]
    found = sorted(cache.glob(f"{name}-{spec.split('==')[1]}-*.whl"))
    if not found:
        run = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", spec,
                              "-d", str(cache)], capture_output=True, text=True, timeout=600)
        found = sorted(cache.glob(f"{name}-{spec.split('==')[1]}-*.whl"))
        if run.returncode or not found:
            # under CI=true tests/conftest.py turns this skip into a failure
            pytest.skip(f"cannot download {spec} from the package registry: "
                        f"{(run.stderr or run.stdout).strip().splitlines()[-1:]}")
    return zipfile.ZipFile(found[0])


def flat_keys(tree: object, prefix: str = "") -> set[str]:
    out = set()
    if isinstance(tree, dict):
        for key, value in tree.items():
            path = f"{prefix}{key}"
            out.add(path)
            out |= flat_keys(value, path + ".")
    return out


@pytest.fixture(scope="module")
def verl_schemas() -> dict[str, set[str]]:
    whl = wheel("verl")
    base = flat_keys(yaml.safe_load(whl.read("verl/trainer/config/_generated_ppo_trainer.yaml")))
    overlay = {
        "fully_async": "verl/experimental/fully_async_policy/config/fully_async_ppo_trainer.yaml",
        "one_step_off": "verl/experimental/one_step_off_policy/config/one_step_off_ppo_trainer.yaml",
    }
    out = {"base": base}
    for name, path in overlay.items():
        out[name] = base | flat_keys(yaml.safe_load(whl.read(path)))
    return out


@pytest.fixture(scope="module")
def areal_fields() -> dict[str, dict[str, str]]:
    """Every dataclass of areal/api/cli_args.py: its fields and their annotations, with bases."""
    tree = ast.parse(wheel("areal").read("areal/api/cli_args.py"))
    classes: dict[str, dict[str, str]] = {}
    bases: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
            classes[node.name] = {s.target.id: ast.unparse(s.annotation) for s in node.body
                                  if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
    for name in list(classes):  # fold in the inherited fields
        todo = list(bases[name])
        while todo:
            parent = todo.pop()
            if parent in classes:
                classes[name] = {**classes[parent], **classes[name]}
                todo += bases.get(parent, [])
    return classes


def areal_has(classes: dict, dotted: str) -> bool:
    here = "GRPOConfig"
    parts = dotted.split(".")
    for k, part in enumerate(parts):
        fields = classes.get(here, {})
        if part not in fields:
            return False
        if k < len(parts) - 1:
            nested = [n for n in re.findall(r"[A-Za-z_]+", fields[part]) if n in classes]
            if not nested:
                return False
            here = nested[0]
    return True


def slime_flags() -> set[str]:
    text = SLIME_ARGS.read_text()
    return set(re.findall(r'(?:add_argument|reset_arg)\(\s*(?:parser,\s*)?"(--[a-z0-9-]+)"', text))


def exports(framework: str):
    """Every policy with knobs that change the mapping, on colocated, disaggregated and tp=2."""
    knobs = {"sync": [[], ["minibatches=2", "filter_groups=true"]],
             "partial": [[], ["rollout_batch=32", "filter_groups=true"]],
             "sortedrl": [[], ["mode=partial"]], "async": [["eta=1"], ["eta=4", "max_concurrent=512",
                                                                      "recompute_on_sync=true",
                                                                      "batch=256", "drop_stale=true"]],
             "one_step_off": [[], ["filter_groups=true"]], "tail_batch": [[]], "oracle_sorted": [[]]}
    for policy in POLICIES:
        for sets in knobs[policy]:
            for name in CLUSTERS:
                try:
                    yield export(framework, policy, sets, load_cluster(name), 8, 64, samples=1024)
                except NoEquivalent:
                    continue


def test_every_verl_key_is_in_its_config(verl_schemas) -> None:
    seen = set()
    for result in exports("verl"):
        schema = verl_schemas["fully_async" if "fully_async" in result.entry else
                              "one_step_off" if "one_step_off" in result.entry else "base"]
        missing = [k for k in result.overrides if k not in schema]
        assert not missing, (result.policy, missing)
        seen |= set(result.overrides)
    assert {"async_training.staleness_threshold", "async_training.partial_rollout",
            "async_training.require_batches", "actor_rollout_ref.actor.ppo_mini_batch_size",
            "rollout.total_rollout_steps", "async_training.concurrent_samples_per_replica",
            "algorithm.filter_groups.enable", "rollout.n_gpus_per_node"} <= seen
    # read by nothing since verl 0.7 (PR #4422): never written
    assert "actor_rollout_ref.rollout.over_sample_rate" not in seen


def test_every_areal_key_is_in_its_config(areal_fields) -> None:
    seen = set()
    for result in exports("areal"):
        missing = [k for k in result.overrides if not areal_has(areal_fields, k)]
        assert not missing, (result.policy, missing)
        seen |= set(result.overrides)
    assert {"rollout.max_head_offpolicyness", "rollout.max_concurrent_rollouts",
            "rollout.consumer_batch_size", "cluster.n_gpus_per_node", "gconfig.n_samples",
            "actor.ppo_n_minibatches"} <= seen
    assert not areal_has(areal_fields, "rollout.no_such_field")  # the check can fail


def test_every_slime_flag_is_in_its_parser() -> None:
    flags = slime_flags()
    assert len(flags) > 150 and "--partial-rollout" in flags
    seen = set()
    for result in exports("slime"):
        missing = [k for k in result.overrides if k not in flags]
        assert not missing, (result.policy, missing)
        seen |= set(result.overrides)
    assert {"--over-sampling-batch-size", "--partial-rollout", "--colocate",
            "--dynamic-sampling-filter-path"} <= seen


def test_conversions() -> None:
    verl = export("verl", "async", ["eta=3"])
    assert verl.overrides["async_training.staleness_threshold"] == 3.0  # (1 + s) x B, AReaL's (eta + 1) x B
    assert export("areal", "async", ["eta=3"]).overrides["rollout.max_head_offpolicyness"] == 3
    slime = export("slime", "partial", ["over_sample=1.5"], prompts=64)
    assert slime.lines()[:3] == ["--num-steps-per-rollout 1", "--over-sampling-batch-size 96", "--partial-rollout"]
    assert [node_split(g) for g in (4, 8, 12, 16, 24, 7)] == [
        (1, 4), (1, 8), (2, 6), (2, 8), (3, 8), (1, 7)]


def test_slime_partial_writes_the_rollout_batch_its_over_sampling_is_sized_on() -> None:
    # (only --over-sampling-batch-size was written: slime's default rollout batch ran beside it)
    slime = export("slime", "partial", ["rollout_batch=16"])
    assert slime.lines()[:4] == ["--num-steps-per-rollout 1", "--over-sampling-batch-size 32",
                                 "--partial-rollout", "--rollout-batch-size 16"]
    derived = export("slime", "partial", [], auto={"rollout_batch": 24})  # a tune trial's run
    assert derived.overrides["--rollout-batch-size"] == 24
    assert derived.overrides["--over-sampling-batch-size"] == 48


@pytest.mark.parametrize("policy, sets, steps", [("sync", [], 1), ("sync", ["minibatches=2"], 2),
                                                 ("partial", [], 1), ("one_step_off", [], 1), ("async", [], 1)])
def test_slime_is_told_its_updates_a_rollout(policy, sets, steps) -> None:
    """slime's --num-steps-per-rollout defaults to None, and Megatron then sets the global batch
    to micro-batch x data-parallel GPUs: 64 prompts x 8 on 8 GPUs made 64 updates a rollout, not
    the one (or sync's minibatches) the simulated step makes (helper 209, slime arguments.py)."""
    got = export("slime", policy, sets, group_size=8, prompts=64)
    assert got.overrides["--num-steps-per-rollout"] == steps
    assert not [c for c in got.caveats if "num-steps-per-rollout" in c]


def test_slime_says_when_minibatches_leave_samples_out() -> None:
    """slime's global batch is samples // num_steps_per_rollout, and the rest is dropped: 32 x 8
    in 3 updates trains 255 (a review ran slime's own dp_schedule)."""
    got = export("slime", "sync", ["minibatches=3"], group_size=8, prompts=32)
    assert got.caveats[-1] == ("minibatches=3: 256 samples a rollout do not split evenly: slime "
                               "trains 85 an update and leaves 1 out")
    assert not [c for c in export("slime", "sync", ["minibatches=2"], group_size=8, prompts=32).caveats
                if "split evenly" in c]


def test_slime_without_prompts_says_its_required_rollout_batch_is_not_written() -> None:
    got = export("slime", "sync", [], group_size=8)
    assert "--rollout-batch-size" not in got.overrides
    assert got.caveats[-1] == ("no --prompts: --rollout-batch-size (prompts a rollout), which slime "
                               "requires, is not written; give --prompts, or set it")
    assert not [c for c in export("slime", "sync", [], group_size=8, prompts=64).caveats if "no --prompts" in c]


def test_no_equivalent_exits_2() -> None:
    r = CliRunner().invoke(app, ["export", "areal", "tail_batch"])
    assert r.exit_code == 2
    assert r.output == ("error: policy tail_batch has no equivalent in areal: RollPacker's tail "
                        "batching (deferring long prompts to their own rounds) is not in it\n")
    r = CliRunner().invoke(app, ["export", "verl", "oracle_sorted"])
    assert r.exit_code == 2 and "no equivalent in verl" in r.output


@pytest.mark.parametrize("args, line", [
    # -5 was written as data.train_batch_size=-5; 0 was left out as if not given
    (["--prompts", "-5", "--group-size", "-3"], "error: --group-size must be >= 1, got -3\n"),
    (["--prompts", "0"], "error: --prompts must be >= 1, got 0\n"),
    (["--group-size", "0"], "error: --group-size must be >= 1, got 0\n"),
])
def test_a_batch_shape_below_one_is_one_error(args, line) -> None:
    r = CliRunner().invoke(app, ["export", "verl", "sortedrl", *args])
    assert r.exit_code == 2 and r.stdout == "" and r.stderr == line, r.output


def test_the_batch_shape_is_exported_as_given() -> None:
    got = export("verl", "sortedrl", [], group_size=1, prompts=1).overrides
    assert got["actor_rollout_ref.rollout.n"] == 1 and got["data.train_batch_size"] == 1


def test_export_of_a_tune_result(tmp_path) -> None:
    out = tmp_path / "tune"
    r = CliRunner().invoke(app, [
        "tune", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "4",
        "--policy", "async", "--param", "async.eta=1,2", "--param", "cluster.gpus=8,16",
        "--objective", "makespan_s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    result = json.loads((out / "tune.json").read_text())
    best = result["trials"][result["best"]["overall"]]
    r = CliRunner().invoke(app, ["export", "verl", str(out / "tune.json"), "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["policy"] == "async" and got["params"]["eta"] == best["params"]["eta"]
    gpus = best["params"]["cluster.gpus"]
    trainer = gpus // 4
    assert (got["overrides"]["trainer.n_gpus_per_node"], got["overrides"]["rollout.n_gpus_per_node"]) \
        == (node_split(trainer)[1], node_split(gpus - trainer)[1])


def test_export_of_the_knee(tmp_path) -> None:
    tune = {"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
            "trials": [{"id": 0, "policy": "sync", "params": {"cluster.gpus": 32}},
                       {"id": 1, "policy": "one_step_off", "params": {"cluster.gpus": 16}}],
            "cluster_pareto": {"front": [0, 1], "knee": 1}}
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    r = CliRunner().invoke(app, ["export", "verl", str(tmp_path), "--trial", "knee", "--json"])
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    assert got["policy"] == "one_step_off"
    assert (got["overrides"]["trainer.n_gpus_per_node"], got["overrides"]["rollout.n_gpus_per_node"]) \
        == (4, 6)  # 16 GPUs: a quarter train, 12 roll out as 2 nodes x 6
    tune["cluster_pareto"]["knee"] = None
    (tmp_path / "tune.json").write_text(json.dumps(tune))
    r = CliRunner().invoke(app, ["export", "verl", str(tmp_path), "--trial", "knee"])
    assert r.exit_code == 2 and "no knee" in r.output


@pytest.mark.parametrize("trial, message", [
    ({"id": 0, "policy": "this:Nope", "params": {}},  # `this` prints the Zen of Python
     "trial 0: policy this:Nope is a user policy (module:Class), and export maps the built-in policies "
     "only (sync, sortedrl, partial, tail_batch, async, one_step_off, oracle_sorted); export the built-in "
     "policy closest to it by its name and --set knobs"),
    ({"id": 0, "policy": "nosuch", "params": {}}, "trial 0: unknown policy 'nosuch'"),
    ({"id": 0, "policy": "sync", "params": {"cluster.bogus": 1}},
     "trial 0: params {'cluster.bogus': 1}: not a cluster field or value ('bogus')"),
    ({"id": 0, "policy": "sync", "params": {"cluster.gpus": "x"}},
     "trial 0: params {'cluster.gpus': 'x'}: not a cluster field or value (invalid literal"),
    ({"id": 0, "policy": "sync", "params": [1]}, "trial 0: 'params' is not an object"),
])
def test_a_tune_json_trial_not_as_tune_wrote_it_is_one_error(tmp_path, trial, message) -> None:
    """A tune.json may come from someone else: its policy is never imported, and a bad trial is
    one error line."""
    path = tmp_path / "tune.json"
    path.write_text(json.dumps({"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
                                "trials": [trial]}))
    r = CliRunner().invoke(app, ["export", "verl", str(path)])
    assert r.exit_code == 2 and "Zen of Python" not in r.output and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {message}"), lines


def test_an_export_with_nothing_to_override_says_so():
    """`export verl sync` printed its header alone: the policy is verl's default trainer."""
    r = CliRunner().invoke(app, ["export", "verl", "sync"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:] == [
        "# nothing to override: verl's defaults are this policy; --prompts, --group-size and "
        "--cluster add the run's shape",
        "# caveat: no --group-size: actor_rollout_ref.rollout.n is not written, and the framework's default "
        "stands (verl's is 1: one response a prompt, no GRPO group); give --group-size n",
        "# caveat: 1 update(s) a step: set actor_rollout_ref.actor.ppo_mini_batch_size to "
        "data.train_batch_size / 1 (verl's default, 256 prompts, makes train_batch_size / 256 "
        "updates a step and refuses a smaller train_batch_size)"]
    r = CliRunner().invoke(app, ["export", "verl", "sync", "--prompts", "64"])
    assert "nothing to override" not in r.stdout and "data.train_batch_size=64" in r.stdout
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=64" in r.stdout


@pytest.mark.parametrize("framework, policy, key, name", [
    ("verl", "sync", "actor_rollout_ref.rollout.n", "verl"),
    ("areal", "async", "gconfig.n_samples", "AReaL"),
    ("slime", "partial", "--n-samples-per-prompt", "slime")])
def test_no_group_size_names_the_frameworks_own_default(framework, policy, key, name) -> None:
    """`export areal async` and `export slime partial` said the default that stands was verl's."""
    r = CliRunner().invoke(app, ["export", framework, policy])
    assert r.exit_code == 0, r.output
    assert (f"# caveat: no --group-size: {key} is not written, and the framework's default stands "
            f"({name}'s is 1: one response a prompt, no GRPO group); give --group-size n"
            ) in r.stdout.splitlines()


def test_the_group_size_defaults_are_the_frameworks_own() -> None:
    """GROUP_SIZE_DEFAULT, read from each framework's source: verl's ppo_trainer.yaml, AReaL's
    GenerationHyperparameters dataclass, slime's argument parser."""
    verl = yaml.safe_load(wheel("verl").read("verl/trainer/config/_generated_ppo_trainer.yaml"))
    tree = ast.parse(wheel("areal").read("areal/api/cli_args.py"))
    hyper = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GenerationHyperparameters")
    n_samples = next(s.value for s in hyper.body if isinstance(s, ast.AnnAssign) and s.target.id == "n_samples")
    areal = next(k.value.value for k in n_samples.keywords if k.arg == "default")
    slime = re.search(r'"--n-samples-per-prompt",\s*type=int,\s*default=(\d+)', SLIME_ARGS.read_text())
    assert {"verl": verl["actor_rollout_ref"]["rollout"]["n"], "areal": areal,
            "slime": int(slime.group(1))} == {k: n for k, (_, n) in GROUP_SIZE_DEFAULT.items()}


@pytest.mark.parametrize("framework, sets, prompts, line", [
    # verl's default minibatch, 256 prompts, refused a train_batch_size of 32 (and split 512
    # into 2 updates); AReaL's default ppo_n_minibatches, 4, made 4 updates of each batch
    ("verl", [], 32, "actor_rollout_ref.actor.ppo_mini_batch_size=32"),
    ("verl", ["minibatches=4"], 512, "actor_rollout_ref.actor.ppo_mini_batch_size=128"),
    ("areal", [], 32, "actor.ppo_n_minibatches=1"),
    ("areal", ["minibatches=2"], 32, "actor.ppo_n_minibatches=2"),
])
def test_an_export_makes_the_simulated_updates_a_step(framework, sets, prompts, line):
    args = [x for s in sets for x in ("--set", s)]
    r = CliRunner().invoke(app, ["export", framework, "sync", *args, "--prompts", str(prompts)])
    assert r.exit_code == 0, r.output
    assert line in r.stdout.splitlines()


def test_a_path_given_as_best_that_holds_no_tune_is_named_so(tmp_path, monkeypatch) -> None:
    """`export verl ./plans` (meant `plan`) said "unknown policy './plans'": a path is told as
    one, a directory without a tune.json too; a plain unknown word is still an unknown policy."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "emptyd").mkdir()
    why = "(BEST is a tune's directory or its tune.json, or a policy name)"
    sim = CliRunner().invoke(app, ["simulate", "--trace", "math-16k", "--policy", "sync", "--out", "sim", "--json"])
    assert sim.exit_code == 0, sim.output
    r = CliRunner().invoke(app, ["export", "verl", "./nope", "--trial", "3"])  # (it said: --trial needs a tune.json)
    assert (r.exit_code, r.stderr) == (2, f"error: ./nope: no such file or directory {why}\n")
    for best, line in (("./plans", f"./plans: no such file or directory {why}"),
                       ("sim", f"sim: is a `sortedrl simulate` run, not a tune: export its policy by name with "
                               f"its --set knobs {why}"),
                       ("emptyd", f"emptyd: holds no tune.json {why}"),
                       ("plans", "unknown policy 'plans' (known: sync, sortedrl, partial, tail_batch, async, "
                                 "one_step_off, oracle_sorted; or module:Class for your own)")):
        r = CliRunner().invoke(app, ["export", "verl", best])
        assert (r.exit_code, r.stderr) == (2, f"error: {line}\n")


@pytest.mark.parametrize("framework, policy, key", [
    ("verl", "sync", "data.train_batch_size"), ("slime", "one_step_off", "--rollout-batch-size"),
    ("areal", "sync", "train_dataset.batch_size")])
def test_a_rollout_batch_knob_is_the_exported_batch(framework, policy, key) -> None:
    """`export verl sync --set rollout_batch=32 --prompts 64` wrote train_batch_size=64: the knob,
    the prompts a step the policy trains, was dropped without a word."""
    from sortedrl.export import export

    got = export(framework, policy, ["rollout_batch=32"], group_size=8, prompts=64)
    assert got.overrides[key] == 32
    assert f"--prompts 64: {key} is the update batch too: written as the batch knob's 32 prompts" in got.caveats
    assert export(framework, policy, ["rollout_batch=32"], group_size=8).overrides[key] == 32


def test_a_sortedrl_trial_exported_to_verl_names_the_tunes_sync_time(tmp_path) -> None:
    """verl runs a sortedrl or partial trial as its synchronous trainer: the export names the
    time the tune simulated for sync on the same cluster shape (the fastest feasible one), not
    only the trial's own."""
    def trial(i, policy, gpus, makespan, **more):
        return {"id": i, "policy": policy, "params": {"cluster.gpus": gpus, **more.pop("params", {})},
                "summary": {"makespan_s": makespan}, **more}
    tune = {"cluster": "h100-llama3.1-8b", "best": {"overall": 0},
            "trials": [trial(0, "sortedrl", 16, 519.25), trial(1, "sync", 16, 2954.0),
                       trial(2, "sync", 16, 2800.5, params={"minibatches": 2}),
                       trial(3, "sync", 16, 100.0, feasible=False), trial(4, "sync", 32, 1500.0),
                       trial(5, "partial", 32, 900.0), trial(6, "partial", 64, 800.0)],
            "cluster_pareto": {"front": [0, 5, 6], "knee": 0}}
    (tmp_path / "tune.json").write_text(json.dumps(tune))

    def caveats(*args):
        r = CliRunner().invoke(app, ["export", *args, "--json"])
        assert r.exit_code == 0, r.output
        return [c for c in json.loads(r.stdout)["caveats"] if c.startswith("time:")]
    assert caveats("verl", str(tmp_path), "--trial", "knee") == [
        "time: these settings run verl's synchronous trainer: expect the makespan of the fastest of the "
        "tune's 2 sync trials on this shape (trial 2, with minibatches=2, 2,800.5 s), not this trial's (519.2 s)"]
    assert caveats("verl", str(tmp_path), "--trial", "5") == [
        "time: these settings run verl's synchronous trainer: expect the makespan of the tune's sync "
        "trial on this shape (trial 4, 1,500.0 s), not this trial's (900.0 s)"]
    assert caveats("verl", str(tmp_path), "--trial", "6") == []  # no sync on 64 GPUs
    assert caveats("slime", str(tmp_path), "--trial", "5") == []  # slime's own partial rollout


def test_the_sync_time_of_a_real_tune_is_its_sync_trials(tmp_path) -> None:
    out = tmp_path / "plan"
    r = CliRunner().invoke(app, [
        "tune", "--synthetic", "math-16k", "--prompts", "16", "--group-size", "4", "--steps", "2",
        "--policy", "sync", "--policy", "sortedrl", "--param", "cluster.gpus=2,4",
        "--objective", "makespan_s", "--out", str(out)])
    assert r.exit_code == 0, r.output
    trials = json.loads((out / "tune.json").read_text())["trials"]
    mine = next(t for t in trials if t["policy"] == "sortedrl" and t["params"] == {"cluster.gpus": 4})
    sync = next(t for t in trials if t["policy"] == "sync" and t["params"] == {"cluster.gpus": 4})
    r = CliRunner().invoke(app, ["export", "verl", str(out), "--trial", str(mine["id"])])
    assert r.exit_code == 0, r.output
    assert (f"# caveat: time: these settings run verl's synchronous trainer: expect the makespan of the "
            f"tune's sync trial on this shape (trial {sync['id']}, {sync['summary']['makespan_s']:,.1f} s), "
            f"not this trial's ({mine['summary']['makespan_s']:,.1f} s)\n") in r.stdout
