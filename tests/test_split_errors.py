"""A policy that needs separate rollout and training GPUs, on GPUs that have no such split, is
one error line about the policy and the GPUs (an audit of output safety, helper outsafe).

``simulate --policy async --cluster h100-llama3.1-8b-1gpu`` said ``field 'train_gpus': 1
trainer GPUs of 1 leave no rollout engine of tp=1``, of a field the user never set; ``compare``
said the same, and only once it reached that policy, after running the ones before it.

Run: pytest tests/test_split_errors.py
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl import compare as compare_mod
from sortedrl.cli import app
from sortedrl.compare import cluster_for
from sortedrl.errors import ConfigError
from sortedrl.sim.cluster import preset

runner = CliRunner()
SMALL = ["--synthetic", "logic-8k", "--prompts", "16", "--group-size", "2", "--steps", "2"]


def refused(args: list[str], message: str, root: Path) -> None:
    before = sorted(root.rglob("*"))
    r = runner.invoke(app, args)
    assert (r.exit_code, r.stderr) == (2, f"error: {message}\n"), r.output
    assert sorted(root.rglob("*")) == before


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


ONE_GPU = ("policy async needs separate rollout and training GPUs (a disaggregated cluster); "
           "h100-llama3.1-8b-1gpu has 1 GPU: give a cluster of 2 or more GPUs, e.g. h100-llama3.1-8b-2gpu")


def test_async_on_one_gpu_says_it_needs_two(ws, monkeypatch):
    args = [*SMALL, "--policy", "async", "--cluster", "h100-llama3.1-8b-1gpu", "--out", "x"]
    refused(["simulate", *args], ONE_GPU, ws)

    def no_run(*a, **k):
        raise AssertionError("a policy ran before the cluster was checked")

    monkeypatch.setattr(compare_mod, "simulate", no_run)
    refused(["compare", *SMALL, "--policy", "sync", "--policy", "async", "--cluster",
             "h100-llama3.1-8b-1gpu", "--out", "x"], ONE_GPU, ws)


@pytest.mark.parametrize("name, message", [
    ("h100-llama3.1-8b-1gpu-16seq", "policy one_step_off needs separate rollout and training GPUs (a "
     "disaggregated cluster); h100-llama3.1-8b-1gpu-16seq has 1 GPU: give a cluster of 2 or more GPUs, "
     "e.g. h100-llama3.1-8b-2gpu-16seq"),
    ("h100-llama3.1-8b-tp4-4gpu", "policy one_step_off needs separate rollout and training GPUs (a "
     "disaggregated cluster); h100-llama3.1-8b-tp4-4gpu's 4 GPUs split into 1 to train and 3 to roll "
     "out, no engine of tp=4: give a cluster of 16 GPUs, e.g. h100-llama3.1-8b-tp4-16gpu (or a cluster "
     "file with train_gpus)"),
    ("h100-llama3.1-8b-tp2-4gpu", "policy one_step_off needs separate rollout and training GPUs (a "
     "disaggregated cluster); h100-llama3.1-8b-tp2-4gpu's 4 GPUs split into 1 to train and 3 to roll "
     "out, not whole engines of tp=2: give a cluster of 8 GPUs, e.g. h100-llama3.1-8b-tp2-8gpu (or a "
     "cluster file with train_gpus)"),
])
def test_the_split_that_cannot_be_made_is_said_of_the_policy(name, message):
    with pytest.raises(ConfigError) as e:
        cluster_for(("disaggregated",), preset(name), "one_step_off")
    assert str(e.value) == message


def test_a_split_the_user_sized_still_names_train_gpus():
    one = dataclasses.replace(preset("h100-llama3.1-8b-2gpu"), train_gpus=2)
    with pytest.raises(ConfigError, match=r"^h100-llama3.1-8b-2gpu: field 'train_gpus': 2 trainer GPUs of 2 "
                                          r"leave no rollout engine of tp=1$"):
        cluster_for(("disaggregated",), one, "async")


def test_a_disaggregated_preset_of_one_gpu_blames_its_gpus():
    with pytest.raises(ConfigError) as e:
        preset("h100-llama3.1-8b-1gpu-disagg")
    assert str(e.value) == ("h100-llama3.1-8b-1gpu-disagg: field 'gpus': 1 GPU leaves no rollout engine "
                            "of tp=1 beside the trainer's 1 (a quarter of the GPUs, at least 1, where "
                            "train_gpus is not given)")
