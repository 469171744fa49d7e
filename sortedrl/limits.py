"""The bounds every reader of a file or an option checks, in one place.

A value past these is refused with one error line where it is read, because something
downstream would otherwise overflow, hang or allocate without bound: sample ids, lengths and
counts are 32-bit in the timeline and the simulator, trace columns are 64-bit, and a
simulated cluster keeps an engine per GPU group and visits every batch size up to
``max_num_seqs`` (the lower bound's search for an engine's peak rate).
"""

from __future__ import annotations

from sortedrl.errors import ConfigError

INT32_MAX = 2**31 - 1  # sample ids, lengths, counts: the timeline's int32 columns
INT64_MAX = 2**63 - 1  # a trace's integer columns
MAX_SEED = INT64_MAX  # the simulator hashes (seed, sample, attempt) as signed 64-bit numbers
MAX_GPUS = 2**20  # more than any cluster has (engines, GPUs, tensor-parallel degree)
MAX_NUM_SEQS = 2**16  # sequences an engine runs at once (vLLM's default is 256 to 1,024)


def short_repr(value: object, most: int = 40) -> str:
    """``repr(value)``, cut to ``most`` characters (a 400-digit number in an error line)."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most // 2]}... ({len(text)} characters)"


def check_seed(seed: int, flag: str = "--seed", most: int = MAX_SEED, why: str = "") -> int:
    """Refuse a seed outside 0 to ``most`` (``why`` says why the top is lower than
    :data:`MAX_SEED`), named by ``flag``, before anything is drawn or written: NumPy's generator
    refuses a negative one, and the hash of a regenerated response (sim/attempts.py) one above
    2**63 - 1, with a traceback well into a run. Printed plainly: a seed is an identifier."""
    if seed < 0:
        raise ConfigError(f"{flag} must be >= 0, got {short_repr(seed)}")
    if seed > most:
        raise ConfigError(f"{flag} must be at most {most}{why}, got {short_repr(seed)}")
    return seed
