"""Lengths of regenerated attempts: a fresh response to the same prompt, drawn by the backend.

When a policy drops a response and regenerates it (on-policy SortedRL after a harvest,
``tail_batch``'s deferred prompts, an ``async`` abort with ``keep_tokens=False``), vLLM samples
a *new* response under new weights. Its length is correlated with the old one through the
prompt (responses to one prompt have similar lengths) but not equal to it. How strongly must
come from the user's trace, not from a constant of ours, so the draw is:

- attempt 0 of a sample is the trace's recorded length;
- ``regen="same"``: every attempt repeats the recorded length (the behaviour before regen);
- ``regen="resample"`` (default): attempt ``a > 0`` of sample ``i`` is one of the *other*
  recorded responses of the same prompt (same ``prompt_id``, any step), uniformly, when the
  trace has at least :data:`MIN_OTHERS` of them; otherwise a draw from the per-prompt model
  below.

The per-prompt model is a normal-normal hierarchy on log-lengths: the prompt's mean log-length
``m_p ~ N(mu, sigma_between^2)`` and each response ``log l ~ N(m_p, sigma_within^2)``.
``sigma_within`` is the trace's pooled within-prompt standard deviation (over prompts with two
or more recorded responses); ``sigma_between^2`` is the variance of all log-lengths minus
``sigma_within^2``. A new attempt is drawn from the posterior predictive given the prompt's
``n_p`` recorded responses (mean ``x_p``): ``N(mu + w (x_p - mu), sigma_within^2 + w
sigma_within^2 / n_p)`` with ``w = n_p sigma_between^2 / (n_p sigma_between^2 +
sigma_within^2)``, then rounded and clipped to ``[1, max_response_len]``. A trace where no
prompt was recorded twice (group size 1, no repeated prompts) cannot show its within-prompt
spread; there ``sigma_within^2`` is :data:`WITHIN_SHARE` of the total log-length variance (the
share the bundled synthetic presets assume, ~0.3) and the summary's ``regen_sigma`` says so
by its value. Recorded lengths at the cap count as observed at the cap.

Each draw is a pure function of ``(seed, sample, attempt)`` hashed with BLAKE2b, so no two
attempts share a random stream, a run is deterministic, and the order of draws does not matter.
The object lives in the simulator's backend; a policy never reaches it.
"""

from __future__ import annotations

import hashlib
import math
import struct
import sys
from statistics import NormalDist

import numpy as np

from sortedrl.errors import ConfigError
from sortedrl.policies.view import int_array
from sortedrl.traces.schema import Trace

REGEN_MODES = ("resample", "same")
MIN_OTHERS = 3  # other recorded responses of a prompt needed to resample from them
WITHIN_SHARE = 0.3  # within-prompt share of log-length variance when the trace cannot show it
_UNIT = NormalDist()


def check_regen(regen: str) -> str:
    if regen not in REGEN_MODES:
        raise ConfigError(f"--regen {regen!r}: expected one of {', '.join(REGEN_MODES)}")
    return regen


_HASH = hashlib.blake2b(digest_size=16, person=b"sortedrl-regen")  # copied per draw: 5x cheaper
_PACK = struct.Struct("<qqq").pack  # than a new keyed hash object
_UNPACK = struct.Struct("<QQ").unpack
HASHED_IN_BULK = 32  # draws from which a batch's hashes are compiled (a call costs about 10 us)


def stream_key(seed: int, sample: int, attempt: int) -> bytes:
    """The 16-byte random stream of one attempt: distinct for distinct (seed, sample, attempt)."""
    h = _HASH.copy()
    h.update(_PACK(seed, sample, attempt))
    return h.digest()


def prompt_codes(prompt_id: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(prompt_id, return_inverse=True)``, taken over the runs of equal ids where
    each prompt's rows are contiguous (a trace's usual order: one unique of a row per group,
    not of every row; 0.25 -> 0.05 s at 1M samples)."""
    n = prompt_id.shape[0]
    if n:
        starts = np.flatnonzero(np.concatenate(([True], prompt_id[1:] != prompt_id[:-1])))
        codes, run_code = np.unique(prompt_id[starts], return_inverse=True)
        if codes.size == starts.size:  # (no prompt in two runs)
            return codes, np.repeat(run_code.reshape(-1), np.diff(starts, append=n))
    return np.unique(prompt_id, return_inverse=True)


class AttemptLengths:
    """The length of every attempt of every sample (the simulator's private knowledge).

    Held as arrays, not per-sample Python objects, so that a 10M-sample trace costs tens of
    megabytes here: ``_members`` lists the samples grouped by prompt (ascending within one) and
    ``_bounds[p]:_bounds[p + 1]`` is prompt ``p``'s slice of it."""

    def __init__(self, trace: Trace, seed: int = 0, regen: str = "resample") -> None:
        self.regen = check_regen(regen)
        self.seed = int(seed)
        self._recorded = np.ascontiguousarray(trace.response_len, dtype=np.int64)
        self._recorded_at = memoryview(self._recorded)  # reads Python ints, no copy
        self._cap = int(trace.meta.max_response_len)
        codes, inverse = prompt_codes(trace.prompt_id)
        members = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[members], np.arange(len(codes) + 1))
        self.sigma_within, self._mu, self._between2, self.fitted = self._fit(members, bounds)
        # read one by one per draw: typed arrays give Python ints, faster than NumPy scalars
        index = "i" if len(inverse) < 2**31 else "q"  # 4 bytes a sample where they suffice
        self._members = int_array(index, members)
        self._bounds = int_array("q", bounds)
        self._prompt_of = int_array(index, inverse)

    def _fit(self, members: np.ndarray, bounds: np.ndarray) -> tuple[float, float, float, bool]:
        logs = np.log(np.maximum(self._recorded, 1).astype(float))
        total2 = float(np.var(logs))
        sizes = np.diff(bounds)
        spread = np.zeros(len(sizes))  # per prompt: sum of squared deviations from its mean
        for size in np.unique(sizes[sizes > 1]).tolist():  # prompts of one size as one matrix
            which = np.flatnonzero(sizes == size)
            x = logs[members[bounds[which][:, None] + np.arange(size)]]
            spread[which] = np.sum((x - x.mean(axis=1)[:, None]) ** 2, axis=1)
        sq = 0.0
        for value in spread[sizes > 1].tolist():  # summed in prompt order, as one loop would
            sq += value
        dof = int(np.sum(sizes[sizes > 1] - 1))
        fitted = dof > 0
        within2 = sq / dof if fitted else WITHIN_SHARE * total2
        return math.sqrt(within2), float(logs.mean()), max(total2 - within2, 0.0), fitted

    def length(self, sample: int, attempt: int) -> int:
        """The response length of ``attempt`` (0 = the recorded one) of ``sample``."""
        if attempt == 0 or self.regen == "same":
            return self._recorded_at[sample]
        h = _HASH.copy()  # stream_key, inlined: this runs once per regenerated attempt
        h.update(_PACK(self.seed, sample, attempt))
        hi, lo = _UNPACK(h.digest())
        # two 53-bit uniforms in (0, 1): never exactly 0 or 1, so inv_cdf is finite
        u_pick, u_draw = ((hi >> 11) + 0.5) / 2.0**53, ((lo >> 11) + 0.5) / 2.0**53
        prompt = self._prompt_of[sample]
        start, end = self._bounds[prompt], self._bounds[prompt + 1]
        others = end - start - 1
        if others >= MIN_OTHERS:
            # the k-th of the other members: members ascend, so skip the sample itself
            k = start + int(u_pick * others)
            pick = self._members[k]
            if pick >= sample:
                pick = self._members[k + 1]
            return self._recorded_at[pick]
        return self._model_draw(self._members[start:end].tolist(), u_draw)

    def lengths(self, samples: list[int], attempts: list[int]) -> list[int]:
        """:meth:`length` of each (sample, attempt), the same draws: the hashes one by one, the
        pick among the prompt's other responses for all at once."""
        if self.regen == "same" or not any(attempts):
            return [self._recorded_at[i] for i in samples]
        words = self._digests(samples, attempts)
        u_pick = ((words[:, 0] >> 11) + 0.5) / 2.0**53  # (as length's: exact in float64)
        sample = np.asarray(samples, dtype=np.int64)
        prompt = np.frombuffer(self._prompt_of, dtype=f"i{self._prompt_of.itemsize}")[sample]
        bounds = np.frombuffer(self._bounds, dtype=np.int64)
        start, others = bounds[prompt], bounds[prompt + 1] - bounds[prompt] - 1
        ok = others >= MIN_OTHERS
        members = np.frombuffer(self._members, dtype=f"i{self._members.itemsize}")
        k = start + (u_pick * others).astype(np.int64)
        k = np.where(ok, k, 0)  # (not read where a prompt has too few others)
        pick = members[k]
        pick = np.where(pick >= sample, members[np.minimum(k + 1, members.size - 1)], pick)
        out = self._recorded[pick].tolist()
        for j in np.flatnonzero(~ok | (np.asarray(attempts) == 0)).tolist():
            out[j] = self.length(samples[j], attempts[j])
        return out

    def _digests(self, samples: list[int], attempts: list[int]) -> np.ndarray:
        """The two words of each ``(sample, attempt)``'s digest (``stream_key``'s), compiled
        for a batch where numba is loaded (the compiled pool loop runs: 100k samples up; in a
        smaller run its import, about 0.3 s, would cost more than the draws save)."""
        seed = self.seed
        if (len(samples) >= HASHED_IN_BULK and "numba" in sys.modules and -2**63 <= seed < 2**63
                and len(samples) == len(attempts)):
            from sortedrl.sim import regen_hash
            return regen_hash.digests(seed, samples, attempts)
        copy, pack, digests = _HASH.copy, _PACK, []
        for i, a in zip(samples, attempts, strict=True):
            h = copy()
            h.update(pack(seed, i, a))
            digests.append(h.digest())
        return np.frombuffer(b"".join(digests), dtype="<u8").reshape(-1, 2)

    def _model_draw(self, members: list[int], u: float) -> int:
        n = len(members)
        x = math.fsum(math.log(max(int(self._recorded[j]), 1)) for j in members) / n
        within2, between2 = self.sigma_within**2, self._between2
        w = n * between2 / (n * between2 + within2) if within2 > 0 else 1.0
        mean = self._mu + w * (x - self._mu)
        sd = math.sqrt(within2 + w * within2 / n)
        log_len = mean + sd * _UNIT.inv_cdf(u)
        return int(min(max(round(math.exp(min(log_len, 50.0))), 1), self._cap))
