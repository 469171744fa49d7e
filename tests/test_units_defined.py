"""docs/metrics.md defines every number we print, and each figure has its unit (the audit of the
units): `simulate`'s table left the unit cell blank for ratios and counts, `compare`, `tune` and
the cluster plan printed `mean/max` where the unit (versions) belonged, validate's errors were
documented as ratios where the JSON holds percentages, and keys of `clusters --json`, the
timeline's meta record and a `--from-vllm-bench` profile were defined nowhere.

Run: pytest tests/test_units_defined.py
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.compare import HEADLINE
from sortedrl.forecast_commands import FORECAST_COLS
from sortedrl.tables import UNITLESS, UNITS
from sortedrl.tune.commands import TUNE_COLS
from sortedrl.tune.plan import PLAN_COLS

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
CALIBRATION = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
FIXTURES = ROOT / "tests" / "fixtures"
SHORT = {"tokens": "tok", "tokens/s": "tok/s", "log-tokens": "log-tokens", "s": "s",
         "versions": "versions", "ratio": "ratio", "count": "count"}
runner = CliRunner()


def section(title: str, text: str = DOCS) -> str:
    """The text of the ``## title`` section of docs/metrics.md (up to the next ``## ``)."""
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def doc_rows(text: str = DOCS) -> dict[str, str]:
    """key -> unit of every table row of the docs, rows naming several keys included."""
    out = {}
    for keys, unit in re.findall(r"^\| ((?:`[^`]+`(?:, )?)+)(?: \([^|]*\))? \|([^|]*)\|", text, re.M):
        for key in re.findall(r"`([^`]+)`", keys):
            out.setdefault(key, unit.strip())
    return out


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    """simulate's table (a multi-turn trace: the tool keys too) and the summary it wrote."""
    out = tmp_path_factory.mktemp("sim") / "run"
    r = runner.invoke(app, ["simulate", "--synthetic", "agentic-retool", "--policy", "sync", "--steps", "1",
                            "--prompts", "4", "--out", str(out)], env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    return r.stdout, json.loads((out / "summary.json").read_text()), out


def test_every_numeric_summary_key_has_a_unit_and_every_other_is_documented_unitless(simulated):
    _, summary, _ = simulated
    numeric = {k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    assert numeric - set(UNITS) == {"seed"}  # an identifier, not a figure
    assert set(summary) - set(UNITS) <= set(UNITLESS)
    # the docs give each of them the unit the table prints (tokens written tok)
    summary_docs = doc_rows(section("Summary keys") + section("Extra keys"))
    assert {k: SHORT.get(summary_docs.get(k, "?"), "?") for k in numeric - {"seed"}} == {
        k: UNITS[k] for k in numeric - {"seed"}}
    # ... and list the keys printed without one
    said = " ".join(section("Table columns").split())
    assert all(f"`{k}`" in said.split("printed without a unit")[1][:400] for k in UNITLESS)


def test_simulates_table_prints_each_keys_unit(simulated):
    text, summary, _ = simulated
    rows = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0] in summary:
            rows[parts[0]] = parts[2:] if len(parts) > 2 else []
    shown = {k for k in summary if k not in ("params", "auto_params")}
    assert set(rows) == shown
    for key in shown:
        assert rows[key] == ([UNITS[key]] if key in UNITS else []), (key, rows[key])
    for key in ("efficiency", "bubble_ratio", "gpu_idle_ratio", "bubble_tool_ratio", "bubble_tail_ratio"):
        assert rows[key] == ["ratio"]
    for key in ("updates", "samples_total", "samples_trained", "groups_trained_whole",
                "samples_in_split_groups", "filtered_groups", "preemptions", "tool_calls"):
        assert rows[key] == ["count"]
    assert rows["regen_sigma"] == ["log-tokens"] and doc_rows()["regen_sigma"] == "log-tokens"


def test_every_column_of_compare_tune_and_the_plan_has_a_unit_or_names_no_figure():
    identifiers = {"policy", "trial", "shape", "cluster", "", "GPU-h"}  # (GPU-h: the title is the unit)
    for cols in (HEADLINE, TUNE_COLS, PLAN_COLS, FORECAST_COLS):
        assert [c.title for c in cols if not c.unit and c.title not in identifiers] == []
    stale = [c for cols in (HEADLINE, TUNE_COLS, PLAN_COLS) for c in cols if c.title.startswith("stale")]
    assert len(stale) == 3 and {c.unit for c in stale} == {"versions"}
    assert {c.unit for cols in (HEADLINE, TUNE_COLS, FORECAST_COLS) for c in cols
            if c.title == "updates"} == {"count"}
    columns = doc_rows(section("Table columns"))
    assert columns["stale"] == columns["stale mean"] == "versions" and columns["updates"] == "count"


def test_compare_prints_versions_under_stale_and_says_what_the_two_figures_are(tmp_path):
    r = runner.invoke(app, ["compare", "--synthetic", "logic-8k", "--prompts", "16", "--group-size", "4",
                            "--steps", "2", "--cluster", "h100-llama3.1-8b-2gpu", "--policy", "sync",
                            "--policy", "partial", "--out", str(tmp_path / "c")], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    col = lines[1].split().index("stale")
    assert lines[2].split()[col - 1] == "versions"  # (the unit row has no cell under "policy")
    assert "stale: mean/max staleness of the useful tokens, in policy versions" in lines
    assert max(len(line) for line in lines[:-1]) <= 80


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    run = tmp_path_factory.mktemp("val") / "run"
    shutil.copytree(FIXTURES / "run-sync", run)
    r = runner.invoke(app, ["validate", str(run), "--profile", str(FIXTURES / "cpu-profile.json"), "--wide"])
    assert r.exit_code == 0, r.output
    return r.stdout, json.loads((run / "validate.json").read_text())


def test_validates_errors_are_the_documented_percentages_and_ratios(validated):
    text, v = validated
    for s in v["steps"]:
        for key in ("step", "rollout", "train"):
            real, sim = s[f"real_{key}_s"], s[f"sim_{key}_s"]
            assert s[f"{key}_err_pct"] == pytest.approx(100 * abs(sim - real) / real)
        assert s["bubble_abs_err"] == pytest.approx(abs(s["sim_bubble_ratio"] - s["real_bubble_ratio"]))
    assert v["steps"][0]["step_err_pct"] == pytest.approx(9.8133, abs=1e-4)  # a %, not 0.098
    # progress: relative to the time since the start at which the real run reached the count
    real_ends = np.cumsum([s["real_step_s"] for s in v["steps"]])
    sim_ends = np.cumsum([s["sim_step_s"] for s in v["steps"]])  # (every step compared here)
    assert [s["progress_err_pct"] for s in v["steps"]] == pytest.approx(
        list(100 * np.abs(sim_ends - real_ends) / real_ends))
    assert v["step_time_mape"] == pytest.approx(np.mean([s["step_err_pct"] for s in v["steps"]]))
    real, sim = v["real"]["makespan_s"], v["sim"]["makespan_s"]
    assert v["makespan_err_pct"] == pytest.approx(100 * abs(sim - real) / real)
    assert v["bubble_ratio_abs_err"] == pytest.approx(abs(v["sim"]["bubble_ratio"] - v["real"]["bubble_ratio"]))
    rows = doc_rows(section("Validation"))
    assert {k: rows[k] for k in ("step_err_pct", "rollout_err_pct", "train_err_pct", "progress_err_pct",
                                 "makespan_err_pct", "step_time_mape", "progress_time_mape")} == dict.fromkeys(
        ("step_err_pct", "rollout_err_pct", "train_err_pct", "progress_err_pct", "makespan_err_pct",
         "step_time_mape", "progress_time_mape"), "%")
    assert rows["bubble_abs_err"] == rows["bubble_ratio_abs_err"] == "ratio"
    said = " ".join(text.split())
    b = v["bubble_ratio_abs_err"]
    # (each at its one precision: a ratio to 3 decimals, a % to 1, as every table prints them)
    assert f"bubble_ratio_abs_err {b:.3f} (a ratio: {100 * b:.1f} points of bubble %)" in said
    assert f"makespan_err_pct {v['makespan_err_pct']:.1f}%" in said


def test_every_key_of_validate_json_is_defined(validated):
    """`run`, `profile`, `policy`, `sets` and each step's `step` were written and defined nowhere."""
    _, v = validated
    rows = doc_rows(section("Validation"))
    said = section("Validation")
    assert {k for k in v if f"`{k}`" not in said} == set()
    assert {k for k in v["steps"][0] if f"`{k}`" not in said} == set()
    assert {"run", "profile", "policy", "sets", "step"} <= set(rows) and rows["step"] == "index"
    assert (v["policy"], v["sets"]) == ("sync", [])


def test_clusters_json_keys_are_defined():
    r = runner.invoke(app, ["clusters", "--json"])
    assert r.exit_code == 0, r.output
    keys = set(json.loads(r.stdout)[0])
    assert "rollout_gpus" in keys
    assert keys - set(doc_rows(section("Cluster presets"))) == set()


def test_every_meta_key_of_a_simulated_and_a_real_timeline_is_defined(simulated):
    _, _, out = simulated
    with np.load(out / "timeline.npz") as z:
        meta = json.loads(z["meta"].tobytes())
    real = json.loads((FIXTURES / "run-sync" / "timeline.jsonl").read_text().splitlines()[0])
    said = section("Timeline records").split("The meta record holds")[1].split("Every reader checks")[0]
    for key in {*meta, *real} - {"kind"}:
        assert f"`{key}`" in said, key
    assert {"regen", "regen_sigma", "auto_params"} <= set(meta)


def test_every_key_of_a_vllm_bench_profile_is_defined(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-vllm-bench", str(FIXTURES / "vllm_bench" / "c2-r0.json"),
                            "--cluster", "h100-llama3.1-8b-1gpu-32seq", "--out", str(out)])
    assert r.exit_code == 0, r.output
    fit = json.loads(out.read_text())["fit"]
    eng = fit["engine"]
    # the two shapes of `uncertain`: a list of terms, and a term -> % object at the full batch
    assert isinstance(eng["uncertain"], list) and isinstance(eng["full_batch"]["uncertain"], dict)
    assert eng["full_batch"]["uncertain"]  # (one level: step_s_per_seq is loose at the full batch)
    profiles = " ".join(section("Profiles").split())
    for name in ("fit.engine.uncertain", "fit.engine.full_batch.uncertain", "fit.engine.unidentified",
                 "fit.from_preset", "fit.engine.levels", "fit.engine.fixed_by_model"):
        assert f"`{name}`" in profiles, name
    assert all(f"`fit.{key}" in profiles for key in fit)
    for key in [*eng, *eng["files"][0], *eng["full_batch"]]:
        assert any(f"{a}{key}{b}" in profiles for a in "`." for b in "`.") or f"`{key}`" in CALIBRATION, key


def test_every_key_of_a_metrics_profiles_trainer_fit_is_defined(tmp_path):
    """`file`, `source`, `steps`, `updates`, `updates_per_row` and `terms` were defined nowhere."""
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(FIXTURES / "metrics" / "verl_metrics.jsonl"),
                            "--cluster", "h100-llama3.1-8b-256seq", "--out", str(out)])
    assert r.exit_code == 0, r.output
    trainer = json.loads(out.read_text())["fit"]["trainer"]
    said = " ".join(section("Profiles").split())
    assert {"file", "source", "steps", "updates", "updates_per_row", "terms", "notes"} <= set(trainer)
    assert [k for k in trainer if f"`{k}`" not in said and f".{k}`" not in said] == []  # (fit.trainer.notes)
    assert [k for k in trainer["columns"] if f"`{k}`" not in said] == []
    for name, term in trainer["terms"].items():
        assert f"`{name}` in {term['unit']}" in said, name


def test_a_framework_import_gives_the_cap_in_tokens(tmp_path):
    r = runner.invoke(app, ["trace", "import", str(FIXTURES / "frameworks" / "nemo_rl_logs"), "--from", "nemo-rl",
                            "--out", str(tmp_path / "t.jsonl")])
    assert r.exit_code == 0, r.output
    assert r.stdout.rstrip().endswith("over 2 step(s), cap 14 tokens")


def test_an_auto_oversubscription_given_back_repeats_the_window() -> None:
    """`oversubscribe=0.164 (auto)` (84 of 512 slots, rounded to the nearest) floored back to 83
    samples with --set: another run. Rounded up to 6 decimals it floors to the same window."""
    import math

    from sortedrl.policies.auto import _multiple

    assert _multiple(84, 512) == 0.164063 and _multiple(768, 512) == 1.5
    for window in range(1, 5000, 7):
        for slots in (7, 512, 768, 2048, 99_991):
            assert math.floor(_multiple(window, slots) * slots) == window, (window, slots)


def test_every_trace_statistic_is_defined_with_the_unit_the_table_prints(tmp_path):
    """`trace stats` printed its figures without units, and docs/metrics.md defined none of its
    keys (it pointed to docs/traces.md, which listed them). Every key the JSON can hold (a
    multi-turn trace with rewards, and `unfinished`) has a row whose unit is the table's."""
    from sortedrl.traces.stats import STEP_UNITS
    from sortedrl.traces.stats import UNITS as STAT_UNITS

    rows = doc_rows(section("Trace statistics"))
    printed_as = {"truncated_share": "ratio"}  # a 0-1 share in the JSON, printed x100 with a %
    for key, unit in STAT_UNITS.items():
        assert key in rows, key
        want = "text" if key == "source" else printed_as.get(key, unit)
        assert SHORT.get(rows[key], rows[key]) == want, (key, rows[key], unit)
    per_step = section("Trace statistics").split("| `per_step` |")[1].splitlines()[0]
    assert all(f"`{k}`" in per_step for k in STEP_UNITS)

    trace = tmp_path / "ar.jsonl"
    r = runner.invoke(app, ["trace", "synth", "agentic-retool", "--out", str(trace), "--steps", "1",
                            "--prompts", "8"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["trace", "stats", str(trace), "--json"])
    keys = set(json.loads(r.stdout))
    assert keys - {"per_step"} <= set(STAT_UNITS) and "tool_s_p99" in keys and "reward_mean" in keys
    r = runner.invoke(app, ["trace", "stats", str(trace)], env={"COLUMNS": "120"})
    lines = r.stdout.splitlines()
    assert any(re.search(r"│ tool time per call p99 +│ +[\d.]+ │ s +│", x) for x in lines), r.stdout
    assert any(re.search(r"│ truncated share +│ +\d+\.\d │ % +│", x) for x in lines), r.stdout  # (1 decimal)
    assert any(re.search(r"│ p99/p50 \(not truncated\) +│ +[\d.]+ │ x +│", x) for x in lines), r.stdout
    assert "mean response len (tok)" in r.stdout
