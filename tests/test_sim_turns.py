"""Multi-turn trajectories in the simulator, against cases computed by hand.

Costs (tests/conftest.py): a decode step is step_fixed_s + weight_read_s = 2 s; with
prefill_s_per_token = 0.5 s/token a prefill of T tokens is step_fixed_s + max(weight_read_s, 0.5 T)
= 1 + max(1, T/2) s; an update 10 s; a sync 5 s (none after the last update).

Run: pytest tests/test_sim_turns.py
"""

from __future__ import annotations

import dataclasses

import pytest

from sortedrl.compare import cluster_for
from sortedrl.errors import ConfigError
from sortedrl.policies.registry import make_policy
from sortedrl.sim.cluster import preset
from sortedrl.sim.run import simulate
from sortedrl.sim.turns import TurnPlan
from sortedrl.traces.synth import synthesize
from tests.conftest import tiny_cluster
from tests.turns_helpers import make_turn_trace

# two trajectories, prompt 2: turn 0 generates 2 tokens, a 5 s tool call returns 4 tokens,
# turn 1 generates 3
TWO_TURNS = [[(2, 5.0, 4), (3, 0.0, 0)]] * 2


def run(pool, **kw):
    trace = make_turn_trace(TWO_TURNS, prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5), tool_pool=pool, **kw)
    return simulate(trace, make_policy("sync", [], trace), cluster, audit=True)


def spans(r):
    return sorted((s[3], s[0], s[1], s[6], s[7]) for s in r.timeline.spans)


def test_two_turns_pool_of_two_exact_makespan():
    # 0: both prefill 2+2 tokens: 1 + 2 = 3 s; one step to 5 s ends turn 0 (2 tokens), both
    # leave; 5-10: both tool calls at once; 10: both rejoin with their context cached: prefill
    # the 4+4 tool tokens only, 1 + 4 = 5 s, to 15 (first token of turn 1); 2 steps to 19.
    # Update 19-29 (no sync after the last update).
    r = run(pool=2)
    assert spans(r) == [(0, 0.0, 5.0, 2, "tool"), (0, 10.0, 19.0, 3, "finish"),
                        (1, 0.0, 5.0, 2, "tool"), (1, 10.0, 19.0, 3, "finish")]
    assert r.timeline.tools == [(5.0, 5.0, 10.0, 0, 0, 0, 0, 4), (5.0, 5.0, 10.0, 0, 1, 0, 0, 4)]
    assert r.timeline.prefills[1][:2] == (10.0, 15.0)
    s = r.summary
    assert s["makespan_s"] == 29.0
    assert (s["tool_calls"], s["tool_s"], s["sandbox_wait_s"]) == (2, 10.0, 0.0)
    assert s["generated_tokens"] == s["useful_tokens"] == 10  # tool output is never counted
    assert s["recomputed_tokens"] == 0
    # rollout 0-19 (the tool calls inside it), 4 slots: busy 5 + 9 + 5 + 9 slot-seconds; 5-10
    # both trajectories are away on tools while every slot idles: 2 x 5 slot-seconds
    assert s["rollout_s"] == 19.0
    assert s["bubble_ratio"] == pytest.approx(1 - 28 / 76, abs=1e-6)
    assert s["bubble_tool_ratio"] == pytest.approx(10 / 76, abs=1e-6)
    assert s["bubble_tail_ratio"] == pytest.approx(38 / 76, abs=1e-6)


def test_two_turns_pool_of_one_queues_the_second_call():
    # as above to 5 s; sample 0 gets the sandbox 5-10, sample 1 waits for it and runs 10-15.
    # 10: sample 0 prefills its 4 tool tokens (3 s) to 13, steps to 15 (2 tokens of turn 1).
    # 15: sample 1 back: prefill 3 s stalls the engine to 18; both step 18-20: sample 0 ends
    # turn 1 (3 tokens); sample 1 steps to 22. Update 22-32.
    r = run(pool=1)
    assert spans(r) == [(0, 0.0, 5.0, 2, "tool"), (0, 10.0, 20.0, 3, "finish"),
                        (1, 0.0, 5.0, 2, "tool"), (1, 15.0, 22.0, 3, "finish")]
    assert r.timeline.tools == [(5.0, 5.0, 10.0, 0, 0, 0, 0, 4), (5.0, 10.0, 15.0, 0, 1, 0, 0, 4)]
    s = r.summary
    assert s["makespan_s"] == 32.0
    assert (s["tool_s"], s["sandbox_wait_s"]) == (10.0, 5.0)
    # 5-10 two away, no slot busy; 10-15 one away (waiting for the sandbox) beside one running
    assert s["bubble_tool_ratio"] == pytest.approx(15 / 88, abs=1e-6)


def test_evicted_context_is_prefilled_again():
    # without prefix caching nothing is kept: at 10 each prefills prompt 2 + 2 generated + 4 tool
    # tokens = 8, 16 in all: 1 + 8 = 9 s to 19; 2 steps to 23; update to 33.
    # The 2 generated tokens of each are recomputed.
    r = run(pool=2, prefix_caching=False)
    assert r.summary["makespan_s"] == 33.0
    assert r.summary["recomputed_tokens"] == 4


@pytest.mark.parametrize("pool, makespan, freed", [(2, 29.0, 33.0), (1, 32.0, 34.0)])
def test_a_held_slot_keeps_the_context_without_prefix_caching(pool, makespan, freed):
    # tool_holds_slot: each trajectory keeps its slot and its KV (prompt 2 + 2 tokens) through
    # its tool call, so on return only the 4 tool tokens are prefilled even with prefix caching
    # off: the same timeline as the cached runs above (29 s and 32 s), not 33 s and 34 s.
    r = run(pool=pool, prefix_caching=False, tool_holds_slot=True)
    free = run(pool=pool, prefix_caching=False)
    assert (r.summary["makespan_s"], r.summary["recomputed_tokens"]) == (makespan, 0)
    assert (free.summary["makespan_s"], free.summary["recomputed_tokens"]) == (freed, 4)
    assert [p[4:] for p in r.timeline.prefills] == [(4, 0)] + [(8, 0)] * (pool == 2) + [(4, 0)] * 2 * (pool == 1)


def test_a_held_slot_blocks_the_next_trajectory():
    # max_num_seqs 1. Sample 0 alone: prefill 2 tokens 0-2 (1 + max(1, 1)), one step to 4 ends
    # turn 0; its 5 s tool call 4-9 keeps the only slot, so sample 1 waits. 9: 4 tool tokens
    # prefilled 9-12, 2 steps to 16. Sample 1 then: 16-18 prefill, 18-20 step, tool 20-25,
    # 25-28 prefill, 2 steps to 32. Update 32-42. With the slot freed (33 s) sample 1
    # runs its first turn during sample 0's tool call.
    r = run(pool=2, max_num_seqs=1, tool_holds_slot=True)
    assert spans(r) == [(0, 0.0, 4.0, 2, "tool"), (0, 9.0, 16.0, 3, "finish"),
                        (1, 16.0, 20.0, 2, "tool"), (1, 25.0, 32.0, 3, "finish")]
    assert r.timeline.tools == [(4.0, 4.0, 9.0, 0, 0, 0, 0, 4), (20.0, 20.0, 25.0, 0, 1, 0, 0, 4)]
    assert r.summary["makespan_s"] == 42.0
    assert run(pool=2, max_num_seqs=1).summary["makespan_s"] == 33.0
    # 4-9 and 20-25 the one slot is held idle by a trajectory on a tool call: 10 of 32
    # slot-seconds of rollout, all of it tool bubble
    assert r.summary["bubble_tool_ratio"] == pytest.approx(10 / 32, abs=1e-6)


def test_a_held_slot_keeps_its_kv_out_of_the_budget():
    # KV budget 12, as the eviction case below. At 5 sample 0 leaves for its tool holding its 4
    # KV tokens, so sample 1 (kv 4) may grow to 8 only; at 10 sample 0 is back and gives them
    # up, but its context (2 + 6 tokens) does not fit beside sample 1 (kv 7 at 11): it waits at
    # the head of the queue until sample 1 finishes at 17, then prefills its 4 tool tokens only,
    # 17-20, 2 steps to 24; update to 34 (36 s when the context was evicted).
    trace = make_turn_trace(TWO_TURNS[:1] + [[(8, 0.0, 0)]], prompt_lens=[2, 2])
    tight = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5, kv=12), tool_pool=1, tool_holds_slot=True)
    r = simulate(trace, make_policy("sync", [], trace), tight, audit=True)
    assert spans(r) == [(0, 0.0, 5.0, 2, "tool"), (0, 17.0, 24.0, 3, "finish"),
                        (1, 0.0, 17.0, 8, "finish")]
    assert r.timeline.prefills[1] == (17.0, 20.0, 0, [0], 4, 0)
    assert (r.summary["makespan_s"], r.summary["recomputed_tokens"]) == (34.0, 0)


def test_a_held_slot_holds_its_groups_shared_prompt_once():
    # Prefix caching, one group of 2 sharing a 10-token prompt, KV budget 26. 0-6.5: one prefill
    # of 11 tokens (the prompt once; sample 1's last prompt token), each gets its first token.
    # 6.5-8.5: a step; sample 0's first turn ends (2 tokens) and it holds its slot for its 5 s
    # tool call, reserving its own 2 tokens: the prompt stays held once, by sample 1 running
    # (kv 12, budget 24). Sample 1 steps on without preemption. The tool returns at 13.5;
    # sample 0 rejoins at the step boundary 14.5, prefills 1 token 14.5-16.5, makes its 2 tokens
    # by 18.5; sample 1 its 8 by 22.5; update to 32.5. (Counting the prompt again
    # for the held slot left a budget of 14: sample 1 was preempted at 12.5 and recomputed.)
    trace = make_turn_trace([[(2, 5.0, 0), (2, 0.0, 0)], [(8, 0.0, 0)]], prompt_lens=[10, 10],
                            group_size=2)
    cluster = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5, kv=26), tool_pool=1, tool_holds_slot=True)
    r = simulate(trace, make_policy("sync", [], trace), cluster, audit=True)
    assert spans(r) == [(0, 0.0, 8.5, 2, "tool"), (0, 14.5, 18.5, 2, "finish"),
                        (1, 0.0, 22.5, 8, "finish")]
    assert [p[:2] + p[3:5] for p in r.timeline.prefills] == [(0.0, 6.5, [0, 1], 11), (14.5, 16.5, [0], 1)]
    assert (r.summary["makespan_s"], r.summary["recomputed_tokens"]) == (32.5, 0)


def test_kv_budget_evicts_the_cached_context():
    # KV budget 12. Sample 0 as above; sample 1 generates 8 tokens in one turn. 0-3: prefill 4
    # tokens; 3-5: one step; at 5 sample 0 leaves, its context (2 + 2 tokens) cached; kv 4.
    # Sample 1 alone grows by one token a step. At 10 sample 0 is back, but its context of
    # 2 + 6 tokens does not fit beside sample 1 (kv 7 at 11 + 8 + room > 12): it queues. The
    # cache is evicted as sample 1 grows past 12 - 4 = 8 tokens of KV, and sample 1 finishes
    # at 17. Sample 0 then prefills its whole context: 2 + 2 generated + 4 tool tokens = 8,
    # 1 + 4 = 5 s to 22; 2 steps to 26; update to 36. 2 tokens recomputed.
    trace = make_turn_trace(TWO_TURNS[:1] + [[(8, 0.0, 0)]], prompt_lens=[2, 2])
    tight = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5, kv=12), tool_pool=1)
    r = simulate(trace, make_policy("sync", [], trace), tight, audit=True)
    assert spans(r) == [(0, 0.0, 5.0, 2, "tool"), (0, 17.0, 26.0, 3, "finish"),
                        (1, 0.0, 17.0, 8, "finish")]
    assert r.timeline.prefills[1] == (17.0, 22.0, 0, [0], 8, 2)
    assert r.summary["makespan_s"] == 36.0
    assert r.summary["recomputed_tokens"] == 2


def test_a_tool_pool_of_zero_is_a_one_line_error():
    trace = make_turn_trace(TWO_TURNS, prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(), tool_pool=0)
    with pytest.raises(ConfigError, match="field 'tool_pool': must be >= 1, got 0"):
        simulate(trace, make_policy("sync", [], trace), cluster)


def test_staleness_is_counted_per_token_across_turns():
    # async (eta 1, one sample per update) on a disaggregated cluster, prefill_s_per_token = 0: a prefill is 2 s.
    # Sample 0 (3 tokens) finishes at 6 and is trained 6-16 (v0 -> v1), synced 16-21. Sample 1
    # ends its 4-token turn 0 at 8 and is away on a 40 s tool call until 48; the sync emptied
    # the prefix cache, so it prefills its whole context (2 + 4 + 2 tokens) 48-50 and makes its
    # 6 tokens of turn 1 under v1 by 60. Trained from v1: turn 0's 4 tokens are 1 version behind,
    # turn 1's are not: staleness 4 / 13 per token over both samples.
    trace = make_turn_trace([[(3, 0.0, 0)], [(4, 40.0, 2), (6, 0.0, 0)]], prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(), gpus=2, train_gpus=1, placement="disaggregated",
                                  tool_pool=1)
    r = simulate(trace, make_policy("async", ["eta=1", "batch=1"], trace), cluster, audit=True)
    assert sorted((s[3], s[0], s[1], s[5], s[6], s[7]) for s in r.timeline.spans) == [
        (0, 0.0, 6.0, 0, 3, "finish"), (1, 0.0, 8.0, 0, 4, "tool"), (1, 48.0, 60.0, 1, 6, "finish")]
    assert r.timeline.trains[1][:3] == (60.0, 70.0, 1)
    assert r.timeline.trains[1][4] == 2 + 10 + 2  # the tool output is in the trained sequence
    s = r.summary
    assert (s["staleness_mean"], s["staleness_max"]) == (round(4 / 13, 6), 1)
    assert (s["makespan_s"], s["recomputed_tokens"]) == (70.0, 4)  # the last update's end


@pytest.mark.parametrize("tool_s, makespan", [(40.0, 66.0), (5.0, 43.0)])
def test_partial_rollout_interrupts_at_a_turn_boundary(tool_s, makespan):
    # partial (N = 1 group, 2 in flight), one engine, prefill_s_per_token = 0. Sample 1 ends its 2-token turn 0 at
    # 4 and leaves for its tool call; sample 0 finishes at 6, so the step harvests: sample 1,
    # away on its tool, pauses at the turn boundary (keeping its 2 tokens and its tool call).
    # Update 6-16, sync 16-21; the next step resumes it at 21. With a 40 s tool it waits away
    # until the call returns at 44; with 5 s the output came back at 9 and waits with it. Either
    # way it prefills its whole context (2 + 2 + 2: the sync emptied the cache) in 2 s and makes
    # turn 1's 6 tokens under v1: 44 + 2 + 10 = 56 (or 21 + 12 = 33), update 10 s, no sync after it.
    trace = make_turn_trace([[(3, 0.0, 0)], [(2, tool_s, 2), (6, 0.0, 0)]], prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(), tool_pool=1)
    r = simulate(trace, make_policy("partial", ["rollout_batch=1", "over_sample=2"], trace),
                 cluster, audit=True)
    back = 4.0 + tool_s
    assert r.timeline.aborts == [(6.0, [1], True)]
    assert r.timeline.tools == [(4.0, 4.0, back, 0, 1, 0, 0, 2)]
    resume = max(back, 21.0)
    assert sorted((s[3], s[0], s[1], s[5], s[6], s[7]) for s in r.timeline.spans) == [
        (0, 0.0, 6.0, 0, 3, "finish"), (1, 0.0, 4.0, 0, 2, "tool"),
        (1, resume, resume + 12.0, 1, 6, "finish")]
    s = r.summary
    assert (s["makespan_s"], s["recomputed_tokens"]) == (makespan, 2)
    assert s["staleness_mean"] == round(2 / 11, 6)


def test_a_regenerated_attempt_that_no_engine_holds_is_a_one_line_error():
    # Sample 0's turns: 2 tokens, a tool call returning 4, then 2 tokens: prompt 2 + 4 + 4 = 10
    # tokens of context. A regenerated attempt drawn at the cap of 8 tokens keeps the turns'
    # shape, [4, 4], and the tool output: 2 + 8 + 4 = 14, more than an engine holding 11.
    trace = make_turn_trace([[(2, 1.0, 4), (2, 0.0, 0)]], prompt_lens=[2], max_len=8)
    lengths = [8]  # the backend's draw for the attempt, before it starts
    plan = TurnPlan(trace, lengths, max_context=11)
    with pytest.raises(ConfigError, match=r"^sample 0: its regenerated attempt 1 reaches 14 tokens "
                       r"of context \(prompt, 8 generated tokens drawn, 4 of tool outputs\), more "
                       r"than one engine's KV budget holds \(11\): raise the KV budget, or pass "
                       r"--regen same$"):
        plan.start_attempt(0, 1)
    roomy = TurnPlan(trace, lengths, max_context=14)
    roomy.start_attempt(0, 1)
    assert roomy._turns(0) == ([4, 4], [1.0, 0.0], [4, 0])
    assert roomy.end[0] == 4


def test_a_run_whose_regenerated_attempt_cannot_fit_stops_with_that_error():
    # Found by a fuzz: partial rollout on agentic-swe, 40,000 KV tokens an engine. Sample 1's
    # 4th attempt draws 32,768 tokens (the cap) beside its 12,332 tool-output tokens; the run
    # used to stall with it queued for good ("policy partial stalled ... nothing in flight").
    trace = synthesize("agentic-swe", prompts=10, group_size=1, steps=2, seed=630)
    base = dataclasses.replace(preset("h100-llama3.1-8b-2gpu"), max_num_seqs=4, tool_pool=4,
                               placement="disaggregated", tool_holds_slot=True,
                               kv_budget_tokens=40_000)
    sets = ["over_sample=3.0", "keep_partial=false", "max_span=0", "rollout_batch=4"]
    cluster = cluster_for(("disaggregated",), base)
    with pytest.raises(ConfigError, match=r"^sample 1: its regenerated attempt 4 reaches 47005 "
                       r"tokens of context .* holds \(39599\)"):
        simulate(trace, make_policy("partial", sets, trace), cluster)
    # every attempt repeating its recorded trajectory fits (the longest holds 26,562 tokens)
    same = simulate(trace, make_policy("partial", sets, trace), cluster, regen="same", audit=True)
    assert (same.summary["samples_trained"], same.summary["makespan_s"]) == (20, 885.733824)  # no sync after the last update (0.145 s)


def test_a_tool_call_of_zero_seconds_never_returns_before_now():
    # Found by a fuzz: sample 3's first turn ends at a time SimPy's clock passed by an ulp
    # (the pool's timeout of t - now lands on now + (t - now) != t), and its tool call takes
    # 0 s: the call's timeout was -7.1e-15 s, and SimPy refused it ("Negative delay").
    trace = make_turn_trace(
        [[(9, 0.5, 3), (45, 0.5, 20), (3, 0.5, 13)], [(7, 0.5, 20)],
         [(1, 0.0, 13), (10, 5.0, 20), (8, 5.0, 17)], [(30, 0.0, 10), (10, 0.0, 19), (1, 0.0, 10)]],
        prompt_lens=[12, 12, 14, 14], group_size=2, max_len=240)
    base = dataclasses.replace(
        tiny_cluster(engines=4, max_num_seqs=5, kv=625, kv_read_s_per_token=0.001, train_per_token=0.001,
                     sync_s=0.3, prefill_in_step=True, train_fix=0.5, engine_contention=1.5,
                     train_contention=2.0),
        train_gpus=1, placement="disaggregated", chunked_prefill=True, prefix_caching=False,
        max_num_batched_tokens=512, tool_pool=2)
    # (the fuzz's rollout_batch=4 on 2 prompts is refused now: 2, all of them, is the same batch)
    policy = make_policy("one_step_off", ["rollout_batch=2"], trace)
    r = simulate(trace, policy, cluster_for(policy.placements, base), regen="same", audit=True)
    tools = r.timeline.columns("tool")
    assert len(tools["t"]) == 6 and (tools["t_end"] >= tools["t_start"]).all()
    assert r.summary["samples_trained"] == 4


def test_the_view_gives_a_trajectory_away_on_a_tool_its_generated_tokens():
    # TWO_TURNS: turn 0 generates 2 tokens, then a 5 s tool call (4 output tokens). Away on the
    # tool, a trajectory holds the 2 tokens it generated (what a pause there keeps; the tool's
    # output is context, not generated); view.generated returned None.
    from sortedrl.policies.registry import policy_class

    seen = []

    class Watch(policy_class("sync")):
        name = "watch"

        def on_turn_done(self, view, samples, engine):
            seen.append([(i, view.generated(i), i in view.in_tool(engine)) for i in samples])
            return []

    trace = make_turn_trace(TWO_TURNS, prompt_lens=[2, 2])
    cluster = dataclasses.replace(tiny_cluster(prefill_s_per_token=0.5), tool_pool=2)
    simulate(trace, Watch(None), cluster, audit=True)
    assert seen[0] == [(0, 2, True), (1, 2, True)]
