"""Judging during generation (judge_stream.py, core.partition_groups' `known`): the classes,
rewards and advantages are the synchronous ones whatever finished first."""

from __future__ import annotations

import random
import threading
import time

import numpy as np
from helpers import REPO
from hypothesis import given, settings
from hypothesis import strategies as st
from test_core_properties import group, seeded_judge

from darling_nemo.core import (
    darling_batch,
    lexical_decision,
    partition_all_pairs,
    partition_groups,
)
from darling_nemo.judge_stream import JudgeStream
from darling_nemo.schema import validate_darling

CONFIG = REPO / "conf" / "math_qwen3_4b_darling.yaml"


class CountingJudge:
    """Records every pair it is sent (to prove nothing is judged twice)."""

    def __init__(self, judge, fail_after: int | None = None) -> None:
        self.judge, self.fail_after = judge, fail_after
        self.sent: list[tuple[str, str]] = []
        self.calls = 0

    def __call__(self, pairs):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise ConnectionError("classifier node went away")
        self.sent.extend(pairs)
        return self.judge(pairs)


@settings(max_examples=1500, deadline=None)
@given(
    groups=st.lists(group, min_size=1, max_size=3),
    seed=st.integers(),
    thr=st.floats(0, 1),
    share=st.floats(0, 1),
    pick=st.randoms(use_true_random=False),
)
def test_known_verdicts_give_the_all_pairs_classes(groups, seed, thr, share, pick):
    """Any subset of the judge's own verdicts, given as known, changes no class; those pairs
    are not sent again; judged-before + judged-now never exceeds the all-pairs count."""
    judge = seeded_judge(seed)
    known = [
        {
            (i, j): judge([(g[i], g[j])])[0]
            for i in range(len(g))
            for j in range(i + 1, len(g))
            if pick.random() < share
        }
        for g in groups
    ]
    counting = CountingJudge(judge)
    parts = partition_groups(groups, counting, thr, known)
    for g, part in zip(groups, parts, strict=True):
        assert part.class_ids == partition_all_pairs(g, judge, thr).class_ids
        assert part.pairs_judged <= part.pairs_total
    # pairs_judged counts the known verdicts the lexical rules leave open, plus what was sent
    used = sum(
        lexical_decision(g[i], g[j]) is None
        for g, k in zip(groups, known, strict=True)
        for i, j in k
    )
    assert len(counting.sent) == sum(p.pairs_judged for p in parts) - used


def _stream_batch(responses, prompts, judge, order, pause_s=0.0):
    """Feed the stream in `order` from another thread, as the rollout's samples finish."""
    stream = JudgeStream(judge, 0.5)
    stream.open()

    def finish_samples():
        for row in order:
            stream.add(row, prompts[row], responses[row])
            if pause_s:
                time.sleep(pause_s)

    feeder = threading.Thread(target=finish_samples)
    feeder.start()
    feeder.join()
    return stream.close()


@settings(max_examples=150, deadline=None)
@given(
    groups=st.lists(group.filter(lambda g: len(g) >= 2), min_size=1, max_size=3),
    seed=st.integers(),
    shuffle=st.randoms(use_true_random=False),
)
def test_streamed_darling_batch_equals_synchronous(groups, seed, shuffle):
    """Rows finish in any order; streamed verdicts + the rest judged at the end give the
    synchronous rewards, advantages and classes bit for bit."""
    responses = [r for g in groups for r in g]
    prompts = [k for k, g in enumerate(groups) for _ in g]
    quality = [float(row % 2) for row in range(len(responses))]
    settings_ = validate_darling({}).settings()
    sync = darling_batch(responses, quality, prompts, seeded_judge(seed), settings_)

    order = list(range(len(responses)))
    shuffle.shuffle(order)
    judge = CountingJudge(seeded_judge(seed))
    verdicts = _stream_batch(responses, prompts, judge, order)
    for (a, b), (text_a, text_b, p) in verdicts.items():
        assert a < b and prompts[a] == prompts[b]
        assert (text_a, text_b) == (responses[a], responses[b])
        assert p == seeded_judge(seed)([(text_a, text_b)])[0]
    known = {pair: p for pair, (_, _, p) in verdicts.items()}
    streamed = darling_batch(responses, quality, prompts, judge, settings_, known=known)
    assert np.array_equal(streamed.class_ids, sync.class_ids)
    assert np.array_equal(streamed.reward, sync.reward)
    assert np.array_equal(streamed.advantage, sync.advantage)
    # every pair the stream judged is counted once, and none is sent again at the end
    assert len(judge.sent) == streamed.pairs_judged


def test_stream_judges_while_samples_still_arrive():
    """Two groups of 4 long responses arriving 20 ms apart: the stream judges pairs before
    the last response is in, and after the last one only what involves it is left."""
    rng = random.Random(0)
    words = ["x", "y", "z", "w"]
    responses = [" ".join(rng.choice(words) for _ in range(8)) for _ in range(8)]
    prompts = [0] * 4 + [1] * 4
    judge = CountingJudge(seeded_judge(3))
    verdicts = _stream_batch(responses, prompts, judge, [0, 4, 1, 5, 2, 6, 3, 7], pause_s=0.02)
    # Pairs (0, 1) and (4, 5) exist after the 4th arrival, 80 ms before the end.
    assert (0, 1) in verdicts and (4, 5) in verdicts
    assert judge.calls >= 2
    settings_ = validate_darling({}).settings()
    known = {pair: p for pair, (_, _, p) in verdicts.items()}
    rest = CountingJudge(seeded_judge(3))
    streamed = darling_batch(responses, [1.0] * 8, prompts, rest, settings_, known=known)
    sync = darling_batch(responses, [1.0] * 8, prompts, seeded_judge(3), settings_)
    assert np.array_equal(streamed.reward, sync.reward)
    assert not set(rest.sent) & set(judge.sent)


def test_a_judge_error_ends_the_stream_and_the_rest_is_judged_at_the_end():
    responses = ["alpha beta gamma delta epsilon zeta", "one two three four five six"] * 3
    prompts = [0] * 6
    judge = CountingJudge(seeded_judge(1), fail_after=1)
    verdicts = _stream_batch(responses, prompts, judge, list(range(6)), pause_s=0.01)
    settings_ = validate_darling({}).settings()
    known = {pair: p for pair, (_, _, p) in verdicts.items()}
    streamed = darling_batch(responses, [1.0] * 6, prompts, seeded_judge(1), settings_, known)
    sync = darling_batch(responses, [1.0] * 6, prompts, seeded_judge(1), settings_)
    assert np.array_equal(streamed.class_ids, sync.class_ids)
    assert judge.calls >= 2  # the failing call happened and stopped the stream


def test_close_without_open_and_reopen_drop_old_rollouts():
    stream = JudgeStream(seeded_judge(0), 0.5)
    assert stream.close() == {}
    stream.add(0, "p", "never opened: dropped")
    stream.open()
    stream.add(0, "p", "first rollout a b c d e f")
    stream.add(1, "p", "first rollout g h i j k l")
    give_up = time.monotonic() + 120  # a loaded machine may take long; an idle one ms
    while not stream.verdicts and time.monotonic() < give_up:
        time.sleep(0.01)  # close() stops after the call in flight: let the pair go first
    assert set(stream.close()) == {(0, 1)}
    stream.open()
    stream.add(1, "p", "second rollout a b c d e f")
    assert stream.close() == {}


def test_configs_that_cannot_judge_during_generation_say_which_key():
    from darling_nemo.config import load_config
    from darling_nemo.nemo_rl.checks import stream_fallbacks

    cfg = load_config(CONFIG, [])
    darling = validate_darling(cfg["darling"])
    assert darling.judge_during_generation and stream_fallbacks(cfg, darling) == []

    sync_engine = load_config(CONFIG, ["policy.generation.vllm_cfg.async_engine=false"])
    (reason,) = stream_fallbacks(sync_engine, darling)
    assert reason.startswith("policy.generation.vllm_cfg.async_engine is not true")

    for change, key in [
        ({"partition_scope": "correct"}, "darling.partition_scope=correct"),
        ({"judge_rounds": "one"}, "darling.judge_rounds=one"),
        ({"judge": {"kind": "lexical"}}, "darling.judge.kind"),
        ({"diversity": "ngram"}, "darling.diversity"),
    ]:
        other = validate_darling({**cfg["darling"], **change})
        (reason,) = stream_fallbacks(cfg, other)
        assert key in reason, (change, reason)
