"""``trace stats`` and ``trace fit`` print the user's text as it is and never cut a value:
square brackets in a source or a file name were read as rich markup (``[/]`` a traceback, ``[v2]``
dropped), and a rich table cut a long source, and at 20 columns its numbers, to an ellipsis.
Each test pins the exact lines printed.

Run: pytest tests/test_trace_stats_display.py
"""

from __future__ import annotations

import json

from sortedrl.traces import read_trace, trace_stats
from sortedrl.traces.io import BUNDLED
from tests.cli_helpers import fittable_trace as _fittable
from tests.cli_helpers import four_sample_trace as _trace
from tests.cli_helpers import invoke_ok as _ok

LONG = ("s3://my-bucket/experiments/2025-01-15/grpo-qwen3-8b-math/rollouts/"
        "step_000100_to_000200/requests.csv")


# -- square brackets are text, not rich markup ----------------------------------------------


def test_trace_stats_shows_a_source_with_brackets_as_it_is(tmp_path):
    path = _trace(tmp_path / "t.jsonl", "run [/] x [bold]y[/bold]")
    rows = _ok(["trace", "stats", str(path)], env={"COLUMNS": "80"}).splitlines()
    assert rows[4] == "│ source                  │ run [/] x [bold]y[/bold] │       │"


def test_a_bracketed_file_name_is_the_source_trace_stats_shows(tmp_path):
    table = tmp_path / "rollouts[v2].csv"
    table.write_text("p,r\n5,10\n6,12\n")
    out = tmp_path / "t.jsonl"
    _ok(["trace", "import", str(table), "--prompt-len-col", "p", "--response-len-col", "r",
         "--group-size", "2", "--out", str(out)])
    rows = _ok(["trace", "stats", str(out)], env={"COLUMNS": "80"}).splitlines()
    assert rows[4] == "│ source                  │ rollouts[v2].csv │       │"


def test_trace_fit_prints_bracketed_names_as_they_are(tmp_path):
    path = _fittable(tmp_path / "r[v2].jsonl")
    (tmp_path / "a[").mkdir()
    for out in (tmp_path / "model[v2].json", tmp_path / "a[" / "]b.json"):  # (.../a[/]b.json)
        lines = _ok(["trace", "fit", str(path), "--out", str(out), "--force"]).splitlines()
        assert lines[0].strip() == "length model of r[v2].jsonl"
        assert lines[-1] == f"wrote {out}"
        assert json.loads(out.read_text())["source"] == "r[v2].jsonl"


# -- trace stats never cuts a value ---------------------------------------------------------


def test_a_long_source_folds_in_its_cell_when_piped(tmp_path):
    path = _trace(tmp_path / "t.jsonl", LONG)
    rows = _ok(["trace", "stats", str(path)], env={"COLUMNS": "80"}).splitlines()
    assert rows[4:7] == [
        "│ source                  │ s3://my-bucket/experiments/2025-01-15/grpo │       │",
        "│                         │ -qwen3-8b-math/rollouts/step_000100_to_000 │       │",
        "│                         │                           200/requests.csv │       │",
    ]
    assert "…" not in "".join(rows)


TITLE = f"{'trace statistics':^45}\n"  # (rich centres the title, spaces after it too)
NARROW = TITLE + """\
┏━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━┓
┃ statistic               ┃   value ┃ unit  ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━┩
│ source                  │ s3://my │       │
│                         │ -bucket │       │
│                         │ /experi │       │
│                         │ ments/2 │       │
│                         │ 025-01- │       │
│                         │ 15/grpo │       │
│                         │ -qwen3- │       │
│                         │ 8b-math │       │
│                         │ /rollou │       │
│                         │ ts/step │       │
│                         │ _000100 │       │
│                         │ _to_000 │       │
│                         │ 200/req │       │
│                         │ uests.c │       │
│                         │      sv │       │
│ samples                 │       4 │ count │
│ distinct prompts        │       2 │ count │
│ groups (prompt x step)  │       2 │ count │
│ steps                   │       - │ count │
│ group size n            │       2 │ count │
│ max response len (cap)  │  16,384 │ tok   │
│ response len mean       │ 8,578.2 │ tok   │
│ response len min        │     345 │ tok   │
│ response len max        │  16,384 │ tok   │
│ response len p50        │   8,792 │ tok   │
│ response len p75        │  16,384 │ tok   │
│ response len p90        │  16,384 │ tok   │
│ response len p95        │  16,384 │ tok   │
│ response len p99        │  16,384 │ tok   │
│ p99/p50 (not truncated) │   1.542 │ x     │
│ truncated share         │    50.0 │ %     │
│ mean / cap              │   0.524 │ ratio │
│ prompt len mean         │    18.0 │ tok   │
└─────────────────────────┴─────────┴───────┘
columns are defined in docs/metrics.md; --json prints every field
"""


def test_at_20_columns_every_number_and_label_stays_whole(tmp_path):
    """Narrower than the table: the source folds, nothing else narrows (the terminal wraps the
    lines, as the plain tables are left whole)."""
    path = _trace(tmp_path / "t.jsonl", LONG)
    assert _ok(["trace", "stats", str(path)], env={"COLUMNS": "20"}) == NARROW


def test_a_narrow_per_step_table_keeps_its_numbers_whole(tmp_path):
    trace = BUNDLED / "math-16k.jsonl"
    rows = _ok(["trace", "stats", str(trace)], env={"COLUMNS": "20"}).splitlines()
    at = rows.index("┃ step ┃ samples (count) ┃ mean response len (tok) ┃")
    steps = trace_stats(read_trace(trace))["per_step"]
    assert [s["samples"] for s in steps] == [512] * 4
    assert rows[at + 2:at + 7] == [
        *(f"│ {s['step']:>4} │             512 │ {s['mean_response_len']:>23,.1f} │" for s in steps),
        "└──────┴─────────────────┴─────────────────────────┘"]
