"""A real run's trace may hold rows that never finished (``finish_reason`` ``abort``, written at
the cap): ``trace stats`` leaves them out of the length statistics and counts them, and ``trace
fit`` says that it takes them as reaching the cap (docs/traces.md, "Traces of real runs")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import TraceError
from sortedrl.traces import Trace, TraceMeta, trace_stats, write_trace

META = TraceMeta(max_response_len=100, group_size=2, source="run")


def _trace(reasons: list[str], **over) -> Trace:
    cols = dict(prompt_id=["a", "a", "b", "b"], sample=[0, 1, 0, 1], prompt_len=[5, 5, 6, 6],
                response_len=[10, 100, 30, 100], truncated=[False, False, False, True],
                step=[0, 0, 1, 1], reward=[1.0, 0.0, 1.0, 0.0], finish_reason=reasons)
    cols.update(over)
    return Trace.from_columns(cols, META)


def test_stats_leave_unfinished_rows_out_of_the_lengths_and_count_them() -> None:
    stats = trace_stats(_trace(["stop", "abort", "stop", "length"]))
    assert stats["count"] == 4 and stats["groups"] == 2  # every row is still a sample
    assert stats["unfinished"] == 1
    assert stats["response_len_mean"] == (10 + 30 + 100) / 3
    assert stats["response_len_max"] == 100 and stats["response_len_min"] == 10
    assert stats["truncated_share"] == 1 / 3  # the one at the cap that the engine stopped
    assert stats["mean_over_cap"] == (140 / 3) / 100
    assert [s["mean_response_len"] for s in stats["per_step"]] == [10.0, 65.0]
    assert [s["samples"] for s in stats["per_step"]] == [2, 2]


def test_a_step_with_only_unfinished_rows_has_no_mean_length() -> None:
    stats = trace_stats(_trace(["abort", "abort", "stop", "length"]))
    assert stats["unfinished"] == 2
    assert stats["per_step"][0] == {"step": 0, "samples": 2, "mean_response_len": None}
    assert stats["response_len_mean"] == 65.0


def test_stats_without_unfinished_rows_are_unchanged() -> None:
    finished = trace_stats(_trace(["stop", "stop", "stop", "length"]))
    bare = trace_stats(_trace(None, finish_reason=None))  # no finish_reason column at all
    assert "unfinished" not in finished and finished == bare
    assert finished["response_len_mean"] == 60.0


def test_a_trace_of_unfinished_rows_only_has_no_statistics() -> None:
    with pytest.raises(TraceError, match="every row is unfinished"):
        trace_stats(_trace(["abort"] * 4, truncated=[False] * 4))


def test_cli_stats_table_and_fit_note(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 200  # 100 groups of 2; a tenth of the rows never finished
    lengths = np.clip(rng.lognormal(np.log(300), 0.8, n).astype(int), 1, 4095)
    reasons = np.where(np.arange(n) % 10 == 9, "abort", "stop")
    lengths = np.where(reasons == "abort", 4096, lengths)
    cols = dict(prompt_id=[f"p{i // 2}" for i in range(n)], sample=[i % 2 for i in range(n)],
                prompt_len=[50] * n, response_len=lengths.tolist(), truncated=[False] * n,
                step=[i // 40 for i in range(n)], finish_reason=reasons.tolist())
    path = tmp_path / "trace.jsonl"
    write_trace(Trace.from_columns(cols, TraceMeta(4096, 2, "run")), path)
    runner = CliRunner()
    shown = runner.invoke(app, ["trace", "stats", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "unfinished (abort, left out)" in shown.output
    fit = runner.invoke(app, ["trace", "fit", str(path), "--out", str(tmp_path / "m.json")])
    assert fit.exit_code == 0, fit.output
    assert ("note: 20 of 200 rows never finished (finish_reason abort): their lengths were "
            "never observed") in fit.output
    plain = dict(cols, finish_reason=["stop"] * n)
    write_trace(Trace.from_columns(plain, TraceMeta(4096, 2, "run")), tmp_path / "plain.jsonl")
    fit = runner.invoke(app, ["trace", "fit", str(tmp_path / "plain.jsonl"), "--out",
                              str(tmp_path / "m2.json")])
    assert fit.exit_code == 0 and "note:" not in fit.output
