"""What ``calibrate --from-*`` prints of the terms it fitted (it printed only "trainer terms from 196
steps; update time MAPE 0.0%"): each term with its value, unit and standard error, or why it has
none; and a term that is not separable has no standard error anywhere (``profile show`` printed
"stderr 2e-12" beside "not separable")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from synthetic_runs import PRESET, calibrate, closed_loop, runner, verl_csv, write

from sortedrl.cli import app


def fitted_block(stdout: str) -> list[list[str]]:
    lines = stdout.splitlines()
    start = lines.index("  fitted terms:")
    return [x.split() for x in lines[start + 1:] if x.startswith("    ")]


def test_calibrate_prints_each_fitted_term_with_its_value_unit_and_stderr(tmp_path):
    paths = [write(tmp_path, f"c{c}.json", closed_loop(c, seed=c)) for c in (2, 8)]
    out = tmp_path / "p.json"
    r = calibrate(paths, out)
    eng = json.loads(out.read_text())["fit"]["engine"]
    units = {"step_fixed_s": "s/step", "step_s_per_seq": "s/sequence/step", "kv_read_s_per_token": "s/KV token/step",
             "prefill_s_per_token": "s/prompt token", "admit_s_per_request": "s/request"}
    want = [[k, f"{t['value']:.4g}", *units[k].split(), "stderr", f"{t['stderr']:.4g}"]
            for k, t in eng["terms"].items()]
    assert eng["terms"]["admit_s_per_request"]["value"] == 0.0  # (at its bound: printed 0)
    want.append(["host_s", f"{eng['host_s']:.4g}", "s/request", "stderr", f"{eng['host_stderr_s']:.4g}"])
    assert eng["unidentified"] == [] and all(t["stderr"] > 0 for t in eng["terms"].values())
    assert fitted_block(r.stdout) == want
    assert r.stdout.splitlines()[-1].startswith("inspect it with `sortedrl profile show")


def summary_only(tmp_path: Path, c: int) -> Path:
    """A file saved without --save-detailed: the totals, the same 40 requests at every level."""
    raw = closed_loop(c)
    keep = {k: raw[k] for k in ("backend", "model_id", "request_rate", "max_concurrency", "duration", "completed")}
    return write(tmp_path, f"s{c}.json", keep, total_input_tokens=sum(raw["input_lens"]),
                 total_output_tokens=sum(raw["output_lens"]))


def test_a_term_not_separable_has_no_standard_error_anywhere(tmp_path):
    """Summary-only files of the same requests: only step_fixed_s is separable. profile show
    listed the others as not separable beside 'stderr 2e-12' and 'stderr 0'."""
    out = tmp_path / "p.json"
    r = calibrate([summary_only(tmp_path, c) for c in (1, 2, 4, 8, 16, 32)], out)
    eng = json.loads(out.read_text())["fit"]["engine"]
    loose = ["step_s_per_seq", "kv_read_s_per_token", "prefill_s_per_token", "admit_s_per_request"]
    assert eng["unidentified"] == loose
    assert [k for k, t in eng["terms"].items() if t["stderr"] is None] == loose
    assert eng["terms"]["step_fixed_s"]["stderr"] > 0
    assert eng["host_s"] == 0.0 and eng["host_stderr_s"] is None
    assert eng["full_batch"]["uncertain"] == {} and eng["uncertain"] == []
    block = fitted_block(r.stdout)
    assert [x[0] for x in block] == ["step_fixed_s", *loose, "host_s"]
    assert all(" ".join(x[-8:]) == "not separable in these files: no standard error" for x in block[1:5])
    assert " ".join(block[5][1:]) == "0 s/request held at 0: no file holds per-request latencies"
    shown = runner.invoke(app, ["profile", "show", str(out)]).stdout.splitlines()
    for name in loose:
        row = next(x for x in shown if x.startswith(f"  {name} "))
        assert row.endswith("vllm-bench fit, not separable: no stderr"), row
    assert "  host work per request: 0.000 ms (held: no file holds per-request latencies, so " \
           "admit_s_per_request holds it)" in shown


def test_calibrate_prints_the_fitted_trainer_terms(tmp_path):
    out = tmp_path / "p.json"
    r = runner.invoke(app, ["calibrate", "--from-metrics", str(verl_csv(tmp_path / "m.csv", range(1, 101))),
                            "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    tr = json.loads(out.read_text())["fit"]["trainer"]
    fix, per_token = tr["terms"]["train_fix"], tr["terms"]["train_per_token"]
    assert fix["value"] == pytest.approx(4.0, rel=1e-9) and per_token["value"] == pytest.approx(4e-5, rel=1e-9)
    lines = r.stdout.splitlines()
    block = [x.split() for x in lines[lines.index("  fitted terms:") + 1:-1]]
    assert block == [["train_fix", f"{fix['value']:.4g}", "s/update", "stderr", "0"],
                     ["train_per_token", f"{per_token['value']:.4g}", "s/token", "stderr", "0"]]
