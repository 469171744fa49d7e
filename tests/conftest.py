"""Shared helpers: tiny traces and clusters with round-number costs, built in memory."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
from hypothesis import settings

from sortedrl.sim.cluster import Cluster
from sortedrl.sim.cost import CostModel
from sortedrl.traces.schema import Trace, TraceMeta

# CI and `make test` run the same examples every time (a test that passes does not fail later
# by finding a new example); HYPOTHESIS_PROFILE=explore draws fresh ones.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


def make_trace(lengths, prompt_lens=None, group_size=1, max_len=None, steps=None) -> Trace:
    lengths = np.asarray(lengths, dtype=np.int64)
    n = lengths.size
    prompt_lens = np.full(n, 10) if prompt_lens is None else np.asarray(prompt_lens, dtype=np.int64)
    cap = int(max_len or lengths.max())
    cols = {
        "prompt_id": np.array([f"p{i // group_size}" for i in range(n)]),
        "sample": np.arange(n) % group_size,
        "prompt_len": prompt_lens,
        "response_len": lengths,
        "truncated": lengths >= cap,
    }
    if steps is not None:
        cols["step"] = np.asarray(steps, dtype=np.int64)
    return Trace.from_columns(cols, TraceMeta(cap, group_size, "test"), name="test")


def costs(**kw) -> CostModel:
    base = dict(step_fixed_s=1.0, weight_read_s=1.0, kv_read_s_per_token=0.0, compute_s_per_seq=0.0,
                prefill_s_per_token=0.0, prefill_s_per_pair=0.0, train_per_token=0.0,
                train_fix=10.0, sync_s=5.0, step_s_per_seq=0.0)
    base.update(kw)
    return CostModel(**base)  # prefill_in_step may be passed in kw


def tiny_cluster(engines=1, max_num_seqs=4, kv=10_000, watermark=0.0, **cost_kw) -> Cluster:
    return dataclasses.replace(
        Cluster(name="tiny"), gpus=engines, tp=1, max_num_seqs=max_num_seqs,
        kv_budget_tokens=kv, kv_watermark=watermark, costs=costs(**cost_kw),
    )


def write_run(out: Path, result) -> Path:
    """A simulated run's directory, as ``sortedrl simulate`` writes it."""
    out.mkdir(parents=True, exist_ok=True)
    result.timeline.write_jsonl(out / "timeline.jsonl")
    (out / "summary.json").write_text(json.dumps(result.summary))
    return out


# -- under CI a missing named component fails ---------------------------------------------------
# Tests skip (saying what to install) when vLLM, Ray or chromium is missing on a developer's
# machine; under CI=true every such skip is a failure, so that CI never passes without them.

import pytest  # noqa: E402

from tests.cli_helpers import sigint_raises  # noqa: E402, F401 (a fixture for every test file)

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _fail_skip(report) -> None:
    if _CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"CI=true: a named component is missing, so this fails instead of skipping: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _fail_skip(outcome.get_result())


@pytest.fixture(autouse=True)
def _stderr_is_what_it_is(monkeypatch):
    """rich takes stderr for a terminal where FORCE_COLOR or TTY_COMPATIBLE=1 is set, as some CI
    systems set them: a command then draws its bar instead of the plain lines that the tests
    assert exactly (a log's progress lines, quiet outputs). The tests' stderr is not a terminal,
    whatever the environment they run in (a test that wants one asks for it)."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)


# -- the real runner's tiny model, built once per session --------------------------------------


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """The tiny Qwen2 model of ``sortedrl model init`` (warm-started on the sort task), built
    once and shared by every real-runner test file (it takes tens of seconds to build)."""
    pytest.importorskip("transformers", reason="the real runner needs the [cpu] extra")
    from typer.testing import CliRunner

    from sortedrl.cli import app

    out = tmp_path_factory.mktemp("m") / "tiny"
    r = CliRunner().invoke(app, ["model", "init", "--out", str(out), "--warmup-steps", "300"])
    assert r.exit_code == 0, r.output
    return str(out)


# -- the tiny model's tokenizer, for the importers that count tokens ----------------------------


@pytest.fixture(scope="session")
def tok(tmp_path_factory) -> Path:
    """The tiny model's word-level tokenizer (what `sortedrl model init` saves), built locally
    once a session (``tokenizer`` is the same, by the name some test files use)."""
    from sortedrl.realrun.model import build_tokenizer
    from sortedrl.realrun.task import get_task

    out = tmp_path_factory.mktemp("tok")
    build_tokenizer(get_task("sort").corpus(2000, 0)).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tokenizer(tok) -> Path:
    return tok


# -- the real runner's tests first ----------------------------------------------------------------
# `make test` runs the suite on two workers (pytest-xdist, --dist worksteal): each worker starts
# on one half of the collected tests, and one that runs out takes half of what the other has
# left. The real runner's tests take tens of seconds each, the rest seconds. Collected first,
# they start at once on the first worker while the second runs the short tests, then takes half
# of those left, and so on: both workers stay busy with them to near the end. (Measured on 2
# cores: xdist's default --dist load with the alphabetical order left the Ray tests to one
# worker at the end while the other waited, 14.5 min; this, 10 min.)


_REAL_RUN_FILES = "test_realrun"


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: not item.path.name.startswith(_REAL_RUN_FILES))  # stable
