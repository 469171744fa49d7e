"""The user's own task (--dataset with a named or imported reward, --task module:factory) and
the built-in long-tail task, without an engine; test_realrun.py runs --dataset for real."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sortedrl.errors import ConfigError
from sortedrl.realrun.dataset import DatasetTask, contains, exact, get_reward, numeric
from sortedrl.realrun.task import LongSortTask, Problem, SortTask, get_task


def half(prompt: str, answer: str, response: str) -> float:
    return 0.5


def make_task():
    return SortTask(max_items=3)


def write(tmp_path, rows) -> str:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return str(path)


def test_named_rewards():
    assert exact("q", " 1 2 ", "1 2") == 1.0 and exact("q", "1 2", "1 2 3") == 0.0
    assert contains("q", "42", "so it is 42.") == 1.0 and contains("q", "42", "4 2") == 0.0
    assert numeric("q", "1,234", "the answer is 1234.0") == 1.0
    assert numeric("q", "3", "3 or maybe 4") == 0.0  # the last number counts
    assert numeric("q", "0.5", "no number") == 0.0
    assert get_reward("tests.test_realrun_tasks:half")("p", "a", "r") == 0.5


def test_dataset_rows_are_drawn_epoch_by_epoch(tmp_path):
    rows = [{"prompt": f"sort {i} =", "answer": str(i), "id": i} for i in range(5)]
    task = DatasetTask(write(tmp_path, rows), "exact")
    drawn = task.problems(12, seed=3)
    assert sorted(p.answer for p in drawn[:5]) == sorted(p.answer for p in drawn[5:10]) == list("01234")
    assert drawn == task.problems(12, seed=3)  # seeded
    assert task.reward(Problem("sort 3 =", "3"), " 3 ") == 1.0


@pytest.mark.parametrize("rows, message", [
    ([{"prompt": "a", "answer": "b"}, {"answer": "b"}], r"data.jsonl: row 2: field 'prompt' missing or not a string"),
    (['{"prompt": "a", "answer": "b"}', "{oops"], r"data.jsonl: row 2: not valid JSON"),
    (["[1, 2]"], r"data.jsonl: row 1: expected an object with 'prompt' and 'answer'"),
    ([{"prompt": "a", "answer": 3}], r"data.jsonl: row 1: field 'answer' missing or not a string"),
])
def test_bad_dataset_rows_name_the_row(tmp_path, rows, message):
    with pytest.raises(ConfigError, match=message):
        DatasetTask(write(tmp_path, rows))


@pytest.mark.parametrize("call, message", [
    (lambda p: get_task("sort", p, "fuzzy"), r"unknown reward 'fuzzy' \(known: exact, contains, numeric, or module:function\)"),
    (lambda p: get_task("sort", None, "contains"), r"--reward applies to --dataset only"),
    (lambda p: get_task("poetry"), r"unknown task 'poetry' \(known: sort, sort-long, sort-tool, or module:factory\)"),
    (lambda p: get_task("no_such_module_x:make"), r"--task 'no_such_module_x:make': cannot import module"),
    (lambda p: get_task("tests.test_realrun_tasks:nothing"), r"has no 'nothing'"),
    (lambda p: get_task("sort", p, "tests.test_realrun_tasks:nothing"), r"--reward 'tests.test_realrun_tasks:nothing'"),
])
def test_bad_task_and_reward_names(tmp_path, call, message):
    path = write(tmp_path, [{"prompt": "a", "answer": "b"}])
    with pytest.raises(ConfigError, match=message):
        call(path)


def test_task_factory_from_a_module():
    task = get_task("tests.test_realrun_tasks:make_task")
    assert task.name == "sort" and task.max_items == 3
    assert all(1 <= len(p.answer.split()) <= 3 for p in task.problems(50, 0))


def test_long_sort_task_has_a_long_tail():
    """Answer tokens (+ EOS) of 20,000 problems: from a few tokens to past 1,000; with a 1,024
    cap, p99 / p50 is about 10 and a few percent reach the cap."""
    task = LongSortTask()
    sizes = np.array([len(p.answer.split()) + 1 for p in task.problems(20_000, 0)])
    capped = np.minimum(sizes, 1024)
    assert sizes.min() <= 3 and sizes.max() >= 1000
    assert 9.0 <= np.percentile(capped, 99) / np.median(capped) <= 10.5
    assert 0.01 <= (sizes >= 1024).mean() <= 0.05
    p = task.problems(1, 7)[0]
    assert p.answer == " ".join(sorted(p.prompt.split()[1:-1]))
    # graded by the share of positions right, so that groups' rewards differ
    assert task.reward(Problem("sort 3 1 2 =", "1 2 3"), "1 2 3") == 1.0
    assert task.reward(Problem("sort 3 1 2 =", "1 2 3"), "1 3 3") == 2 / 3
    assert task.reward(Problem("sort 3 1 2 =", "1 2 3"), "1 2 3 3") == 3 / 4
    assert task.reward(Problem("sort 3 1 2 =", "1 2 3"), "") == 0.0


@pytest.mark.parametrize("option, value, message", [
    ("--warmup-steps", "-1", "error: --warmup-steps -1: must be >= 0 (0: random weights)"),
    ("--layers", "0", "error: --layers 0: must be >= 1"),
])
def test_model_init_refuses_a_bad_size_in_one_line(tmp_path, option, value, message):
    """--warmup-steps -1 ended in a NumPy traceback ("negative dimensions"); --layers 0 wrote a
    model with no layers."""
    from typer.testing import CliRunner

    from sortedrl.cli import app

    out = tmp_path / "m"
    r = CliRunner().invoke(app, ["model", "init", "--out", str(out), option, value])
    assert r.exit_code == 2 and r.stderr == message + "\n" and not out.exists()
