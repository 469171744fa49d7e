"""The units audit's gaps (ux45): every figure `trace stats`, `trace fit`, `forecast`, `tune.json`,
`calibrate` and `profile show` print or write is defined with its unit, and printed at the
documented precision. Before: `trace stats` printed p99/p50 as a `ratio` (a 0-1 share in the
docs), the truncated share to 2 decimals and the turns' percentiles as `3.0` beside a max of
`16`, with table labels no doc mapped to their JSON keys; `trace fit` spelled tokens `tokens`;
forecast's columns and tune.json's keys were defined nowhere; `profile show` printed `3304
steps`, `KV budget 2097152`, `2.869e+05 tokens`, a contention factor `1` and `onload_s` in
`s/update`, and its `calibrate --model` records had no definitions.

Run: pytest tests/test_ux45_units_defined.py
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

ROOT = Path(__file__).resolve().parents[1]
METRICS = (ROOT / "docs" / "metrics.md").read_text(encoding="utf-8")
CALIBRATION = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
FIX = ROOT / "tests" / "fixtures"
runner = CliRunner()


def section(title: str, text: str = METRICS) -> str:
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def rows(text: str) -> dict[str, list[str]]:
    """Each table row's backticked keys of its first cell -> the row's other cells."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        for key in re.findall(r"`([^`]+)`", cells[0]):
            out.setdefault(key, cells[1:])
    return out


def ok(args: list[str], columns: str = "120") -> str:
    r = runner.invoke(app, args, env={"COLUMNS": columns})
    assert r.exit_code == 0, r.output
    return r.stdout


def cells(out: str) -> dict[str, list[str]]:
    """A rich table's rows: the first cell -> the others, stripped."""
    return {c[0]: c[1:] for c in ([x.strip() for x in line.split("│")[1:-1]] for line in out.splitlines()
                                  if line.count("│") >= 3) if c[0]}


@pytest.fixture(scope="module")
def agentic(tmp_path_factory) -> Path:
    trace = tmp_path_factory.mktemp("t") / "ar.jsonl"
    ok(["trace", "synth", "agentic-retool", "--out", str(trace), "--steps", "2", "--prompts", "8"])
    return trace


def test_trace_stats_prints_the_multiple_in_x_the_share_to_one_decimal_and_whole_turn_percentiles(agentic):
    stats = json.loads(ok(["trace", "stats", str(agentic), "--json"]))
    table = cells(ok(["trace", "stats", str(agentic)]))
    assert table["p99/p50 (not truncated)"] == [f"{stats['p99_p50_not_truncated']:.3f}", "x"]
    assert table["truncated share"] == [f"{100 * stats['truncated_share']:.1f}", "%"]
    assert stats["turns_p99"] == 15.0 and stats["turns_max"] == 16  # (the JSON keeps the float)
    assert table["turns per trajectory p50"] == ["3", "turns"]
    assert table["turns per trajectory p99"] == ["15", "turns"]
    assert table["turns per trajectory max"] == ["16", "turns"]
    assert table["turns per trajectory mean"] == [f"{stats['turns_mean']:.1f}", "turns"]
    assert "┃ step ┃ samples (count) ┃ mean response len (tok) ┃" in ok(["trace", "stats", str(agentic)])
    math16 = cells(ok(["trace", "stats", "math-16k"]))
    assert math16["truncated share"] == ["1.9", "%"]  # (1.86% before: 2 decimals)


def test_every_trace_stats_label_is_mapped_to_its_key_with_the_unit_printed(agentic):
    from sortedrl.traces.stats import _LABELS, UNITS

    doc = rows(section("Trace statistics"))
    table = cells(ok(["trace", "stats", str(agentic)]))
    for key, label in _LABELS.items():
        unit, shown = doc[key][0], doc[key][1]
        # (a row naming several keys gives the first label whole, the others by their last word)
        assert f"`{label}`" in shown or f"`{label.split()[-1]}`" in shown, (key, shown)
        printed = UNITS[key]
        assert {"tokens": "tok", "text": ""}.get(unit, unit) == ("ratio" if key == "truncated_share" else printed)
        if label in table and key != "source":
            assert table[label][-1] == printed, (key, table[label])
    assert doc["count"][1] == "`samples`" and doc["tool_s_mean"][1].startswith("`tool time per call mean`")
    said = " ".join(section("Table columns").split())
    assert "`x` a multiple" in said and "`ratio` is a share from 0 to 1" in said


def test_trace_fit_spells_tokens_tok_and_every_row_and_model_key_is_defined(tmp_path, agentic):
    out = tmp_path / "m.json"
    table = cells(ok(["trace", "fit", str(agentic), "--out", str(out)]))
    model = json.loads(out.read_text())
    for key in ("max_response_len", "prompt_median", "prompt_min", "prompt_max", "obs_median", "obs_max"):
        assert table[key][-1] == "tok", key
    assert table["mu0"][-1] == table["obs_sigma"][-1] == "log-tokens"
    assert table["p50"][-1] == table["mean"][-1] == "tok" and table["tool output"][-1] == "tok per trajectory"
    assert not [line for line in ok(["trace", "fit", str(agentic), "--out", str(out), "--force"]).splitlines()
                if re.search(r"│ tokens|log tokens", line)]
    doc = section("Trace fit")
    defined = rows(doc)
    from sortedrl.traces.model_turns import TURN_FIELDS

    for key in model:
        if key in TURN_FIELDS:
            assert f"`{key}`" in section("Fitting a length model", (ROOT / "docs" / "traces.md").read_text()), key
        else:
            assert key in defined, key
    assert defined["prompt_min"][0] == defined["max_response_len"][0] == "tokens"
    assert defined["prompts_per_step"][0] == "prompts" and defined["group_size"][0] == "samples per prompt"
    for key in model["fit"]:
        assert f"`fit.{key}`" in doc or f"`{key}`" in doc, key
    assert all(f"`{k}`" in doc for k in model["fit"]["quantiles"][0])


def test_forecasts_columns_and_wall_h_are_defined():
    from sortedrl.forecast_commands import FORECAST_COLS

    columns = section("Table columns")
    for col in FORECAST_COLS:
        if col.title not in ("policy", "cluster", "updates"):
            row = next(x for x in columns.splitlines() if x.startswith(f"| `{col.title}` (forecast) |"))
            assert row.split(" | ")[1] == (col.unit or col.title), col.title  # (GPU-h: the title)
    out = json.loads(ok(["forecast", "--trace", "logic-8k", "--policy", "sync", "--cluster",
                         "h100-llama3.1-8b-2gpu", "--json"]))
    forecast = rows(section("Forecast"))
    assert "wall_h" in out[0] and forecast["wall_h"][0] == "h"
    assert [k for k in out[0] if k not in forecast] == []


def test_every_key_of_tune_json_is_defined(tmp_path):
    ok(["tune", "--synthetic", "logic-8k", "--prompts", "8", "--group-size", "2", "--steps", "1", "--cluster",
        "h100-llama3.1-8b-1gpu-1seq", "--policy", "sync", "--budget", "2", "--out", str(tmp_path / "t")])
    tune = json.loads((tmp_path / "t" / "tune.json").read_text())
    doc = rows(section("Tuning"))
    assert [k for k in tune if k not in doc] == []
    assert doc["budget"][0] == "count" and doc["max_staleness"][0] == "versions"
    said = section("Tuning")
    assert all(f"`{k}`" in said for k in [*tune["trials"][0], *tune["best"], "skipped"])


def test_profile_show_prints_counts_with_separators_and_factors_to_3_decimals(tmp_path):
    lines = ok(["profile", "show", str(FIX / "cpu-profile.json")]).splitlines()
    assert lines[2] == "  cluster: one engine on one device; max_num_seqs 32, KV budget 2,097,152 tokens/engine"
    assert lines[-3:] == ["engine steps (calibrate --model): MAPE 8.0% over 3,304 steps, total error +0.1%",
                          "updates: MAPE 9.4% over 54 updates",
                          "weight sync: median 0.0079 s over 72 syncs, spread 0.004152 s"]
    out = tmp_path / "p.json"
    ok(["calibrate", "--from-metrics", str(FIX / "metrics" / "verl_metrics.jsonl"), "--cluster",
        "h100-llama3.1-8b-256seq", "--out", str(out)])
    shown = ok(["profile", "show", str(out)]).splitlines()
    tokens = json.loads(out.read_text())["fit"]["trainer"]["tokens_mean"]
    assert tokens == 286875.0
    assert any(x.endswith("(mean 16.91 s at 286,875 tokens an update)") for x in shown)  # (was 2.869e+05)
    at = shown.index("cost terms:")
    term = {x.split()[0]: x.split(None, 2)[1:] for x in reversed(shown[at + 2:]) if x.startswith("  ")}
    assert term["engine_contention"] == ["1.000", "x step while training                   preset (not measured)"]
    one = next(x for x in shown if x.startswith("  engine_contention_one "))
    assert one.split()[1] == "0.000" and one.endswith("preset (not measured); 0: as with every engine busy")
    assert term["onload_s"][1].startswith("s/wake, rollout restart ")
    assert term["offload_s"][1].startswith("s/sleep, first update after rollout ")


def test_the_vllm_bench_table_prints_step_counts_with_separators(tmp_path):
    out = tmp_path / "p.json"
    ok(["calibrate", "--from-vllm-bench", str(FIX / "vllm_bench" / "c2-r0.json"), str(FIX / "vllm_bench" / "c8-r0.json"),
        "--cluster", "h100-llama3.1-8b-1gpu-32seq", "--out", str(out)])
    f = json.loads(out.read_text())["fit"]["engine"]["files"][0]
    assert f["steps_measured"] >= 1000
    row = next(x for x in ok(["profile", "show", str(out)]).splitlines() if x.startswith("  c2-r0.json "))
    assert row.split()[-1] == f"{f['steps_measured']:,}/{f['steps_replayed']:,}" and "," in row.split()[-1]


def test_every_cost_term_profile_show_prints_and_every_calibrate_model_record_is_defined():
    from sortedrl.calibration.show import UNITS

    table = rows(section("Reading a profile", CALIBRATION))
    for name, unit in UNITS.items():
        assert name in table, name
        assert table[name][0] == (unit or "(none: a bool)") or unit.split(",")[0] in table[name][0], (name, unit)
    for name in ("expert_read", "experts", "experts_per_token", "expert_shards"):
        assert "MoE" in table[name][1], name
    fit = json.loads((FIX / "cpu-profile.json").read_text())["fit"]
    doc = section("Profiles measured here")
    for part in ("steps", "train", "sync", "runner"):
        for key in fit[part]:
            assert f"`fit.{part}.{key}`" in doc or (f"`{key}`" in doc and f"`fit.{part}." in doc), (part, key)
    said = " ".join(doc.split())
    assert "`+` when the profile predicts more engine time than was measured" in said
    assert "The longest measured sync minus the shortest (max − min" in said
    ms = " ".join(section("Profiles").split())
    assert "is `fit.engine.host_s` and `host_stderr_s` × 1,000 (3 decimals)" in ms
    assert "`fit.engine.full_batch.step_s` × 1,000 (2 decimals)" in ms
