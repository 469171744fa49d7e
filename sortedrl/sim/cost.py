"""The cost model: how long a decode step, a prefill, an update and a weight sync take.

The simulator never steps token by token, so the decode cost must be summable in closed form.
A decode step of a batch of ``B`` sequences holding ``S`` KV tokens costs

    t_step(B, S) = step_fixed_s + step_s_per_seq·B
                   + max(W(B) + kv_read_s_per_token·S, compute_s_per_seq·B)

where ``W(B)`` reads the weights (``weight_read_s``; for an MoE model plus the experts a batch of
``B`` tokens is expected to touch, :func:`expected_experts`), ``kv_read_s_per_token`` reads one KV
token, ``compute_s_per_seq·B`` is the compute that the weight read cannot hide,
``step_s_per_seq`` is the cost each running sequence adds to a step (in the GPU presets its 2·P
FLOPs at peak: measured steps grow with B well below the roofline's ridge), and ``step_fixed_s``
holds the per-step and per-layer fixed costs (all per engine, after tensor parallelism; the
derivation is in cluster_spec.py and docs/calibration.md). The terms' former short names (t_fix,
a0, a1, c1, s1, ...) are still read from older files: :data:`LEGACY_NAMES`.
Between two membership changes ``B`` is constant and ``S`` grows by ``B`` per step, so the memory
term is linear in the step index and the sum of ``k`` steps is a piecewise quadratic:
:meth:`CostModel.decode_time` evaluates it and :meth:`CostModel.decode_steps_within` inverts it.

Deliberate simplifications, each to be absorbed by calibration: paged-block rounding of the KV
cache is ignored (block size 1); a prefill is either an engine-wide stall (its own pass, or, with
``prefill_in_step``, extra time of the next decode step, as vLLM V1 batches it) or, with chunked
prefill (the engine's ``chunk_budget``), chunks carried by mixed decode steps
(:meth:`CostModel.prefill` and the engine's ``_admit_chunked``). An update costs a time per token (6·P FLOPs for forward + backward, 2·P per extra
forward) plus a time per causal attention pair of each sample (its length squared over two),
plus a fixed time; in colocated placement the engines' offload and onload around it are their own
terms (``offload_s``, ``onload_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from sortedrl.errors import ConfigError

MIN_STEP_S = 1e-9  # the shortest decode step a cost model may give: a nanosecond, far below a GPU's

# The names the cost terms had before they were spelled out. Users' cluster
# files, profiles and tune.json files hold them, so every reader of such a file takes each old
# key as its new name (:func:`renamed`); everything is written with the new names.
LEGACY_NAMES = {"t_fix": "step_fixed_s", "a0": "weight_read_s", "a1": "kv_read_s_per_token",
                "c1": "compute_s_per_seq", "s1": "step_s_per_seq", "p0": "admit_s_per_request",
                "p1": "prefill_s_per_token", "p2": "prefill_s_per_pair", "pn": "admit_step_s",
                "f0": "policy_event_s"}
# a profile's step fit (``fit.steps``, realrun/calibrate.py) named the engine's part of
# admit_s_per_request "pr"
LEGACY_STEP_FIT_NAMES = {**LEGACY_NAMES, "pr": "admit_s_per_request"}


def renamed(raw: dict, where: str, field: str | None, names: dict[str, str] = LEGACY_NAMES) -> dict:
    """A JSON object of cost terms (a ``costs`` object, a fit's terms) with each old key of
    ``names`` read as its new name, in the same order; the values are not checked here. One that
    holds a term under both names is an error naming both keys (``field``: the object's field in
    the file; None: the file's top level)."""
    out: dict = {}
    origin: dict[str, str] = {}
    for key, value in raw.items():
        new = names.get(key, key)
        if new in out:
            first, second = sorted((origin[new], key), key=lambda k: k not in names)
            why = "the old and the new name of one term" if second == new else f"both old names of {new!r}"
            at = f"{where}: field {field!r}: keys" if field else f"{where}: fields"
            raise ConfigError(f"{at} {first!r} and {second!r} are {why}; give one of them")
        out[new], origin[new] = value, key
    return out


def as_written(key: str, raw: object, at: str = "", names: dict[str, str] = LEGACY_NAMES) -> str:
    """The field ``at + key`` (``key`` a new name) quoted for an error message as the file
    spelled it: where ``raw``, the object as read (before :func:`renamed`), holds it under an old
    name, that name and the new one, ``'costs.a0' (now weight_read_s)``; else ``'costs.weight_read_s'``
    (a bad value under an old name was named by the new key, which the file never held)."""
    old = old_name(key, raw, names)
    return f"'{at}{key}'" if old is None else f"'{at}{old}' (now {key})"


def old_name(key: str, raw: object, names: dict[str, str] = LEGACY_NAMES) -> str | None:
    """The old name of ``names`` under which ``raw`` (an object as read) holds the term ``key``,
    or None (it holds it under ``key``, or not at all)."""
    if not isinstance(raw, dict):
        return None
    return next((old for old, new in names.items() if new == key and old in raw), None)


def written_labels(raw: object, at: str = "", names: dict[str, str] = LEGACY_NAMES) -> dict[str, str]:
    """:func:`as_written` of each term that ``raw`` holds under an old name, by its new name."""
    return {new: as_written(new, raw, at, names) for new in names.values() if old_name(new, raw, names)}


def renamed_list(names_given: object, names: dict[str, str] = LEGACY_NAMES) -> object:
    """A JSON list of cost term names (``measured_terms``, ``fit.from_preset``, ...) with each
    old name read as its new one; anything but a list is returned as it is (its reader says why)."""
    if not isinstance(names_given, list):
        return names_given
    return [names.get(n, n) if isinstance(n, str) else n for n in names_given]


@dataclass(frozen=True)
class CostModel:
    """Per-engine decode/prefill costs and per-update training/sync costs, in seconds."""

    step_fixed_s: float  # fixed cost of one decode step or prefill (launch + scheduler), s
    weight_read_s: float  # weight read per step, s
    kv_read_s_per_token: float  # KV read per cached token per step, s/token
    compute_s_per_seq: float  # compute per sequence per decode step, s/sequence
    prefill_s_per_token: float  # prefill compute per token, s/token
    prefill_s_per_pair: float  # prefill attention per (query, key) pair, s/pair
    train_per_token: float  # trainer time per trained token (prompt + response), s/token
    train_fix: float  # fixed time per update (optimizer step, offload/onload), s
    sync_s: float  # one weight sync, s
    step_s_per_seq: float = 0.0  # what each running sequence adds to a decode step, s/sequence
    # True: prefills ride in the next decode step, as vLLM V1 schedules them: prefill() is the
    # step's extra time and a new sample's first token comes with that step. False: a prefill is
    # its own engine pass that yields the first token.
    prefill_in_step: bool = False
    admit_s_per_request: float = 0.0  # cost of admitting one request (vLLM add_request, batch insertion), s
    admit_step_s: float = 0.0  # fixed extra cost of a step that starts any new request, s
    policy_event_s: float = 0.0  # host time a policy event (finish, idle) holds the engine's loop, s
    train_padded: bool = False  # the trainer pads a batch to its longest sequence
    # Measured per-step fixed time for batch sizes 1..len (a calibrated lookup table, as vidur
    # does); replaces step_fixed_s + step_s_per_seq·B when given. Beyond the table it extends the
    # last slope.
    step_table: tuple[float, ...] | None = None
    train_per_pair: float = 0.0  # trainer time per causal attention pair of a sample, s/pair
    offload_s: float = 0.0  # colocated: moving the engines' weights and KV out of GPU memory, s
    onload_s: float = 0.0  # colocated: moving them back after the update, s
    # MoE: reading one routed expert in every MoE layer, s; routed experts per layer, chosen per
    # token, and the expert-parallel shards of an engine (the busiest shard sets the pace).
    expert_read: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    expert_shards: int = 1
    # the trainer runs a batch in micro-batches of similar length, each padded to its longest and
    # holding at most this many (query, key) pairs (:func:`micro_batches`); 0: one batch
    train_micro_pairs: float = 0.0
    # a host whose cores the engines and the trainer share (a CPU machine): while the trainer
    # trains, every engine step takes this many times as long; an update that starts while an
    # engine is busy takes ``train_contention`` times as long (1: separate devices; sim/contention.py)
    engine_contention: float = 1.0
    train_contention: float = 1.0
    # ... with one engine busy (0: not measured, as with every engine busy); engines driven in
    # rounds by one host process (the real runner on Ray): with every engine busy a step takes
    # ``peer_step_factor`` times one engine's alone, and the driver adds ``step_overhead_s`` per
    # step (``step_overhead_one_s`` with one busy; 0: as every busy). Linear in between.
    engine_contention_one: float = 0.0
    train_contention_one: float = 0.0
    peer_step_factor: float = 1.0
    step_overhead_s: float = 0.0
    step_overhead_one_s: float = 0.0

    def weight_read(self, batch: int) -> float:
        """Time to read the weights a decode step of ``batch`` tokens needs."""
        if not self.experts:
            return self.weight_read_s
        return self.weight_read_s + self.expert_read * busiest_shard(batch, self.experts, self.experts_per_token,
                                                                     self.expert_shards)

    def fixed(self, batch: int) -> float:
        """The part of a decode step that depends only on the batch size."""
        tab = self.step_table
        if tab is None:
            return self.step_fixed_s + self.step_s_per_seq * batch
        if batch <= len(tab):
            return tab[batch - 1] if batch > 0 else tab[0]
        # past the table its last slope goes on, never down (a hand-written table whose last
        # entry dips would reach a negative step time at a large enough batch)
        slope = max(0.0, tab[-1] - tab[-2]) if len(tab) > 1 else 0.0
        return tab[-1] + slope * (batch - len(tab))

    def fastest_step(self, max_batch: int) -> float:
        """The shortest decode step at any batch of 1 to ``max_batch`` (KV reads ignored): a
        floor for each step of one sample's chain. A batch of 1 where steps grow with the batch,
        as fitted and preset ones do; a hand-written step table need not."""
        return min(self.fixed(b) + self.weight_read(b) for b in range(1, max_batch + 1))

    # -- decode ----------------------------------------------------------------------------

    def decode_step(self, batch: int, kv_tokens: int) -> float:
        """One decode step of ``batch`` sequences that hold ``kv_tokens`` KV tokens in total."""
        return self.fixed(batch) + max(self.weight_read(batch) + self.kv_read_s_per_token * kv_tokens,
                                       self.compute_s_per_seq * batch)

    def _split(self, batch: int, kv0: int) -> tuple[float, float, float, int]:
        """(alpha, beta, compute, j*): step j costs fixed(batch) + max(alpha + beta·j, compute).

        ``j*`` is the number of leading steps where the compute term wins, found with the same
        comparison :meth:`decode_step` makes, so that the closed form and a step-by-step sum
        pick identical branches.
        """
        alpha = self.weight_read(batch) + self.kv_read_s_per_token * kv0
        beta = self.kv_read_s_per_token * batch
        comp = self.compute_s_per_seq * batch
        if alpha >= comp:
            return alpha, beta, comp, 0
        if beta <= 0.0 or (comp - alpha) / beta >= 2.0**52:
            # compute-bound forever, or for more steps than any run takes (a KV term of 1e-45
            # s/token: the exact j would be ~1e45, which the loops below, stepping by one, never
            # reach once j - 1 rounds to j)
            return alpha, beta, comp, -1
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
        if not self.experts and self.step_table is None:  # hot path: the same sums, inlined
            kv_read = self.kv_read_s_per_token
            alpha = self.weight_read_s + kv_read * kv0
            if alpha >= self.compute_s_per_seq * batch:  # memory-bound throughout (j = 0 in _split)
                return steps * (self.step_fixed_s + self.step_s_per_seq * batch + alpha) + kv_read * batch * (
                    (steps * (steps - 1)) // 2)
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
        per_token, per_pair = self.prefill_s_per_token, self.prefill_s_per_pair
        if self.prefill_in_step:
            return self.admit_step_s + self.admit_s_per_request * requests + per_token * tokens + per_pair * pairs
        return self.admit_s_per_request * requests + self.step_fixed_s + max(self.weight_read(tokens),
                                                                             per_token * tokens + per_pair * pairs)

    def chunk_expert_read(self, batch: int, tokens: int, room: int, steps: int) -> float:
        """The expert reads that ``tokens`` prompt tokens, prefilled in chunks of ``room`` (the
        last one the rest) beside ``batch`` decoding sequences over ``steps`` mixed steps, add to
        those decode steps: an MoE step reads the experts all its tokens route to, not only its
        decode tokens' (a chunk of 200 prompt tokens cost less than reading their experts). 0 for
        a dense model, whose weights a decode step reads whole anyway."""
        if not self.experts or not tokens:
            return 0.0
        base, last = self.weight_read(batch), tokens - (steps - 1) * room
        return (steps - 1) * (self.weight_read(batch + room) - base) + self.weight_read(batch + last) - base

    def train(self, tokens: int, pairs: int = 0) -> float:
        """One update on ``tokens`` tokens (prompt + response of every sample in the batch, or
        batch size x the longest sequence when ``train_padded``: see :meth:`train_tokens`) with
        ``pairs`` causal attention pairs (see :meth:`train_pairs`)."""
        return self.train_fix + self.train_per_token * tokens + self.train_per_pair * pairs

    def update(self, lengths: list[int]) -> float:
        """One update on samples of these lengths (prompt + response each)."""
        return self.train(self.train_tokens(lengths), self.train_pairs(lengths))

    def train_pairs(self, lengths: list[int]) -> int:
        """Causal attention pairs an update pays for: L·(L+1)/2 per sample of length L."""
        if self.train_micro_pairs:
            return sum(len(m) * (w * (w + 1) // 2) for m in micro_batches(lengths, self.train_micro_pairs)
                       for w in [max(lengths[k] for k in m)])
        if self.train_padded:
            longest = max(lengths)
            return len(lengths) * (longest * (longest + 1) // 2)
        if len(lengths) >= 256:  # a whole batch: summed in int64 where no sum can overflow it
            a = np.asarray(lengths)
            if a.dtype == np.int64 and a.min() >= 0 and int(a.max()) ** 2 * a.size < 2**62:
                return int((a * (a + 1) // 2).sum())
        return sum(n * (n + 1) // 2 for n in lengths)

    def train_tokens(self, lengths: list[int]) -> int:
        """The tokens an update pays for, from each sample's prompt + response length."""
        if self.train_micro_pairs:
            return sum(len(m) * max(lengths[k] for k in m) for m in micro_batches(lengths, self.train_micro_pairs))
        return len(lengths) * max(lengths) if self.train_padded else sum(lengths)

    def sync(self) -> float:
        """One weight sync from the trainer to the rollout engines."""
        return self.sync_s


def micro_batches(lengths: list[int], max_pairs: float) -> list[list[int]]:
    """Indices of sequences of these lengths cut into micro-batches of similar length (sorted),
    each padded to its longest with at most ``max_pairs`` (query, key) pairs in all, as verl's
    dynamic batch size does; a batch that fits is one micro-batch, in order."""
    if not lengths or len(lengths) * max(lengths) ** 2 <= max_pairs:
        return [list(range(len(lengths)))]
    parts, part = [], []
    for k in sorted(range(len(lengths)), key=lambda k: lengths[k]):
        if part and (len(part) + 1) * lengths[k] ** 2 > max_pairs:
            parts.append(part)
            part = []
        part.append(k)
    return parts + [part]


def prefill_pairs(context_before: int, new_tokens: int) -> int:
    """Causal attention pairs when ``new_tokens`` are prefilled after ``context_before`` tokens."""
    return new_tokens * context_before + new_tokens * (new_tokens + 1) // 2


def expected_experts(tokens: int, experts: int, per_token: int) -> float:
    """Distinct experts of ``experts`` that ``tokens`` tokens touch in one layer, in expectation,
    when each token picks ``per_token`` of them uniformly: E·(1 − (1 − k/E)^B)."""
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


def all_to_all_s(tokens: float, per_token: int, hidden: int, value_bytes: float, shards: int, per_node: int,
                 nvlink_bw: float, net_bw: float) -> float:
    """One expert-parallel all-to-all of one MoE layer (a dispatch, or a combine), s: each of
    ``shards`` GPUs sends each of its ``tokens`` tokens' hidden state (``hidden`` values of
    ``value_bytes``) to each of the ``per_token`` experts it chose, as DeepEP's low-latency kernels
    do. With uniform routing a share (n − 1)/shards of the copies goes to another GPU of the node
    (n = ``per_node`` shards per node) over NVLink and (shards − n)/shards to other nodes over the
    network; both links run at once, so the slower one sets the time (bandwidths in bytes/s)."""
    if shards <= 1:
        return 0.0
    n = min(shards, per_node)
    sent = tokens * per_token * hidden * value_bytes
    return max((n - 1) / shards * sent / nvlink_bw, (shards - n) / shards * sent / net_bw)


def busiest_shard(tokens: int, experts: int, per_token: int, shards: int) -> float:
    """Experts the busiest of ``shards`` expert-parallel shards reads, times ``shards``.

    With one shard this is :func:`expected_experts`. With more, each shard holds E/shards experts,
    each touched with probability q, and the step waits for the shard that touched the most:
    its count is approximated by mean + z·sd of the binomial, z the expected maximum of
    ``shards`` standard normals (Blom's approximation), capped at the shard's size."""
    if shards <= 1:
        return expected_experts(tokens, experts, per_token)
    q = 1.0 - (1.0 - per_token / experts) ** tokens
    size = experts / shards
    z = NormalDist().inv_cdf((shards - 0.375) / (shards + 0.25))
    return shards * min(size, size * q + z * math.sqrt(size * q * (1.0 - q)))
