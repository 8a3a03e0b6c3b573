"""The judging plan (darling_nemo/nemo_rl/judging_plan.py), by hand: each choice and its reason,
and the lines the NeMo-RL start-up prints from it."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import nemo_config

from darling_nemo.nemo_rl.judging_plan import (
    OVERLAP_ON,
    PREFIX_ON,
    STREAM_ON,
    TRL_ENGINE,
    judging_plan,
)
from darling_nemo.schema import validate_darling

SERVED = {"kind": "served", "endpoints": ["http://127.0.0.1:8000"]}
SYNC_ENGINE = (
    "policy.generation.vllm_cfg.async_engine is not true (the synchronous engine returns "
    "every response of the step at once)"
)
SHAPING = (
    "grpo.reward_shaping.enabled=true: NeMo-RL shapes the reward right after the DARLING "
    "hook, before the judge would have answered"
)


def plan_of(darling: dict | None = None, async_engine: bool = True, shaping: bool = False, **kw):
    section = {"judge": SERVED, **(darling or {})}
    cfg = nemo_config(section, reward_shaping={"enabled": shaping})
    cfg["policy"] = {"generation": {"vllm_cfg": {"async_engine": async_engine}}}
    return judging_plan(cfg, validate_darling(section), **kw)


def test_everything_on_for_a_served_judge_on_the_async_engine():
    plan = plan_of()
    assert (plan.log_probs.on, plan.generation.on, plan.prefix.on) == (True, True, True)
    assert not plan.fallback.on
    assert plan.fallback.reason == "the rest is judged while log-probabilities run"
    assert plan.prefix.reason == (
        "darling.prefix_judging is true and nothing in the config stops it"
    )
    assert plan.lines() == [OVERLAP_ON, STREAM_ON, PREFIX_ON]


def test_the_synchronous_engine_stops_streaming_and_so_prefix_judging_silently():
    plan = plan_of(async_engine=False)
    assert plan.log_probs.on and not plan.generation.on and not plan.prefix.on
    # the overlap still judges every pair off the critical path: nothing left for the hook
    assert not plan.fallback.on
    assert plan.fallback.reason == "the rest is judged while log-probabilities run"
    assert plan.generation.reason == SYNC_ENGINE
    # a judge that would also stop prefix judging: without a stream there is nothing to stop
    plan = plan_of({"judge": {"kind": "embedding"}}, async_engine=False)
    assert plan.prefix.reason == "no judging during generation to join early"
    assert plan.prefix.stops == ()
    assert plan.prefix.reason == "no judging during generation to join early"
    assert plan.lines() == [
        OVERLAP_ON,
        f"darling.judge_during_generation=true: not streaming because {SYNC_ENGINE}",
    ]


def test_reward_shaping_stops_the_overlap_and_the_hook_judges_the_rest():
    plan = plan_of(shaping=True)
    assert not plan.log_probs.on and plan.log_probs.stops == (SHAPING,)
    assert plan.fallback.on
    assert plan.fallback.reason == f"the rest of the pairs judged in the reward hook: {SHAPING}"
    assert plan.lines()[0] == f"darling.overlap=true: judging synchronously because {SHAPING}"


def test_what_the_config_stops_is_said_before_what_is_unavailable_here():
    # Reward shaping stops the overlap, and without a Policy it would be unavailable anyway:
    # the config's reason is the one printed (the user can act on it), not the run's.
    plan = plan_of(shaping=True, policy=False)
    assert not plan.log_probs.on and plan.log_probs.stops == (SHAPING,)
    assert plan.log_probs.reason == SHAPING
    assert plan.lines()[0] == f"darling.overlap=true: judging synchronously because {SHAPING}"
    assert plan.fallback.on
    assert plan.fallback.reason == f"the rest of the pairs judged in the reward hook: {SHAPING}"


def test_options_turned_off_print_nothing_and_say_so():
    plan = plan_of({"overlap": False, "judge_during_generation": False})
    assert plan.log_probs.reason == "darling.overlap is false"
    assert plan.generation.reason == "darling.judge_during_generation is false"
    assert plan.fallback.on
    assert plan.fallback.reason == "every pair judged in the reward hook: darling.overlap is false"
    assert plan.lines() == []


def test_without_a_policy_the_hook_judges_alone():
    plan = plan_of(policy=False)
    assert not plan.log_probs.on
    assert plan.log_probs.reason == "no NeMo-RL Policy to overlap with: the hook judges alone"
    assert plan.lines() == [STREAM_ON, PREFIX_ON]


def test_a_judge_without_a_pair_model_is_not_streamed():
    plan = plan_of({"judge": {"kind": "lexical"}})
    reason = "no pair model to call (darling.diversity / darling.judge.kind)"
    assert not plan.generation.on and plan.generation.stops == (reason,)


def test_a_judge_that_reads_whole_responses_joins_when_they_finish():
    plan = plan_of({"judge": {"kind": "embedding"}})
    assert plan.generation.on and not plan.prefix.on
    reason = "darling.judge.kind=embedding reads whole responses"
    assert plan.lines()[-1] == (
        f"darling.prefix_judging=true: responses join the judge stream when they finish "
        f"because {reason}"
    )


def test_token_truncation_and_a_fallback_each_stop_prefix_judging():
    judge = {**SERVED, "truncation": "tokens", "tokenizer": "t/t", "fallback": {"kind": "lexical"}}
    plan = plan_of({"judge": judge})
    assert plan.prefix.stops == (
        "darling.judge.truncation=tokens: a token cut is settled only by the final text",
        "darling.judge.fallback judges whole responses when a request fails",
    )
    assert plan.prefix.reason == "; ".join(plan.prefix.stops)


def test_the_trl_engine_judges_in_its_reward_function():
    plan = plan_of(engine="trl")
    assert not (plan.log_probs.on or plan.generation.on or plan.prefix.on)
    assert plan.fallback.on and plan.fallback.reason == TRL_ENGINE
    assert {plan.log_probs.reason, plan.generation.reason, plan.prefix.reason} == {TRL_ENGINE}
    assert plan.lines() == []


def test_the_plan_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan_of().prefix.on = False  # type: ignore[misc]
