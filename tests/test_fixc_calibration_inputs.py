"""Bad input to ``calibrate --from-vllm-bench / --from-metrics`` and ``profile show``: one
``error:`` line naming the file and field, exit 2, no RuntimeWarning, no profile written.

- an earlier profile given as ``--cluster`` whose ``fit``, ``sources`` or ``measured_terms`` was
  edited by hand (each was a traceback).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sortedrl.cli import app

FIX = Path(__file__).resolve().parent / "fixtures"
BENCH, METRICS = FIX / "vllm_bench", FIX / "metrics" / "verl_metrics.jsonl"
PRESET = "h100-llama3.1-8b-1gpu-32seq"
runner = CliRunner()


def invoke(args: list[str]):
    """Run the CLI; a RuntimeWarning (numpy's overflow or divide) fails the test."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        r = runner.invoke(app, args)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    return r


def refused(args: list[str], out: Path) -> str:
    r = invoke(args)
    assert r.exit_code == 2 and not out.exists(), r.output
    assert r.output.count("\n") == 1 and r.output.startswith("error: ") and "Traceback" not in r.output
    return r.output.strip()


def calibrate_bench(tmp_path: Path, files: list, cluster: str = PRESET) -> str:
    out = tmp_path / "p.json"
    return refused(["calibrate", "--from-vllm-bench", *map(str, files), "--cluster", cluster,
                    "--out", str(out)], out)


def bench(tmp_path: Path, edit, name: str = "b.json", source: str = "c4-r0.json") -> Path:
    raw = json.loads((BENCH / source).read_text())
    edit(raw)
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return path


# -- 1. an earlier profile as --cluster ----------------------------------------------------------------


@pytest.fixture
def metrics_profile(tmp_path) -> dict:
    out = tmp_path / "base.json"
    r = invoke(["calibrate", "--from-metrics", str(METRICS), "--cluster", PRESET, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return json.loads(out.read_text())


@pytest.mark.parametrize(("edit", "message"), [
    ({"fit": "trainer"}, "field 'fit': expected an object, got 'trainer'"),
    ({"fit": [1, 2]}, "field 'fit': expected an object, got [1, 2]"),
    ({"sources": 3}, "field 'sources': expected a list of strings, got 3"),
    ({"sources": None}, "field 'sources': expected a list of strings, got None"),
    ({"measured_terms": 5}, "field 'measured_terms': expected a list of strings, got 5"),
    ({"measured_terms": ["t_fix", 3]}, "field 'measured_terms': expected a list of strings, got ['t_fix', 3]"),
    ({"measured_terms": [["t_fix"]]}, "field 'measured_terms': expected a list of strings, got [['t_fix']]"),
    ({"measured_terms": ["t_fix", "bogus"]}, "field 'measured_terms': not a cost term: 'bogus'"),
    ({"fit": {"engine": {"files": [{}]}}},
     "field 'fit.engine' is not as `sortedrl calibrate` writes it (KeyError: 'path')"),
    ({"fit": {"trainer": 5}},
     "field 'costs' or 'fit' is not as `sortedrl calibrate` writes it (AttributeError: 'int' object "
     "has no attribute 'get')"),
])
def test_a_hand_edited_base_profile_is_one_error_line_before_any_fit(tmp_path, metrics_profile, edit, message):
    base = tmp_path / "edited.json"
    base.write_text(json.dumps({**metrics_profile, **edit}))
    out = tmp_path / "p.json"
    for inputs in (["--from-metrics", str(METRICS)], ["--from-vllm-bench", str(BENCH / "c4-r0.json")]):
        got = refused(["calibrate", *inputs, "--cluster", str(base), "--out", str(out)], out)
        assert got == f"error: {base}: {message}"


def test_a_kept_engine_record_without_its_optional_lists_still_summarises(tmp_path):
    """A record kept from the base profile is summarised as `profile show` reads it (it was a
    KeyError after the profile was written)."""
    base = tmp_path / "base.json"
    r = invoke(["calibrate", "--from-vllm-bench", str(BENCH / "c4-r0.json"), "--cluster", PRESET,
                "--out", str(base)])
    assert r.exit_code == 0, r.output
    raw = json.loads(base.read_text())
    del raw["fit"]["engine"]["unidentified"], raw["fit"]["engine"]["uncertain"]
    base.write_text(json.dumps(raw))
    out = tmp_path / "p.json"
    r = invoke(["calibrate", "--from-metrics", str(METRICS), "--cluster", str(base), "--out", str(out)])
    assert r.exit_code == 0, r.output
    error = raw["fit"]["engine"]["files"][0]["error_pct"]
    assert r.output.splitlines()[:2] == [
        f"wrote {out}", f"  engine terms from 1 benchmark file(s); duration error: c4-r0.json {error:+.1f}%"]
    assert json.loads(out.read_text())["sources"] == [str(BENCH / "c4-r0.json"), str(METRICS)]
