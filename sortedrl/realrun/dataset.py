"""A user's own task: prompts and answers from a JSONL file, graded by a named reward.

``--dataset FILE.jsonl`` holds one object per line with ``prompt``, ``answer`` and an optional
``id``; ``--reward`` grades a response against the answer:

- ``exact``: 1.0 when the stripped response equals the stripped answer;
- ``contains``: 1.0 when the answer occurs in the response;
- ``numeric``: 1.0 when the last number in the response equals the answer's number (relative
  tolerance 1e-6);
- ``module:function``: ``function(prompt, answer, response) -> float``, imported from the
  user's module.

Problems are drawn epoch by epoch, each epoch a seeded permutation of the rows, so a run of more
prompts than the file holds revisits every row before any row twice. A response that hit the
length cap is graded like any other; the runner gives truncated responses 0 (see ``run.py``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sortedrl import jsonio
from sortedrl.errors import ConfigError
from sortedrl.realrun.task import Problem, unknown_word
from sortedrl.user_code import import_user_module

Reward = Callable[[str, str, str], float]
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def exact(prompt: str, answer: str, response: str) -> float:
    return 1.0 if response.strip() == answer.strip() else 0.0


def contains(prompt: str, answer: str, response: str) -> float:
    return 1.0 if answer.strip() and answer.strip() in response else 0.0


def numeric(prompt: str, answer: str, response: str) -> float:
    found = _NUMBER.findall(response.replace(",", ""))
    want = _NUMBER.findall(answer.replace(",", ""))
    if not found or not want:
        return 0.0
    got, target = float(found[-1]), float(want[-1])
    return 1.0 if math.isclose(got, target, rel_tol=1e-6, abs_tol=1e-12) else 0.0


REWARDS: dict[str, Reward] = {"exact": exact, "contains": contains, "numeric": numeric}


def load_object(spec: str, what: str) -> object:
    """``module:name`` imported; one error line when it is not there."""
    module, name = import_user_module(spec, what)
    obj = getattr(module, name, None)
    if obj is None:
        raise ConfigError(f"{what} {spec!r}: module {module.__name__!r} has no {name!r}")
    if not callable(obj):
        raise ConfigError(f"{what} {spec!r}: {name!r} is not callable")
    return obj


def get_reward(name: str) -> Reward:
    if name in REWARDS:
        return REWARDS[name]
    if ":" in name:
        return load_object(name, "--reward")
    raise ConfigError(f"unknown reward {name!r} (known: {', '.join(REWARDS)}, or module:function)")


class DatasetTask:
    """Problems from the user's JSONL file, graded by ``reward``."""

    def __init__(self, path: str | Path, reward: str = "exact") -> None:
        self.path = Path(path)
        self.name = f"dataset:{self.path.name}"
        self.grade = get_reward(reward)
        self.line_numbers, self.rows = read_rows(self.path)

    def problems(self, n: int, seed: int) -> list[Problem]:
        rng = np.random.default_rng(seed)
        out: list[Problem] = []
        while len(out) < n:
            out += [self.rows[i] for i in rng.permutation(len(self.rows))]
        return out[:n]

    def reward(self, problem: Problem, response: str) -> float:
        value = float(self.grade(problem.prompt, problem.answer, response))
        if not math.isfinite(value):
            raise ConfigError(f"--reward: returned {value} for prompt {problem.prompt[:40]!r}")
        return value

    def corpus(self, n: int, seed: int) -> list[str]:
        """At least ``n`` lines, every row among them: a tokenizer trained on them covers the file."""
        return [f"{p.prompt} {p.answer}" for p in self.problems(max(n, len(self.rows)), seed)]

    def check_tokens(self, tok, model: str) -> None:
        """One error line, naming the first row, when the tokenizer of ``model`` turns a prompt
        or answer into its unknown token: a run would train on ``<unk>`` and grade nothing right."""
        found = unknown_word(tok, self.rows)
        if found is not None:
            j, field = found
            raise ConfigError(
                f"{self.path}: row {self.line_numbers[j]}: the tokenizer of --model {model} does not "
                f"know every word of its {field} (they would become {tok.unk_token}); make the model "
                f"with `sortedrl model init --dataset {self.path}`, or give a model whose tokenizer "
                "covers the data")


def read_rows(path: Path) -> tuple[list[int], list[Problem]]:
    """The file's rows, and the line number of each."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()  # (after a byte-order mark)
    except FileNotFoundError:
        raise ConfigError(f"--dataset {path}: file not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--dataset {path}: cannot read ({e})") from None
    rows, numbers = [], []
    for k, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = jsonio.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path}: row {k}: not valid JSON ({e.msg})") from None
        if not isinstance(row, dict):
            raise ConfigError(f"{path}: row {k}: expected an object with 'prompt' and 'answer'")
        for field in ("prompt", "answer"):
            if not isinstance(row.get(field), str):
                raise ConfigError(f"{path}: row {k}: field {field!r} missing or not a string")
        rows.append(Problem(row["prompt"], row["answer"]))
        numbers.append(k)
    if not rows:
        raise ConfigError(f"--dataset {path}: no rows")
    return numbers, rows
