"""Regenerated attempts draw fresh lengths from their prompt's distribution (``--regen``).

Hand-computed cases for the resample and the per-prompt model, property tests (no two attempts
share a random stream; every attempt's length comes from its prompt's distribution; a run is
deterministic), and the ``--regen`` option of the commands.

Run: pytest tests/test_sim_regen.py
"""

from __future__ import annotations

import json
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from sortedrl.cli import app
from sortedrl.errors import ConfigError
from sortedrl.policies.registry import make_policy
from sortedrl.sim.attempts import (
    _UNPACK,
    MIN_OTHERS,
    WITHIN_SHARE,
    AttemptLengths,
    prompt_codes,
    stream_key,
)
from sortedrl.sim.run import simulate
from tests.conftest import make_trace, tiny_cluster


def test_attempt_zero_is_recorded_and_same_repeats_it():
    trace = make_trace([5, 9, 3, 7], group_size=4)
    same = AttemptLengths(trace, seed=3, regen="same")
    fresh = AttemptLengths(trace, seed=3)
    assert [same.length(i, a) for i in range(4) for a in (0, 1, 2)] == [5, 5, 5, 9, 9, 9, 3, 3, 3, 7, 7, 7]
    assert [fresh.length(i, 0) for i in range(4)] == [5, 9, 3, 7]


def test_resample_picks_one_of_the_other_responses_of_the_prompt():
    # prompt p0 has 4 responses, so each has MIN_OTHERS = 3 others to resample from
    trace = make_trace([5, 9, 3, 7], group_size=4)
    draw = AttemptLengths(trace, seed=1)
    for i, others in enumerate(([9, 3, 7], [5, 3, 7], [5, 9, 7], [5, 9, 3])):
        got = {draw.length(i, a) for a in range(1, 200)}
        assert got == set(others)  # every other response, never the sample's own (all distinct)


def test_the_model_is_fitted_to_the_within_prompt_spread():
    # two prompts of two responses each: too few others, so the per-prompt model draws
    trace = make_trace([100, 400, 1000, 4000], group_size=2, max_len=8192)
    draw = AttemptLengths(trace, seed=0)
    logs = np.log([100, 400, 1000, 4000])
    within2 = ((logs[0] - logs[1]) ** 2 / 2 + (logs[2] - logs[3]) ** 2 / 2) / 2  # pooled, 2 dof
    assert draw.fitted and draw.sigma_within == pytest.approx(math.sqrt(within2))
    # the posterior predictive of prompt p0: shrunk towards the trace mean, wider than within
    between2 = np.var(logs) - within2
    w = 2 * between2 / (2 * between2 + within2)
    mean = logs.mean() + w * (logs[:2].mean() - logs.mean())
    sd = math.sqrt(within2 + w * within2 / 2)
    draws = np.log([draw.length(0, a) for a in range(1, 4001)])
    assert draws.mean() == pytest.approx(mean, abs=0.05)
    assert draws.std() == pytest.approx(sd, rel=0.05)


def test_group_size_one_falls_back_to_a_share_of_the_total_spread():
    lengths = [50, 120, 300, 800, 2000, 5000]
    draw = AttemptLengths(make_trace(lengths, max_len=8192), seed=0)
    assert not draw.fitted
    assert draw.sigma_within == pytest.approx(math.sqrt(WITHIN_SHARE * np.var(np.log(lengths))))
    assert all(1 <= draw.length(i, a) <= 8192 for i in range(6) for a in range(1, 50))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["p0", "p1", "p2", "q", "p10"]), max_size=40), st.booleans())
def test_prompt_codes_are_numpys_unique_in_any_row_order(ids, grouped):
    # the fast path over runs of equal ids gives np.unique's codes and inverse exactly, and a
    # prompt split over two runs takes the whole-array way
    rows = np.array(sorted(ids) if grouped else ids, dtype=str)
    codes, inverse = prompt_codes(rows)
    want_codes, want_inverse = np.unique(rows, return_inverse=True)
    assert codes.tolist() == want_codes.tolist()
    assert inverse.dtype == want_inverse.dtype and inverse.tolist() == want_inverse.tolist()


def test_unknown_regen_is_a_config_error():
    with pytest.raises(ConfigError, match="--regen 'fresh': expected one of resample, same"):
        AttemptLengths(make_trace([3]), regen="fresh")


# -- properties -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(1, 60), min_size=1, max_size=40),
       st.sampled_from([1, 2, 4, 5]))
def test_no_two_attempts_share_a_stream_and_draws_are_pure(seed, lengths, group):
    n = len(lengths) - len(lengths) % group or group
    lengths = (lengths * group)[:n]
    trace = make_trace(lengths, group_size=group, max_len=60)
    keys = {stream_key(seed, i, a) for i in range(n) for a in range(1, 6)}
    assert len(keys) == n * 5
    assert stream_key(seed, 0, 1) != stream_key(seed + 1, 0, 1)
    a, b = AttemptLengths(trace, seed), AttemptLengths(trace, seed)
    forward = [a.length(i, k) for i in range(n) for k in range(1, 6)]
    backward = [b.length(i, k) for i in reversed(range(n)) for k in reversed(range(1, 6))]
    assert forward == backward[::-1]  # a pure function of (seed, sample, attempt)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(1, 60), min_size=1, max_size=40),
       st.sampled_from([1, 2, 4, 5, 8]), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 9)), max_size=80),
       st.sampled_from(["resample", "same"]))
def test_a_batch_of_draws_is_the_draws_one_by_one(seed, lengths, group, pairs, regen):
    # AttemptLengths.lengths (the simulator's admissions of regenerated samples) gives length's
    # draws: the resample among 3+ other responses, the model's draw below, attempt 0's record;
    # numba loaded, a batch of 32 or more draws hashes in sim/regen_hash.py
    import sortedrl.sim.regen_hash  # noqa: F401
    n = len(lengths) - len(lengths) % group or group
    lengths = (lengths * group)[:n]
    trace = make_trace(lengths, group_size=group, max_len=60)
    draw = AttemptLengths(trace, seed, regen)
    pairs = [(i % n, a) for i, a in pairs]
    samples, attempts = [i for i, _ in pairs], [a for _, a in pairs]
    assert draw.lengths(samples, attempts) == [draw.length(i, a) for i, a in pairs]


@settings(max_examples=60, deadline=None)
@given(st.integers(-2**63, 2**63 - 1), st.lists(st.tuples(st.integers(0, 2**63 - 1), st.integers(-2**63, 2**63 - 1)),
                                                 min_size=1, max_size=50))
def test_the_compiled_hashes_are_hashlibs(seed, keys):
    """sim/regen_hash.py's BLAKE2b (a batch of draws' hashes, compiled) gives stream_key's
    digest words (hashlib's) for any seed, sample and attempt within int64."""
    from sortedrl.sim import regen_hash
    words = regen_hash.digests(seed, [i for i, _ in keys], [a for _, a in keys])
    assert [tuple(w) for w in words.tolist()] == [_UNPACK(stream_key(seed, i, a)) for i, a in keys]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 1000), st.lists(st.integers(1, 60), min_size=4, max_size=40),
       st.sampled_from([1, 2, 4, 5]))
def test_every_attempt_comes_from_its_prompts_distribution(seed, lengths, group):
    n = len(lengths) - len(lengths) % group or group
    lengths = (lengths * group)[:n]
    trace = make_trace(lengths, group_size=group, max_len=60)
    draw = AttemptLengths(trace, seed)
    for i in range(n):
        g = i // group
        others = [lengths[j] for j in range(g * group, g * group + group) if j != i]
        for a in range(1, 8):
            got = draw.length(i, a)
            if len(others) >= MIN_OTHERS:
                assert got in others
            else:
                assert 1 <= got <= 60


def run_on_policy(trace, regen, seed=0):
    policy = make_policy("sortedrl", ["mode=on_policy", "group_prompts=16", "update_batch=3",
                                      "oversubscribe=2"], trace)
    return simulate(trace, policy, tiny_cluster(engines=2, max_num_seqs=2, kv=400), seed=seed,
                    audit=True, regen=regen)


def test_a_run_regenerates_with_fresh_lengths_of_the_prompt():
    lengths = [5, 9, 3, 7, 30, 2, 11, 4, 25, 6, 8, 14, 40, 3, 5, 9]
    trace = make_trace(lengths, group_size=4, max_len=40)
    got = run_on_policy(trace, "resample", seed=5)
    draw = AttemptLengths(trace, seed=5)
    made = defaultdict(int)  # tokens of each (sample, attempt)
    for span in got.timeline.spans:
        made[span[3], span[4]] += span[6]
    finished = {(s[3], s[4]) for s in got.timeline.spans if s[7] == "finish"}
    regenerated = [key for key in finished if key[1] > 0]
    assert regenerated, "the case must regenerate something"
    for i, a in finished:
        assert made[i, a] == draw.length(i, a)  # each attempt ran to its own drawn length
    assert got.summary["regen"] == "resample"
    same = run_on_policy(trace, "same", seed=5)
    assert same.summary["regen"] == "same"
    assert same.summary["generated_tokens"] != got.summary["generated_tokens"]
    again = run_on_policy(trace, "resample", seed=5)
    assert json.dumps(again.summary) == json.dumps(got.summary)


def test_cli_rejects_an_unknown_regen(tmp_path):
    out = tmp_path / "run"
    for cmd in (["simulate", "--policy", "sync"], ["compare", "--policy", "sync"],
                ["tune", "--policy", "sync"]):
        r = CliRunner().invoke(app, [*cmd, "--synthetic", "logic-8k", "--prompts", "4",
                                     "--regen", "fresh", "--out", str(out)])
        assert r.exit_code == 2
        assert r.output.strip().splitlines() == ["error: --regen 'fresh': expected one of resample, same"]
        assert not out.exists()


def test_cli_records_regen_in_the_summary(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--synthetic", "logic-8k", "--prompts", "8", "--policy",
                                 "sync", "--regen", "same", "--out", str(tmp_path / "a"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["regen"] == "same"
