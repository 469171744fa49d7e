"""The toy verifiable task: sort a list of digits, graded by exact match.

``sort 7 3 9 1 =`` must be answered ``1 3 7 9``. The list length is long-tailed (a geometric
draw, capped), so response lengths are long-tailed too: most answers are a few tokens, a few are
several times longer, which is the rollout-scheduling problem in miniature. Prompts are generated
on the fly from a seed; the reward is 1.0 for an exact match of the answer and 0.0 otherwise.
The vocabulary is tiny (digits, two words, specials), so a locally trained word-level tokenizer
covers it exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
WORDS = ["sort", "="] + [str(d) for d in range(10)]


@dataclass(frozen=True)
class Problem:
    prompt: str
    answer: str


class SortTask:
    """Sorting digit lists of long-tailed length (1 to ``max_items``)."""

    name = "sort"

    def __init__(self, max_items: int = 24, mean_items: float = 5.0) -> None:
        self.max_items = max_items
        self.p = 1.0 / mean_items

    def problems(self, n: int, seed: int) -> list[Problem]:
        rng = np.random.default_rng(seed)
        sizes = np.minimum(self.max_items, rng.geometric(self.p, size=n))
        out = []
        for k in sizes:
            items = rng.integers(0, 10, size=int(k))
            out.append(Problem("sort " + " ".join(map(str, items)) + " =",
                               " ".join(map(str, sorted(items.tolist())))))
        return out

    def reward(self, problem: Problem, response: str) -> float:
        return 1.0 if response.strip() == problem.answer else 0.0

    def corpus(self, n: int, seed: int) -> list[str]:
        """Lines to train the tokenizer on (and to warm-start the model)."""
        return [f"{p.prompt} {p.answer}" for p in self.problems(n, seed)]


TASKS = {"sort": SortTask}


def get_task(name: str) -> SortTask:
    from sortedrl.errors import ConfigError

    if name not in TASKS:
        raise ConfigError(f"unknown task {name!r} (known: {', '.join(TASKS)})")
    return TASKS[name]()
