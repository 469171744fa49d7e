"""Notes under the ranking tables (``compare``, ``tune``, ``forecast``): what a reader must know
before trusting a ranking, beyond the figures themselves.

- :func:`updates_note`: runs that make very different numbers of optimizer updates are different
  training runs, not only faster or slower schedules.
- :func:`seed_note`: a policy that drops responses and regenerates them draws the new lengths
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


def seed_note(rows: list[tuple[str, dict]]) -> str | None:
    """A note when some of several rows (label, summary) regenerated responses with lengths
    drawn by the seed (``wasted_tokens`` > 0: attempts dropped and generated again, under
    ``--regen resample``): their figures change with ``--seed``; the others' (on a recorded
    trace) do not."""
    drawn = [label for label, s in rows if s.get("regen") == "resample" and s.get("wasted_tokens", 0) > 0]
    if len(rows) < 2 or not drawn:
        return None
    names = ", ".join(drawn[:-1]) + (" and " if len(drawn) > 1 else "") + drawn[-1]
    return (f"one seed: {names} regenerated dropped responses, whose lengths --seed "
            f"{rows[0][1].get('seed', 0)} drew, so {'its' if len(drawn) == 1 else 'their'} figures "
            "move with the seed; compare a few seeds before trusting a close ranking")
