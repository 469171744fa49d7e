"""Notes under the ranking tables (``compare``, ``tune``, ``forecast``): what a reader must know
before trusting a ranking, beyond the figures themselves.

- :func:`updates_note`: runs that make very different numbers of optimizer updates are different
  training runs, not only faster or slower schedules.
- :func:`seed_note` (:func:`draws_lengths`): a policy that drops responses and regenerates them draws the new lengths
  with ``--seed`` (``--regen resample``), so its figures are one draw: on the bundled math-16k,
  ``sortedrl``'s makespan spans 687-773 s over seeds 0 to 7 and falls behind ``partial``'s
  (seed-free) 745.7 s at one of them (README). A single-seed table said nothing of it.
"""

from __future__ import annotations


def count_text(mean: float) -> str:
    """A count, or a mean of counts: whole when it is one (a fixed trace, or draws that agree)."""
    return f"{mean:,.0f}" if mean == int(mean) else f"{mean:,.2f}"


def updates_note(rows: list[tuple[str, float]]) -> str | None:
    """A note when the rows' optimizer updates differ by 2x or more: a run with fewer updates
    trains on larger batches (a sortedrl window that covers its whole loading group makes one
    update per group), which is another training run, not only a faster schedule."""
    if len(rows) < 2:
        return None
    few, many = min(rows, key=lambda r: r[1]), max(rows, key=lambda r: r[1])
    if many[1] < 2 * max(1, few[1]):
        return None
    return (f"updates differ: {few[0]} makes {count_text(few[1])} update{'' if few[1] == 1 else 's'}, "
            f"{many[0]} makes {count_text(many[1])}; fewer updates "
            "mean larger batches, a different training run, not only a faster one")


def trained_note(rows: list[tuple[str, float, float]], rate: str = "the learnable tok/s") -> str | None:
    """A note when a row (label, samples trained, samples in the trace; ``forecast``'s: means
    over its draws) trained under 90% of what the row that trained most did: its makespan covers
    less training (tail_batch's ``responses`` below the group size trains part of each group), so
    it reads faster than it is; the learnable rate, per token trained, compares it fairly
    (``rate``: where to read it)."""
    if len(rows) < 2:
        return None
    most = max(r[1] for r in rows)
    few = [r for r in rows if r[1] < 0.9 * most]
    if not few:
        return None
    said = ", ".join(f"{label} trained {count_text(trained)} of its {count_text(total)} samples "
                     f"({100 * trained / max(1, total):.0f}%)" for label, trained, total in few)
    return (f"trained less: {said}, where another trained {count_text(most)}: a makespan that covers less training "
            f"reads faster than it is; compare {rate}")


def sandbox_note(rows: list[tuple[str, float, float]], pool: int) -> str | None:
    """A note when rows (label, seconds waited for a sandbox, seconds in tool calls) waited for
    a free sandbox longer than their tools ran: the cluster's ``tool_pool`` is the bottleneck
    (the wait shows only in ``--wide``'s ``sandbox_wait_s``)."""
    slow = [(label, wait, tools) for label, wait, tools in rows if wait > tools > 0]
    if not slow:
        return None
    said = ", ".join(f"{label} {wait:,.0f} s against {tools:,.0f} s" for label, wait, tools in slow)
    return (f"sandboxes: trajectories waited longer for a free sandbox than their tool calls ran ({said}): "
            f"the cluster's tool_pool of {pool:,} is the bottleneck; a cluster file's tool_pool raises it")


def draws_lengths(summary: dict, timeline) -> bool:
    """Whether a run's figures are a draw of its seed: it regenerated a response (a span of a
    later attempt than the first) whose length ``--regen resample`` drew. (Its wasted tokens say
    less: filtered groups and discarded responses are wasted with no draw.)"""
    if summary.get("regen") != "resample" or not timeline.count("span"):
        return False
    return bool((timeline.columns("span")["attempt"] > 0).any())


def seed_note(drawn: list[str], rows: int, seed: int) -> str | None:
    """A note when some (``drawn``, their labels: :func:`draws_lengths`) of several ``rows`` are
    draws of the seed: their figures change with ``--seed``; the others' (on a recorded trace)
    do not."""
    if rows < 2 or not drawn:
        return None
    names = ", ".join(drawn[:-1]) + (" and " if len(drawn) > 1 else "") + drawn[-1]
    return (f"one seed: {names} regenerated dropped responses, whose lengths --seed {seed} drew, so "
            f"{'its' if len(drawn) == 1 else 'their'} figures move with the seed; compare a few "
            "seeds before trusting a close ranking")
