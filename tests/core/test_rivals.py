"""The rival methods (darling_nemo/methods/: pass_at_k.py, outcome.py, gdpo.py;
`darling.method`, `fusion: gdpo`).

Hand-worked groups with the arithmetic in comments, hypothesis properties (pass@k: zero mean
per group, symmetry, the degenerate groups, k = 1 is GRPO), and a parity test of the pass@k
advantage against its definition computed independently here: enumerate every k-subset of
a group, score it 1 if it holds a correct response, and average what each response's
subsets score (the formula the authors' code, RUCAIBox/Passk_Training code/passk_adv.py,
computes in closed form).
"""

from __future__ import annotations

import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from darling_nemo.core import darling_batch, same_text
from darling_nemo.methods.gdpo import separately_normalized, whiten_batch
from darling_nemo.methods.outcome import outcome_penalty
from darling_nemo.methods.pass_at_k import passk_advantages, passk_group_statistics
from darling_nemo.schema import ConfigError, validate_darling

# ------------------------------------------------------------------------- pass@k by hand


def test_passk_four_responses_two_correct_k2_by_hand():
    # n=4, c=2, k=2. C(4,2)=6 subsets; C(2,2)=1 holds no correct response: rho = 5/6.
    # sigma = sqrt(5/6 * 1/6) = sqrt(5)/6. Correct: (1 - 5/6)/sigma = (1/6)/(sqrt(5)/6) = 1/sqrt(5).
    # tail = C(1,1)/C(3,1) = 1/3. Incorrect: (1/6 - 1/3)/sigma = (-1/6)/(sqrt(5)/6) = -1/sqrt(5).
    adv = passk_advantages([True, False, False, True], k=2)
    np.testing.assert_allclose(adv, [1, -1, -1, 1] / np.sqrt(5))
    # the same through darling.method=pass_at_k: quality 1 is correct, 0 is not
    s = validate_darling({"method": "pass_at_k", "k": 2}).settings()
    batch = darling_batch(["a", "b", "c", "d"], [1.0, 0.0, 0.0, 1.0], [0] * 4, None, s)
    np.testing.assert_allclose(batch.advantage, [1, -1, -1, 1] / np.sqrt(5))


def test_passk_eight_responses_one_correct_k4_by_hand():
    # n=8, c=1, k=4. rho = 1 - C(7,4)/C(8,4) = 1 - 35/70 = 1/2, sigma = 1/2.
    # Correct: (1/2)/(1/2) = 1. tail = C(6,3)/C(7,3) = 20/35 = 4/7.
    # Incorrect: (1/2 - 4/7)/(1/2) = (-1/14)*2 = -1/7. Sum: 1 - 7/7 = 0.
    adv = passk_advantages([False] * 7 + [True], k=4)
    np.testing.assert_allclose(adv, [-1 / 7] * 7 + [1.0])


def test_passk_degenerate_groups_are_zero():
    # c = 0: rho = 0, sigma = 0 -> 0 for everyone (nothing can be learned from the group).
    np.testing.assert_array_equal(passk_advantages([False] * 5, k=2), np.zeros(5))
    # c = n: rho = 1, sigma = 0.
    np.testing.assert_array_equal(passk_advantages([True] * 5, k=2), np.zeros(5))
    # n - c < k (4 correct of 5, k = 2: every pair holds a correct one): rho = 1, sigma = 0.
    np.testing.assert_array_equal(passk_advantages([True] * 4 + [False], k=2), np.zeros(5))
    assert passk_group_statistics(5, 4, 2) == (1.0, 0.0, 0.0)  # tail C(0,1)/C(4,1) = 0


def test_passk_refuses_k_above_the_group():
    with pytest.raises(ValueError, match="1 <= k <= n"):
        passk_advantages([True, False], k=3)


# ------------------------------------------------------------------------- pass@k properties


def subset_definition(correct: list[bool], k: int) -> np.ndarray:
    """Independent of the closed form: over every k-subset S, the reward R(S) = any correct
    in S; rho = mean R; a response's expected reward is the mean R over the subsets that
    hold it; its advantage is (that - rho) / sigma, sigma = sqrt(rho (1 - rho)), 0 if 0."""
    n = len(correct)
    subsets = list(itertools.combinations(range(n), k))
    score = {s: float(any(correct[i] for i in s)) for s in subsets}
    rho = sum(score.values()) / len(subsets)
    sigma = np.sqrt(rho * (1 - rho))
    if sigma == 0:
        return np.zeros(n)
    holding = [[score[s] for s in subsets if i in s] for i in range(n)]
    return np.array([(np.mean(h) - rho) / sigma for h in holding])


binary_group = st.lists(st.booleans(), min_size=1, max_size=9)


@settings(max_examples=150)
@given(binary_group, st.data())
def test_passk_equals_the_subset_definition(correct, data):
    k = data.draw(st.integers(1, len(correct)))
    np.testing.assert_allclose(
        passk_advantages(correct, k), subset_definition(correct, k), atol=1e-12
    )


@pytest.mark.parametrize(
    ("correct", "k"),
    [
        ([1, 0, 0, 0, 0, 0, 0, 0], 4),
        ([1, 1, 0, 0, 0, 0, 0, 0], 2),
        ([1, 0, 1, 0, 0, 1, 0, 0], 3),
        ([0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8),
        ([1, 1, 1, 0, 0, 0], 1),
    ],
)
def test_passk_parity_with_the_published_formula(correct, k):
    # The authors' closed form, written out here with math.comb and their 1e-6 in the
    # denominator: ours drops the epsilon, so the two agree to a factor sigma/(sigma + 1e-6).
    n, c = len(correct), sum(correct)
    rho = 1 - comb(n - c, k) / comb(n, k)
    sigma = np.sqrt(rho * (1 - rho))
    pos = (1 - rho) / (sigma + 1e-6)
    neg = (1 - rho - comb(n - c - 1, k - 1) / comb(n - 1, k - 1)) / (sigma + 1e-6)
    published = np.where(np.asarray(correct) == 1, pos, neg)
    ours = passk_advantages([bool(x) for x in correct], k)
    np.testing.assert_allclose(ours, published, rtol=1e-5)
    np.testing.assert_allclose(ours, subset_definition([bool(x) for x in correct], k))


@settings(max_examples=150)
@given(binary_group, st.data())
def test_passk_zero_mean_signs_and_symmetry(correct, data):
    k = data.draw(st.integers(1, len(correct)))
    adv = passk_advantages(correct, k)
    assert abs(adv.sum()) < 1e-9  # n (1 - rho) = (n - c) tail: zero mean per group
    mask = np.asarray(correct)
    assert (adv[mask] >= 0).all() and (adv[~mask] <= 1e-12).all()
    # symmetric: a permutation of the group permutes the advantages
    perm = data.draw(st.permutations(range(len(correct))))
    np.testing.assert_allclose(passk_advantages([correct[i] for i in perm], k), adv[perm])


@settings(max_examples=100)
@given(binary_group)
def test_passk_with_k_1_is_grpo_with_the_population_std(correct):
    q = np.asarray(correct, dtype=float)
    std = q.std()
    expected = (q - q.mean()) / std if std > 0 else np.zeros_like(q)
    np.testing.assert_allclose(passk_advantages(correct, 1), expected, atol=1e-12)


# ------------------------------------------------------------------------- outcome exploration


def test_outcome_penalty_by_hand():
    # n = 5, answers [A, A, B, A, C]: A has 3 members, each with 2 others; B and C none.
    # coef 0.5: A gets -0.5 * 2/5 = -0.2; B and C 0.
    np.testing.assert_allclose(outcome_penalty([0, 0, 1, 0, 2], 0.5), [-0.2, -0.2, 0, -0.2, 0])


def test_outcome_method_by_hand():
    # One group of 4, quality [1, 1, 0, 1], answers "x=4", "x=4" (the same text: one answer
    # without the judge), "7", and "4", which the answer judge puts with "x=4".
    # Answer classes [0, 0, 1, 0]; with coef 1 the repeats 2, 2, 0, 2 over n = 4 cost
    # -0.5, -0.5, 0, -0.5.
    texts = ["x=4", "x=4", "7", "4"]

    def answer_judge(pairs):
        value = {"x=4": 4, "4": 4, "7": 7}
        return [float(value[a] == value[b]) for a, b in pairs]

    s = validate_darling({"method": "outcome", "outcome_coef": 1.0}).settings()
    batch = darling_batch(texts, [1, 1, 0, 1], [0] * 4, answer_judge, s)
    assert batch.class_ids.tolist() == [0, 0, 1, 0] and batch.num_classes == [2]
    # reward = q + penalty: 1 - 0.5, 1 - 0.5, 0 - 0, 1 - 0.5 = [0.5, 0.5, 0, 0.5]; mean 0.375
    np.testing.assert_allclose(batch.reward, [0.5, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(batch.advantage, [0.125, 0.125, -0.375, 0.125])
    # "x=4" vs "x=4" is decided without the judge (same text); 3 pairs of 6 go to it at most
    assert batch.pairs_judged <= 5


def test_outcome_ignores_the_short_answer_rule():
    # The reference short-answer rule would join "x = 4" and "x = 5" (3 shared words of 3):
    # outcome classes come from the answer judge only.
    assert same_text("x = 4", "x = 5") is None
    s = validate_darling({"method": "outcome"}).settings()
    batch = darling_batch(["x = 4", "x = 5"], [1, 0], [0, 0], lambda p: [0.0] * len(p), s)
    assert batch.class_ids.tolist() == [0, 1]


def test_outcome_differs_from_the_papers_placement_by_a_group_constant_by_hand():
    # docs/rivals.md: the paper adds coef * b to the task advantage, uncentred; here b is added
    # to the reward before the group baseline. Group of 4, answers [A, A, A, B], q [1, 1, 1, 0],
    # coef 0.5: b = -[2, 2, 2, 0]/4 = [-0.5, -0.5, -0.5, 0].
    # here: reward q + 0.5 b = [0.75, 0.75, 0.75, 0], mean 0.5625 -> [0.1875 x 3, -0.5625]
    # paper (no std): (q - 0.75) + 0.5 b = [0.25 - 0.25 x 3, -0.75 + 0] = [0, 0, 0, -0.75]
    # difference 0.1875 on every response = -0.5 * mean(b) = -0.5 * (-1.5 / 4)
    s = validate_darling({"method": "outcome", "outcome_coef": 0.5}).settings()
    batch = darling_batch(["4", "4", "4", "7"], [1, 1, 1, 0], [0] * 4, None, s)
    np.testing.assert_allclose(batch.advantage, [0.1875, 0.1875, 0.1875, -0.5625])
    paper = np.array([1, 1, 1, 0]) - 0.75 + outcome_penalty([0, 0, 0, 1], 0.5)
    np.testing.assert_allclose(paper, [0, 0, 0, -0.75])
    np.testing.assert_allclose(batch.advantage - paper, [0.1875] * 4)


@settings(max_examples=50)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1)), min_size=2, max_size=8),
    st.floats(0, 2),
)
def test_outcome_differs_from_the_papers_placement_by_a_group_constant(rows, coef):
    answers = [a for a, _ in rows]
    q = np.array([float(c) for _, c in rows])
    s = validate_darling({"method": "outcome", "outcome_coef": coef}).settings()
    texts = [f"answer {a}" for a in answers]  # equal answers are equal texts: no judge needed
    batch = darling_batch(texts, q, [0] * len(rows), lambda p: [0.0] * len(p), s)
    bonus = outcome_penalty(answers, coef)
    paper = (q - q.mean()) + bonus
    np.testing.assert_allclose(batch.advantage - paper, -bonus.mean(), atol=1e-12)


@settings(max_examples=100)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=10), st.floats(0, 2))
def test_outcome_penalty_counts_repeats(ids, coef):
    pen = outcome_penalty(ids, coef)
    n = len(ids)
    for i, a in enumerate(ids):
        assert pen[i] == pytest.approx(-coef * (ids.count(a) - 1) / n)
    assert (pen <= 0).all()


# ------------------------------------------------------------------------- separate normalisation


def test_gdpo_fusion_by_hand():
    # Group of 4: q = [1, 1, 0, 1], d = [1/3, 1/3, 1, 1] (classes {0,1}, {2}, {3}; floor 0).
    # z(q): mean 3/4, centred [1/4, 1/4, -3/4, 1/4], sample var (3*(1/16) + 9/16)/3 = 1/4,
    #   std 1/2 -> [1/2, 1/2, -3/2, 1/2] (epsilon 1e-6 aside).
    # z(d): mean 2/3, centred [-1/3, -1/3, 1/3, 1/3], sample var (4/9)/3, std 2/(3 sqrt 3) = 0.3849
    #   -> [-sqrt(3)/2, -sqrt(3)/2, sqrt(3)/2, sqrt(3)/2] = +-0.8660.
    q, d = np.array([1.0, 1, 0, 1]), np.array([1 / 3, 1 / 3, 1, 1])
    h = np.sqrt(3) / 2
    np.testing.assert_allclose(
        separately_normalized(q, d, diversity_weight=1.0, epsilon=1e-6),
        [0.5 - h, 0.5 - h, -1.5 + h, 0.5 + h],
        rtol=1e-5,
    )
    # Constant quality: its term is 0 (NeMo-RL divides only where std > 0), diversity ranks.
    np.testing.assert_allclose(
        separately_normalized(np.ones(4), d, diversity_weight=2.0, epsilon=0.0),
        [-2 * h, -2 * h, 2 * h, 2 * h],
    )


def test_gdpo_epsilon_is_added_to_the_std():
    # q = [0, 2e-6]: centred [-1e-6, 1e-6], sample std 2e-6 / sqrt(2) = sqrt(2) e-6. With
    # epsilon 1e-6 the divisor is (sqrt(2) + 1) e-6: z = -+1 / (sqrt(2) + 1) = -+0.41421;
    # without it, -+1 / sqrt(2) = -+0.70711. Diversity constant: its term is 0.
    q, d = np.array([0.0, 2e-6]), np.array([0.5, 0.5])
    z = 1 / (np.sqrt(2) + 1)
    got = separately_normalized(q, d, diversity_weight=1.0, epsilon=1e-6)
    np.testing.assert_allclose(got, [-z, z], rtol=1e-12)
    # epsilon 1 on a std of sqrt(2): 1 / (sqrt(2) + 1) again, at an ordinary scale
    got = separately_normalized(np.array([0.0, 2.0]), d, diversity_weight=1.0, epsilon=1.0)
    np.testing.assert_allclose(got, [-z, z], rtol=1e-12)


def test_gdpo_whitens_the_batch_and_keeps_groups_centred():
    s = validate_darling({"fusion": "gdpo", "floor": 0.0}).settings()
    texts = ["a", "a", "b", "c", "d", "d"]
    batch = darling_batch(texts, [1, 1, 0, 1, 1, 0], [0, 0, 0, 0, 1, 1], None, s)
    assert batch.reward.std(ddof=1) == pytest.approx(1.0)
    for rows in ([0, 1, 2, 3], [4, 5]):
        assert abs(batch.reward[rows].mean()) < 1e-12
    np.testing.assert_allclose(batch.advantage, batch.reward, atol=1e-12)
    # group 1 has one class (d constant) and q [1, 0]: only quality speaks there
    assert batch.reward[4] > 0 > batch.reward[5]


def test_whiten_batch_of_constants_is_centred():
    np.testing.assert_array_equal(whiten_batch(np.array([2.0, 2.0])), [0.0, 0.0])
    # two values are whitened too: [1, 3] -> centred [-1, 1], sample std sqrt(2)
    np.testing.assert_allclose(whiten_batch(np.array([1.0, 3.0])), [-(0.5**0.5), 0.5**0.5])


# ------------------------------------------------------------------------- engines' contract


@settings(max_examples=60)
@given(
    st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), min_size=2, max_size=8),
    st.sampled_from(["pass_at_k", "outcome", "gdpo"]),
)
def test_every_method_gives_a_mean_zero_advantage_a_group_baseline_leaves_alone(rows, method):
    """Both engines let their own group-mean baseline run after the core (TRL's, NeMo-RL's):
    pass@k and gdpo write advantages with mean 0 per group, so it changes nothing."""
    texts = [t for t, _ in rows]
    quality = [float(c) for _, c in rows]
    cfg = {"fusion": "gdpo"} if method == "gdpo" else {"method": method, "k": 2}
    s = validate_darling(cfg).settings()
    judge = lambda pairs: [float(a == b) for a, b in pairs]  # noqa: E731
    batch = darling_batch(texts, quality, [0] * len(rows), judge, s)
    if method != "outcome":
        assert abs(batch.reward.mean()) < 1e-9
        np.testing.assert_allclose(batch.advantage, batch.reward, atol=1e-9)
    assert abs(batch.advantage.mean()) < 1e-9


def test_pass_at_k_refuses_graded_rewards_and_large_k():
    s = validate_darling({"method": "pass_at_k", "k": 2}).settings()
    with pytest.raises(ValueError, match=r"quality\[1\] is 0.5: darling.method=pass_at_k"):
        darling_batch(["a", "b"], [1.0, 0.5], [0, 0], None, s)
    s = validate_darling({"method": "pass_at_k", "k": 3}).settings()
    with pytest.raises(ValueError, match=r"darling\.k=3 but a group has 2 responses"):
        darling_batch(["a", "b"], [1.0, 0.0], [0, 0], None, s)


@pytest.mark.parametrize(
    ("section", "named"),
    [
        (
            {"method": "pass_at_k", "normalize_std": True},
            "normalize_std=true with method=pass_at_k",
        ),
        ({"method": "pass_at_k", "baseline": "leave_one_out"}, "baseline=leave_one_out"),
        ({"fusion": "gdpo", "normalize_std": True}, "normalize_std=true with fusion=gdpo"),
        ({"method": "outcome", "enabled": False}, "enabled=false is plain GRPO"),
        ({"method": "outcome", "fusion": "additive"}, "fusion=additive applies to method darling"),
        ({"method": "outcome", "partition_scope": "correct"}, "partition_scope=correct"),
        ({"method": "pass_at_k", "k": 0}, "darling.k"),
        ({"method": "best_of_n"}, "darling.method"),
    ],
)
def test_settings_a_method_cannot_honour_are_refused_by_name(section, named):
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")):
        validate_darling(section)


def test_the_judge_is_asked_only_where_a_method_uses_it():
    assert validate_darling({}).calls_judge
    assert validate_darling({"method": "pass_at_k"}).calls_judge  # its classes: metrics
    assert not validate_darling({"method": "outcome"}).calls_judge  # the task's answer judge
