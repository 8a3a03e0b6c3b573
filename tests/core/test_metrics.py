"""pass@k: hand values, brute-force enumeration, exact rationals, and the vectorised curve;
the darling/* step metrics both engines log, on hand-made batches."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import DarlingBatch, darling_batch
from darling_nemo.metrics import (
    TimedJudge,
    darling_step_metrics,
    default_ks,
    distinct_correct_per_group,
    judge_usage,
    mean_pass_at_k,
    pass_at_k,
    pass_at_k_curve,
    usage_since,
)
from darling_nemo.schema import DarlingConfig


def brute_force_pass_at_k(correct: list[bool], k: int) -> Fraction:
    """Fraction of all k-subsets of the samples that contain at least one correct sample."""
    subsets = list(itertools.combinations(correct, k))
    return Fraction(sum(any(s) for s in subsets), len(subsets))


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_hand_values():
    # pass@1 is the fraction correct: 3 of 10 -> 0.3.
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    # n=4, c=2, k=2: 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6.
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    # n=5, c=1, k=3: 1 - C(4,3)/C(5,3) = 1 - 4/10 = 0.6 (= k/n when c = 1).
    assert pass_at_k(5, 1, 3) == pytest.approx(0.6)
    # n=4, c=1, k=4: the one correct sample is always drawn -> 1.
    assert pass_at_k(4, 1, 4) == 1.0
    # No correct sample -> 0 for every k.
    assert pass_at_k(8, 0, 8) == 0.0
    # n - c < k: every k-subset holds a correct one (n=4, c=3, k=2).
    assert pass_at_k(4, 3, 2) == 1.0
    # n=256, c=1, k=128: 1 - C(255,128)/C(256,128) = 1 - 128/256 = 0.5.
    assert pass_at_k(256, 1, 128) == pytest.approx(0.5, abs=1e-15)


@pytest.mark.parametrize("n", range(1, 11))
def test_matches_brute_force_enumeration(n):
    # Every pattern of c correct samples among n gives the same value; enumerate subsets.
    for c in range(n + 1):
        correct = [True] * c + [False] * (n - c)
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(
                float(brute_force_pass_at_k(correct, k)), abs=1e-12
            )


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_matches_exact_rationals_up_to_n_256(data):
    n = data.draw(st.integers(1, 256))
    c = data.draw(st.integers(0, n))
    k = data.draw(st.integers(1, n))
    # Product form vs the exact binomial ratio (Fractions): no cancellation error.
    assert pass_at_k(n, c, k) == pytest.approx(float(exact_pass_at_k(n, c, k)), abs=1e-12)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 256), st.data())
def test_monotone_in_k_and_c_and_bounded(n, data):
    c = data.draw(st.integers(0, n))
    curve = pass_at_k_curve(n, c, list(range(1, n + 1)))
    assert np.all((curve >= 0) & (curve <= 1))
    assert np.all(np.diff(curve) >= -1e-12)  # more tries never hurt
    if c < n:
        more = pass_at_k_curve(n, c + 1, list(range(1, n + 1)))
        assert np.all(more >= curve - 1e-12)  # one more correct sample never hurts


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 256), st.data())
def test_curve_equals_scalar(n, data):
    c = data.draw(st.integers(0, n))
    ks = default_ks(n)
    np.testing.assert_allclose(
        pass_at_k_curve(n, c, ks), [pass_at_k(n, c, k) for k in ks], rtol=0, atol=1e-13
    )


def test_default_ks():
    assert default_ks(1) == [1]
    assert default_ks(8) == [1, 2, 4, 8]
    assert default_ks(10) == [1, 2, 4, 8, 10]
    assert default_ks(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]


def test_mean_over_problems():
    # Problem 1: n=4, c=2 -> pass@1 = 0.5, pass@2 = 5/6. Problem 2: n=4, c=0 -> 0, 0.
    # Means: pass@1 = 0.25, pass@2 = 5/12.
    got = mean_pass_at_k([(4, 2), (4, 0)], [1, 2])
    assert got == {1: pytest.approx(0.25), 2: pytest.approx(5 / 12)}


@pytest.mark.parametrize(
    "args", [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)], ids=["c>n", "c<0", "k=0", "k>n"]
)
def test_bad_arguments_raise(args):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(*args)
    n, c, k = args
    with pytest.raises(ValueError, match="pass_at_k_curve"):
        pass_at_k_curve(n, c, [k])


def test_distinct_correct_per_group_with_interleaved_groups():
    # Rows alternate between groups "a" and "b" (not contiguous). Classes are per group.
    #   a: rows 0, 2, 4, 6 -> classes 0, 0, 1, 2; quality 1, 1, 1, 0 -> correct classes {0, 1}: 2
    #   b: rows 1, 3, 5    -> classes 0, 1, 1;    quality 0, 1, 1    -> correct classes {1}: 1
    class_ids = [0, 0, 0, 1, 1, 1, 2]
    quality = [1, 0, 1, 1, 1, 1, 0]
    groups = ["a", "b", "a", "b", "a", "b", "a"]
    assert distinct_correct_per_group(class_ids, quality, groups) == [2, 1]
    # Contiguous slicing by sizes [4, 3] would have read rows 0..3 as group "a": wrong.
    # No classes (-1, diversity: ngram): every correct response counts: a -> 3, b -> 2.
    assert distinct_correct_per_group([-1] * 7, quality, groups) == [3, 2]
    with pytest.raises(ValueError, match="lengths differ"):
        distinct_correct_per_group([0, 0], [1], ["a", "a"])


def test_distinct_correct_per_group_on_a_core_batch_with_interleaved_groups():
    # Group 0 = rows 0, 2, 4: "x y" twice (one class) and "z"; group 1 = rows 1, 3: "x y", "w".
    # All correct: group 0 has classes {x y}, {z} -> 2; group 1 has {x y}, {w} -> 2.
    texts = ["x y", "x y", "x y", "w", "z"]
    batch = darling_batch(texts, [1] * 5, [0, 1, 0, 1, 0], None, DarlingConfig().settings())
    assert distinct_correct_per_group(batch.class_ids, batch.quality, [0, 1, 0, 1, 0]) == [2, 2]


# Two batches of one step (NeMo-RL's dynamic sampling can score several), made by hand.
# Batch 1: groups "a" (rows 0, 2, 4) and "b" (rows 1, 3, 5), interleaved.
#   a: classes {0, 2}, {4}; quality 0, 1, 1 -> correct classes {0, 1}: 2 distinct
#   b: one class {1, 3, 5}; quality 0, 1, 1 -> 1 distinct
# Batch 2: one group of 2, one class, both correct -> 1 distinct.
# Advantages are arbitrary numbers here (the metrics only average their absolute values).
STEP_BATCHES = [
    (
        DarlingBatch(
            quality=np.array([0.0, 0.0, 1.0, 1.0, 1.0, 1.0]),
            diversity=np.array([0.5, 0.1, 0.5, 0.1, 1.0, 0.1]),
            reward=np.array([0.0, 0.0, 0.5, 0.1, 1.0, 0.1]),
            advantage=np.array([0.25, -0.5, 0.25, 0.25, -0.5, 0.25]),
            class_ids=np.array([0, 0, 0, 0, 1, 0]),
            num_classes=[2, 1],
            group_sizes=[3, 3],
            group_pairs_judged=[1, 0],
            group_pairs_total=[3, 3],
        ),
        ["a", "b", "a", "b", "a", "b"],
    ),
    (
        DarlingBatch(
            quality=np.array([1.0, 1.0]),
            diversity=np.array([0.1, 0.1]),
            reward=np.array([0.1, 0.1]),
            advantage=np.array([0.0, 0.0]),
            class_ids=np.array([0, 0]),
            num_classes=[1],
            group_sizes=[2],
            group_pairs_judged=[0],
            group_pairs_total=[1],
        ),
        ["a", "a"],
    ),
]


def test_darling_step_metrics_by_hand():
    judge = {"judge_calls": 2.0, "judge_errors": 0.0, "judge_seconds": 0.25}
    m = darling_step_metrics(STEP_BATCHES, semantic=True, seconds=0.5, judge=judge)
    assert m == pytest.approx(
        {
            "quality_mean": 6 / 8,  # 6 of 8 rows have quality 1
            "correct_fraction": 6 / 8,
            # (0.5 + 0.1 + 0.5 + 0.1 + 1.0 + 0.1 + 0.1 + 0.1) / 8 = 2.5 / 8
            "diversity_mean": 2.5 / 8,
            # (0.5 + 0.1 + 1.0 + 0.1 + 0.1 + 0.1) / 8 = 1.9 / 8
            "reward_mean": 1.9 / 8,
            # (0.25 + 0.5 + 0.25 + 0.25 + 0.5 + 0.25 + 0 + 0) / 8 = 2 / 8
            "advantage_abs_mean": 2 / 8,
            "num_groups": 3,
            "distinct_correct_per_group": (2 + 1 + 1) / 3,
            "pairs_judged": 1,
            "pairs_total": 3 + 3 + 1,
            "pairs_judged_fraction": 1 / 7,
            "seconds": 0.5,
            "classes_per_group": (2 + 1 + 1) / 3,
            # k = 1 .. the largest group (3): two groups of 1 class, one of 2, none of 3
            "classes_per_group_hist/1": 2 / 3,
            "classes_per_group_hist/2": 1 / 3,
            "classes_per_group_hist/3": 0.0,
            "collapsed_group_share": 2 / 3,  # b and batch 2's group: one class each
            **judge,
        }
    )


def test_darling_step_metrics_without_classes():
    # diversity: ngram partitions nothing (class ids -1, 0 classes): no class metrics, and
    # every correct response is a distinct answer: a -> 2, b -> 2, batch 2 -> 2; mean 2.
    ngram = [
        (
            replace(
                batch, class_ids=np.full(len(ids), -1), num_classes=[0] * len(batch.group_sizes)
            ),
            ids,
        )
        for batch, ids in STEP_BATCHES
    ]
    m = darling_step_metrics(ngram, semantic=False, seconds=0.0, judge={})
    assert not [k for k in m if "class" in k or "collapsed" in k]
    assert m["distinct_correct_per_group"] == 2.0
    assert m["quality_mean"] == pytest.approx(6 / 8)
    with pytest.raises(ValueError, match="at least one batch"):
        darling_step_metrics([], semantic=True, seconds=0.0, judge={})


def test_no_group_of_two_means_no_collapse():
    # One group of a single response: 1 class, but a group of 1 cannot collapse -> 0.0.
    single = darling_batch(["x"], [1.0], [0], None, DarlingConfig().settings())
    m = darling_step_metrics([(single, [0])], semantic=True, seconds=0.0, judge={})
    assert (m["classes_per_group_hist/1"], m["collapsed_group_share"]) == (1.0, 0.0)
    assert m["pairs_judged_fraction"] == 0.0  # no pairs at all: 0, not 0/0


class CountingServedJudge:
    """Keeps its own counters in `stats`, as ServedJudge does; fails when told to."""

    def __init__(self):
        self.stats = {"requests": 0}
        self.fail = False

    def __call__(self, pairs):
        self.stats["requests"] += 1
        if self.fail:
            raise ConnectionError("down")
        return [0.5] * len(pairs)


def test_judge_usage_counts_calls_errors_and_the_judges_own_stats():
    assert judge_usage(None) == {"judge_calls": 0.0, "judge_errors": 0.0, "judge_seconds": 0.0}
    inner = CountingServedJudge()
    judge = TimedJudge(inner)
    assert judge([("a", "b")]) == [0.5]
    before = judge_usage(judge)
    assert (before["judge_calls"], before["judge_requests"]) == (1.0, 1.0)
    judge([("a", "b"), ("c", "d")])
    inner.fail = True
    with pytest.raises(ConnectionError):
        judge([("a", "b")])
    step = usage_since(before, judge_usage(judge))
    # Since `before`: 2 calls (one raised) and 2 requests.
    assert (step["judge_calls"], step["judge_errors"], step["judge_requests"]) == (2.0, 1.0, 2.0)
    assert step["judge_seconds"] >= 0.0
