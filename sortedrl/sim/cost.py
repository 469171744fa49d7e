"""The cost model: how long a decode step, a prefill, an update and a weight sync take.

The simulator never steps token by token, so the decode cost must be summable in closed form.
A decode step of a batch of ``B`` sequences holding ``S`` KV tokens costs the roofline

    t_step(B, S) = t_fix + s1·B + max(a0 + a1·S, c1·B)

where ``a0 = W / (BW·MBU)`` reads the weights, ``a1 = kv / (BW·MBU)`` reads one KV token and
``c1 = 2·P / (F·MFU)`` is the compute of one sequence (all per engine, after tensor parallelism),
and ``s1`` is a per-sequence host overhead of each step (scheduling, sampling, output
processing) that matters for small models on CPU and is 0 in the GPU presets.
Between two membership changes ``B`` is constant and ``S`` grows by ``B`` per step, so the memory
term is linear in the step index and the sum of ``k`` steps is a piecewise quadratic:
:meth:`CostModel.decode_time` evaluates it and :meth:`CostModel.decode_steps_within` inverts it.

Deliberate simplifications, each to be absorbed by calibration: paged-block rounding of the KV
cache is ignored (block size 1), prefill is an engine-wide stall (either its own pass, or, with
``prefill_in_step``, extra time of the next decode step, as vLLM V1 batches it) and never
chunked, and training cost is linear in tokens (6·P FLOPs per token, plus 2·P per extra forward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class CostModel:
    """Per-engine decode/prefill costs and per-update training/sync costs, in seconds."""

    t_fix: float  # fixed cost of one decode step or prefill (launch + scheduler), s
    a0: float  # weight read per step, s
    a1: float  # KV read per cached token per step, s/token
    c1: float  # compute per sequence per decode step, s/sequence
    p1: float  # prefill compute per token, s/token
    p2: float  # prefill attention per (query, key) pair, s/pair
    train_per_token: float  # trainer time per trained token (prompt + response), s/token
    train_fix: float  # fixed time per update (optimizer step, offload/onload), s
    sync_s: float  # one weight sync, s
    s1: float = 0.0  # host overhead per running sequence per decode step, s/sequence
    # True: prefills ride in the next decode step, as vLLM V1 schedules them: prefill() is the
    # step's extra time and a new sample's first token comes with that step. False: a prefill is
    # its own engine pass that yields the first token.
    prefill_in_step: bool = False
    p0: float = 0.0  # cost of admitting one request (vLLM add_request, batch insertion), s
    pn: float = 0.0  # fixed extra cost of a step that starts any new request, s
    f0: float = 0.0  # host time a policy event (finish, idle) holds the engine's loop, s
    train_padded: bool = False  # the trainer pads a batch to its longest sequence
    # Measured per-step fixed time for batch sizes 1..len (a calibrated lookup table, as vidur
    # does); replaces t_fix + s1·B when given. Beyond the table it extends the last slope.
    step_table: tuple[float, ...] | None = None

    def fixed(self, batch: int) -> float:
        """The part of a decode step that depends only on the batch size."""
        tab = self.step_table
        if tab is None:
            return self.t_fix + self.s1 * batch
        if batch <= len(tab):
            return tab[batch - 1] if batch > 0 else tab[0]
        slope = (tab[-1] - tab[-2]) if len(tab) > 1 else 0.0
        return tab[-1] + slope * (batch - len(tab))

    # -- decode ----------------------------------------------------------------------------

    def decode_step(self, batch: int, kv_tokens: int) -> float:
        """One decode step of ``batch`` sequences that hold ``kv_tokens`` KV tokens in total."""
        return self.fixed(batch) + max(self.a0 + self.a1 * kv_tokens, self.c1 * batch)

    def _split(self, batch: int, kv0: int) -> tuple[float, float, float, int]:
        """(alpha, beta, compute, j*): step j costs t_fix + max(alpha + beta·j, compute).

        ``j*`` is the number of leading steps where the compute term wins, found with the same
        comparison :meth:`decode_step` makes, so that the closed form and a step-by-step sum
        pick identical branches.
        """
        alpha = self.a0 + self.a1 * kv0
        beta = self.a1 * batch
        comp = self.c1 * batch
        if alpha >= comp:
            return alpha, beta, comp, 0
        if beta <= 0.0:
            return alpha, beta, comp, -1  # compute-bound forever
        j = max(0, math.ceil((comp - alpha) / beta))
        while j > 0 and alpha + beta * (j - 1) >= comp:
            j -= 1
        while alpha + beta * j < comp:
            j += 1
        return alpha, beta, comp, j

    def decode_time(self, steps: int, batch: int, kv0: int) -> float:
        """Time of ``steps`` decode steps at constant ``batch`` starting from ``kv0`` KV tokens."""
        if steps <= 0:
            return 0.0
        alpha, beta, comp, j = self._split(batch, kv0)
        fixed = self.fixed(batch)
        if j < 0 or steps <= j:
            return steps * (fixed + comp)
        mem_steps = steps - j
        tri = (steps * (steps - 1) - j * (j - 1)) // 2  # sum of step indices j .. steps-1
        return j * (fixed + comp) + mem_steps * (fixed + alpha) + beta * tri

    def decode_steps_within(self, elapsed: float, batch: int, kv0: int) -> int:
        """The largest ``k`` with ``decode_time(k) <= elapsed``: steps completed after ``elapsed``."""
        if elapsed <= 0.0:
            return 0
        alpha, beta, comp, j = self._split(batch, kv0)
        fixed = self.fixed(batch)
        per = fixed + comp
        if j < 0:
            k = int(elapsed // per)
        elif elapsed < j * per:
            k = int(elapsed // per)
        else:
            rest = elapsed - j * per
            lin = fixed + alpha + beta * j  # cost of step j
            if beta <= 0.0:
                m = int(rest // lin)
            else:
                # (beta/2) m^2 + (lin - beta/2) m - rest <= 0
                b = lin - beta / 2.0
                m = int((-b + math.sqrt(b * b + 2.0 * beta * rest)) / beta)
            k = j + max(0, m)
        while k > 0 and self.decode_time(k, batch, kv0) > elapsed:
            k -= 1
        while self.decode_time(k + 1, batch, kv0) <= elapsed:
            k += 1
        return k

    # -- prefill, training, sync -----------------------------------------------------------

    def prefill(self, tokens: int, pairs: int, requests: int = 0) -> float:
        """Prefill ``tokens`` new tokens of ``requests`` requests with ``pairs`` causal (query,
        key) attention pairs."""
        if self.prefill_in_step:
            return self.pn + self.p0 * requests + self.p1 * tokens + self.p2 * pairs
        return self.p0 * requests + self.t_fix + max(self.a0, self.p1 * tokens + self.p2 * pairs)

    def train(self, tokens: int) -> float:
        """One update on ``tokens`` tokens (prompt + response of every sample in the batch, or
        batch size x the longest sequence when ``train_padded``: see :meth:`train_tokens`)."""
        return self.train_fix + self.train_per_token * tokens

    def train_tokens(self, lengths: list[int]) -> int:
        """The tokens an update pays for, from each sample's prompt + response length."""
        return len(lengths) * max(lengths) if self.train_padded else sum(lengths)

    def sync(self) -> float:
        """One weight sync from the trainer to the rollout engines."""
        return self.sync_s


def prefill_pairs(context_before: int, new_tokens: int) -> int:
    """Causal attention pairs when ``new_tokens`` are prefilled after ``context_before`` tokens."""
    return new_tokens * context_before + new_tokens * (new_tokens + 1) // 2
