"""The built-in verifiable tasks: sort a list of digits, graded by exact match.

``sort 7 3 9 1 =`` must be answered ``1 3 7 9``. The list length is long-tailed (a geometric
draw, capped), so response lengths are long-tailed too: most answers are a few tokens, a few are
several times longer, which is the rollout-scheduling problem in miniature. Prompts are generated
on the fly from a seed; the reward is 1.0 for an exact match of the answer and 0.0 otherwise.
The vocabulary is tiny (digits, two words, specials), so a locally trained word-level tokenizer
covers it exactly.

Two sizes share that vocabulary (so one tiny model serves both): ``sort`` (a geometric number
of items, mean 5, at most 24: responses of a few tokens) and ``sort-long``, whose list length is
lognormal (median 100 items, sigma 1.2, at most 2,000), so responses run from a few tokens to
well past 1,000 and a few percent reach a 1,024-token cap, the long tail of reasoning RL
(p99/p50 of about 10), graded by the share of positions right (an exact match of hundreds of
digits is out of a tiny model's reach, and a reward that is 0 everywhere teaches nothing). ``--task module:factory`` plugs in any object with ``name``,
``problems(n, seed)``, ``reward(problem, response)`` and ``corpus(n, seed)``; ``--dataset`` is
:class:`sortedrl.realrun.dataset.DatasetTask`. :func:`grader` turns a task's ``reward`` into the
real runner's reward of a sample (0 for a response cut at the length cap).
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

    def sizes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(self.max_items, rng.geometric(self.p, size=n))

    def problems(self, n: int, seed: int) -> list[Problem]:
        rng = np.random.default_rng(seed)
        sizes = self.sizes(rng, n)
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


class LongSortTask(SortTask):
    """Sorting digit lists whose length is lognormal: responses from a few tokens to >1,000."""

    name = "sort-long"

    def __init__(self, max_items: int = 2000, median_items: float = 100.0, sigma: float = 1.2) -> None:
        self.max_items, self.median, self.sigma = max_items, median_items, sigma

    def sizes(self, rng: np.random.Generator, n: int) -> np.ndarray:
        drawn = rng.lognormal(np.log(self.median), self.sigma, size=n)
        return np.clip(np.rint(drawn), 1, self.max_items).astype(np.int64)

    def reward(self, problem: Problem, response: str) -> float:
        """The share of positions right: a tiny model never sorts hundreds of digits exactly, so
        an exact match would give every group the same reward (0) and GRPO no signal."""
        want, got = problem.answer.split(), response.split()
        return sum(a == b for a, b in zip(want, got, strict=False)) / max(len(want), len(got))


TASKS = {"sort": SortTask, "sort-long": LongSortTask}


def get_task(name: str, dataset: str | None = None, reward: str = "exact"):
    """A built-in task by name, ``module:factory``, or the user's ``--dataset`` file."""
    from sortedrl.errors import ConfigError

    if dataset is not None:
        from sortedrl.realrun.dataset import DatasetTask

        return DatasetTask(dataset, reward)
    if reward != "exact":
        raise ConfigError("--reward applies to --dataset only (a built-in or module task grades itself)")
    if name in TASKS:
        return TASKS[name]()
    if name == "sort-tool":  # multi-turn, with the tool server (realrun/agent.py)
        from sortedrl.realrun.agent import SortToolTask

        return SortToolTask()
    if ":" in name:
        from sortedrl.realrun.dataset import load_object

        task = load_object(name, "--task")()
        missing = [m for m in ("name", "problems", "reward", "corpus") if not hasattr(task, m)]
        if missing:
            raise ConfigError(f"--task {name!r}: the task has no {', '.join(missing)}")
        return task
    raise ConfigError(f"unknown task {name!r} (known: {', '.join(TASKS)}, sort-tool, or module:factory)")


def unknown_word(tok, problems: list) -> tuple[int, str] | None:
    """The first problem (its index, and ``prompt`` or ``answer``) that ``tok`` turns into its
    unknown token, or None: a run would train on ``<unk>`` and grade nothing right. A byte-level
    tokenizer (no unknown token) reads every text."""
    unk = tok.unk_token_id
    if unk is None or not problems:
        return None
    ids = {field: tok([getattr(p, field) for p in problems], add_special_tokens=False)["input_ids"]
           for field in ("prompt", "answer")}
    for j in range(len(problems)):
        for field in ("prompt", "answer"):
            if unk in ids[field][j]:
                return j, field
    return None


def check_task_words(tok, problems: list, task: str, model: str) -> None:
    """One error line, before the run, when the tokenizer of ``model`` cannot read a problem of
    ``task`` (the --dataset task names its row instead: dataset.py)."""
    from sortedrl.errors import ConfigError

    found = unknown_word(tok, problems)
    if found is not None:
        j, field = found
        text = getattr(problems[j], field)
        raise ConfigError(
            f"--task {task}: problem {j + 1} of the run ({field} {text[:40]!r}): the tokenizer of "
            f"--model {model} does not know every word of it (they would become {tok.unk_token}); "
            f"make the model with `sortedrl model init --task {task}`, or give a model whose "
            "tokenizer covers the task's words")


def grader(task, problems: list, tok, group_size: int, words: bool = False):
    """The reward of sample ``i``'s response: the task grades the decoded text of a response
    that ended by itself; a response cut at the length cap gets 0."""
    eos = tok.eos_token_id

    def grade(i: int, tokens: list[int], reason: str) -> float:
        if reason != "stop":
            return 0.0
        body = tokens[:-1] if eos is not None and tokens and tokens[-1] == eos else tokens
        return task.reward(problems[i // group_size], decode(tok, body, words))

    return grade


def decode(tok, ids: list[int], words: bool) -> str:
    """The response's text. The tiny model's tokenizer has one token per word and no spaces, so
    its ``decode`` glues the words together: with ``words`` they are joined by spaces, as the
    task wrote them."""
    if words:
        return " ".join(tok.convert_ids_to_tokens(ids, skip_special_tokens=True))
    return tok.decode(ids, skip_special_tokens=True)
