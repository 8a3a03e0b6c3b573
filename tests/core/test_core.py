"""Hand-computed cases for the pure DARLING core (arithmetic in the comments)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from darling_nemo.core import (
    Baseline,
    PartitionScope,
    QualityShift,
    advantages,
    darling_batch,
    diversity_correct_only,
    diversity_from_classes,
    lexical_decision,
    ngram_diversity,
    partition_all_pairs,
    partition_groups,
    short_answer_equivalent,
)
from darling_nemo.methods.darling import fuse
from darling_nemo.schema import validate_darling

REFERENCE = validate_darling({}).settings()  # the schema's defaults: the reference code's
FLOOR = REFERENCE.floor  # 0.1
PLAIN = {"fusion": "multiplicative", "quality_shift": QualityShift.NONE}
MEAN_NO_STD = {"baseline": Baseline.MEAN, "normalize_std": False, "std_epsilon": 1e-6}
LOO_NO_STD = {**MEAN_NO_STD, "baseline": Baseline.LEAVE_ONE_OUT}


def table_judge(table: dict[tuple[str, str], float]):
    """A judge that looks pairs up (either order) and records every call."""
    calls: list[list[tuple[str, str]]] = []

    def judge(pairs):
        calls.append(list(pairs))
        return [table.get((a, b), table.get((b, a), 0.0)) for a, b in pairs]

    judge.calls = calls
    return judge


# ----------------------------------------------------------------------------- lexical rules


def test_short_answer_rule_reference_cases():
    # "Paris" vs "paris": 1 word each; shared {paris} -> 2*1 >= 1 -> equivalent.
    assert short_answer_equivalent("Paris", "paris") is True
    # "the answer is 42" (4 words) vs "42": shared {42}; 2*1 >= 4 is False.
    assert short_answer_equivalent("the answer is 42", "42") is False
    # "it is 42" vs "42 it is": shared {it, is, 42} = 3; 2*3 >= 3 -> equivalent.
    assert short_answer_equivalent("it is 42", "42 it is") is True
    # 4 vs 4 words sharing 2: 2*2 >= 4 -> equivalent (ties count).
    assert short_answer_equivalent("a b c d", "a b x y") is True
    # 4 vs 4 words sharing 1: 2*1 >= 4 False.
    assert short_answer_equivalent("a b c d", "a x y z") is False
    # Two empty responses: 0 >= 0 -> equivalent.
    assert short_answer_equivalent("", "   ") is True
    # Empty vs one word: longest 1, shared 0: 0 >= 1 False.
    assert short_answer_equivalent("", "yes") is False
    # 6 words: the rule does not apply.
    assert short_answer_equivalent("one two three four five six", "one") is None


def test_lexical_decision_exact_duplicates_before_short_rule():
    # Reference rule alone: "yes yes yes" has 3 words, 1 unique shared: 2*1 >= 3 False.
    assert short_answer_equivalent("yes yes yes", "yes yes yes") is False
    # Exact duplicates are decided first and are equivalent.
    assert lexical_decision("yes yes yes", "yes yes yes") is True
    long = "a long answer with more than five words"
    assert lexical_decision(long, long) is True
    assert lexical_decision(long, long + " indeed") is None


# ----------------------------------------------------------------------------- partition


def test_joke_example_from_paper():
    # n = 4, classes {a, b}, {c}, {d}: Div(a) = Div(b) = (4-2)/3 = 2/3, Div(c) = Div(d) = 3/3 = 1.
    a = "why did the programmer quit his job? because he didn't get arrays"
    b = "the programmer quit because he did not get arrays, a raise pun"
    c = "there are 10 kinds of people: those who know binary and those who don't"
    d = "a SQL query walks into a bar, walks up to two tables and asks to join them"
    judge = table_judge({(a, b): 0.9, (a, c): 0.2, (a, d): 0.1, (b, c): 0.3, (b, d): 0.0})
    (part,) = partition_groups([[a, b, c, d]], judge, threshold=0.5)
    assert part.class_ids == [0, 0, 1, 2]
    np.testing.assert_allclose(
        diversity_from_classes(part.class_ids, floor=FLOOR), [2 / 3, 2 / 3, 1, 1]
    )
    assert part.pairs_total == 6
    # All 6 pairs are needed: only (a,b) merges, and every cross-class pair must be checked.
    assert part.pairs_judged == 6


def test_transitive_closure_merges_chain():
    # a~b and b~c but the judge says a!~c: union-find still puts all three together.
    a, b, c = ("alpha " * 6).strip(), ("beta " * 6).strip(), ("gamma " * 6).strip()
    judge = table_judge({(a, b): 0.9, (b, c): 0.9, (a, c): 0.0})
    (part,) = partition_groups([[a, b, c]], judge, threshold=0.5)
    assert part.class_ids == [0, 0, 0]
    assert partition_all_pairs([a, b, c], judge, 0.5).class_ids == [0, 0, 0]
    # Wave 1 = forest {(a,b), (a,c)}: (a,b) merges, (a,c) does not. Wave 2 = (b,c): merges.
    assert part.pairs_judged == 3


def test_pair_inside_a_class_is_never_judged():
    # Wave 1 = {(a,b), (a,c)} both similar -> one class; (b,c) is skipped (0.0 never asked).
    a, b, c = ("alpha " * 6).strip(), ("beta " * 6).strip(), ("gamma " * 6).strip()
    judge = table_judge({(a, b): 0.9, (a, c): 0.9, (b, c): 0.0})
    (part,) = partition_groups([[a, b, c]], judge, threshold=0.5)
    assert part.class_ids == [0, 0, 0]
    assert part.pairs_judged == 2
    assert judge.calls == [[(a, b), (a, c)]]


def test_one_class_group_is_settled_in_one_wave_of_n_minus_1_pairs():
    # 8 long responses, judge says every pair is similar: a spanning tree of 7 pairs suffices,
    # sent in a single call.
    responses = [f"response number {i} says the same thing in many words" for i in range(8)]
    judge = table_judge({})

    def always_similar(pairs):
        judge.calls.append(list(pairs))
        return [1.0] * len(pairs)

    (part,) = partition_groups([responses], always_similar, 0.5)
    assert part.class_ids == [0] * 8
    assert part.pairs_judged == 7
    assert len(judge.calls) == 1


def test_threshold_is_strict_greater():
    a, b = ("x " * 6).strip(), ("y " * 6).strip()
    judge = table_judge({(a, b): 0.32})
    assert partition_groups([[a, b]], judge, 0.32)[0].class_ids == [0, 1]  # 0.32 > 0.32 False
    assert partition_groups([[a, b]], judge, 0.31)[0].class_ids == [0, 0]
    assert partition_all_pairs([a, b], judge, 0.32).class_ids == [0, 1]  # the one-call path
    # A verdict known before the call (judged during generation) at exactly the threshold:
    # the same strict comparison (reference: equivalent iff P(similar) > threshold), and the
    # judge is not asked again.
    for known, classes in ((0.32, [0, 1]), (0.3200001, [0, 0])):
        (part,) = partition_groups([[a, b]], judge, 0.32, known=[{(0, 1): known}])
        assert (part.class_ids, part.pairs_judged) == (classes, 1)
    assert len(judge.calls) == 3  # the three calls above, none from the known verdicts


def test_lexically_decided_pairs_never_reach_the_judge():
    # "4" and "four" are short: rule says not equivalent (0 shared). Duplicates merge.
    judge = table_judge({})
    (part,) = partition_groups([["4", "four", "4"]], judge, 0.5)
    assert part.class_ids == [0, 1, 0]
    assert part.pairs_judged == 0 and judge.calls == []


def test_no_judge_means_undecided_pairs_are_distinct():
    long1 = "this is the first of two long different answers"
    long2 = "and this is the second of two long different answers"
    (part,) = partition_groups([[long1, long2, long1]], None, 0.5)
    assert part.class_ids == [0, 1, 0]
    assert part.pairs_judged == 0


def test_judge_length_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 probabilities for 1 pairs"):
        partition_groups([["a " * 7, "b " * 7]], lambda pairs: [0.1, 0.2], 0.5)


def test_waves_batch_pairs_of_all_groups_in_one_call():
    g1 = [f"first group answer {i} with enough words here" for i in range(3)]
    g2 = [f"second group answer {i} with enough words here" for i in range(3)]
    calls = []

    def judge(pairs):
        calls.append(len(pairs))
        return [1.0] * len(pairs)

    parts = partition_groups([g1, g2], judge, 0.5)
    # Each group of one class needs 2 pairs (a spanning tree); both go in the first call.
    assert calls == [4]
    assert [p.class_ids for p in parts] == [[0, 0, 0], [0, 0, 0]]


# ----------------------------------------------------------------------------- diversity


def test_diversity_floor_all_identical_group():
    # n = 8, one class of 8: (8-8)/7 = 0 -> floored to 0.1 (reference); floor 0 gives 0.
    np.testing.assert_allclose(diversity_from_classes([0] * 8, floor=FLOOR), [0.1] * 8)
    np.testing.assert_allclose(diversity_from_classes([0] * 8, floor=0.0), [0.0] * 8)


def test_diversity_two_classes_of_four():
    # (8-4)/7 = 4/7 for every response.
    np.testing.assert_allclose(
        diversity_from_classes([0, 0, 0, 0, 1, 1, 1, 1], floor=FLOOR), [4 / 7] * 8
    )


def test_diversity_single_response_and_empty():
    np.testing.assert_allclose(diversity_from_classes([0], floor=FLOOR), [1.0])
    assert diversity_from_classes([], floor=FLOOR).size == 0


def test_diversity_correct_only_reference():
    # 4 responses, correct = [T, T, T, F]; among the 3 correct, classes {0,1},{2}.
    # correct in class of size 2: (3-2)/2 = 0.5; singleton correct: (3-1)/2 = 1; incorrect: floor.
    ids = [0, 0, 1, 2]
    np.testing.assert_allclose(
        diversity_correct_only(ids, [True, True, True, False], floor=FLOOR), [0.5, 0.5, 1.0, 0.1]
    )
    # One correct response: the reference gives every response the floor, even that one.
    np.testing.assert_allclose(
        diversity_correct_only([0, 1, 2], [True, False, False], floor=FLOOR), [0.1] * 3
    )


def test_ngram_diversity_reference_definition():
    # n = 2 for a small case. r0 = "a b c" has bigrams {ab, bc}; r1 = "a b d": {ab, bd}.
    # r0 unique: {bc} -> 1 / (3-2+1) = 1/2; r1 unique {bd} -> 1/2; r2 "x" shorter than 2 -> 0.
    np.testing.assert_allclose(ngram_diversity(["a b c", "a b d", "x"], n=2), [0.5, 0.5, 0.0])
    # Repeated n-grams count in the denominator: "a b a b" has bigrams ab, ba, ab (3),
    # unique set {ab, ba}; against "z z": both unique -> 2/3.
    np.testing.assert_allclose(ngram_diversity(["a b a b", "z z"], n=2), [2 / 3, 1.0])


# ----------------------------------------------------------------------------- fusion


def test_multiplicative_fusion():
    # quality [1, 1, 0, 1] x diversity [2/3, 2/3, 1, 1] = [2/3, 2/3, 0, 1]
    np.testing.assert_allclose(
        fuse([1, 1, 0, 1], [2 / 3, 2 / 3, 1, 1], **PLAIN), [2 / 3, 2 / 3, 0, 1]
    )


def test_negative_quality_reference_flaw_and_group_min_shift():
    # Reward-model scores [-2, -1]; diversities [1.0, 0.1].
    # Plain product: [-2.0, -0.1]: the more diverse response is punished more.
    np.testing.assert_allclose(fuse([-2, -1], [1.0, 0.1], **PLAIN), [-2.0, -0.1])
    # group_min: q - min(q) = [0, 1]; times d = [0, 0.1].
    np.testing.assert_allclose(
        fuse([-2, -1], [1.0, 0.1], fusion="multiplicative", quality_shift=QualityShift.GROUP_MIN),
        [0.0, 0.1],
    )


def test_additive_fusion_zscores():
    # q = [0, 1]: mean 0.5, pop std 0.5 -> z = [-1, 1]; d = [1, 1] constant -> z = [0, 0].
    np.testing.assert_allclose(
        fuse([0, 1], [1, 1], fusion="additive", quality_shift=QualityShift.NONE), [-1, 1]
    )
    # q = [1, 1] -> 0; d = [0.5, 1.0] -> z = [-1, 1].
    np.testing.assert_allclose(
        fuse([1, 1], [0.5, 1.0], fusion="additive", quality_shift=QualityShift.NONE), [-1, 1]
    )


def test_quality_only_fusion_ignores_diversity():
    np.testing.assert_allclose(
        fuse([0.3, 0.7], [0.1, 1.0], fusion="quality_only", quality_shift=QualityShift.NONE),
        [0.3, 0.7],
    )


# ----------------------------------------------------------------------------- advantages


def test_mean_baseline_no_std():
    # Group A rewards [2/3, 2/3, 0, 1], mean 7/12: [1/12, 1/12, -7/12, 5/12].
    adv = advantages([2 / 3, 2 / 3, 0, 1], ["A"] * 4, **MEAN_NO_STD)
    np.testing.assert_allclose(adv, [1 / 12, 1 / 12, -7 / 12, 5 / 12])


def test_groups_by_id_not_contiguous_and_ragged():
    # Rows: A, B, A, B, B -> A = [1, 3] mean 2 -> [-1, 1]; B = [0, 0, 3] mean 1 -> [-1, -1, 2].
    adv = advantages([1, 0, 3, 0, 3], ["A", "B", "A", "B", "B"], **MEAN_NO_STD)
    np.testing.assert_allclose(adv, [-1, -1, 1, -1, 2])


def test_leave_one_out_baseline():
    # [1, 2, 6]: baselines (2+6)/2 = 4, (1+6)/2 = 3.5, (1+2)/2 = 1.5 -> [-3, -1.5, 4.5].
    adv = advantages([1, 2, 6], [0, 0, 0], **LOO_NO_STD)
    np.testing.assert_allclose(adv, [-3, -1.5, 4.5])
    # A group of one gets 0.
    np.testing.assert_allclose(advantages([5], [0], **LOO_NO_STD), [0])


def test_std_normalisation_with_epsilon():
    # [0, 2]: mean 1, sample std sqrt(2) -> [-1, 1] / (sqrt(2) + eps).
    adv = advantages([0, 2], [0, 0], baseline=Baseline.MEAN, normalize_std=True, std_epsilon=1e-6)
    np.testing.assert_allclose(adv, [-1 / (2**0.5 + 1e-6), 1 / (2**0.5 + 1e-6)])
    # Constant group: std 0, advantage 0, no division by ~0.
    np.testing.assert_allclose(
        advantages([3, 3], [0, 0], baseline=Baseline.MEAN, normalize_std=True, std_epsilon=1e-6),
        [0, 0],
    )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_quality_names_the_index(bad):
    with pytest.raises(ValueError, match=r"quality\[2\]"):
        darling_batch(["a", "b", "c"], [1.0, 0.0, bad], [0, 0, 0], None, REFERENCE)
    with pytest.raises(ValueError, match=r"rewards\[1\]"):
        advantages([0.0, bad], [0, 0], **MEAN_NO_STD)


def test_batch_length_mismatch():
    with pytest.raises(ValueError, match="batch lengths differ"):
        darling_batch(["a", "b"], [1.0], [0, 0], None, REFERENCE)


# ----------------------------------------------------------------------------- whole batch


def test_darling_batch_two_prompts_hand_checked():
    # Prompt P: "4","4","four","2+2 is four" (short rule: "four" vs "2+2 is four": 3 words,
    #   shared {four}: 2 >= 3 False). Classes {0,1},{2},{3}: d = [2/3, 2/3, 1, 1].
    #   quality [1,1,1,0] -> reward [2/3, 2/3, 1, 0]; mean 7/12 -> adv [1/12, 1/12, 5/12, -7/12].
    # Prompt Q: "yes" x4 -> one class: d = floor 0.1 each; quality [1,0,1,0] -> reward
    #   [0.1, 0, 0.1, 0]; mean 0.05 -> adv [0.05, -0.05, 0.05, -0.05].
    responses = ["4", "yes", "4", "yes", "four", "yes", "2+2 is four", "yes"]
    quality = [1, 1, 1, 0, 1, 1, 0, 0]
    ids = ["P", "Q"] * 4
    out = darling_batch(responses, quality, ids, None, REFERENCE)
    np.testing.assert_allclose(out.diversity[0::2], [2 / 3, 2 / 3, 1, 1])
    np.testing.assert_allclose(out.diversity[1::2], [0.1] * 4)
    np.testing.assert_allclose(out.reward[0::2], [2 / 3, 2 / 3, 1, 0])
    np.testing.assert_allclose(out.advantage[0::2], [1 / 12, 1 / 12, 5 / 12, -7 / 12])
    np.testing.assert_allclose(out.advantage[1::2], [0.05, -0.05, 0.05, -0.05])
    assert out.num_classes == [3, 1]
    assert out.group_sizes == [4, 4]
    assert out.pairs_total == 12 and out.pairs_judged == 0


def test_darling_batch_correct_only_scope():
    # Group of 4: responses "a","a","b","c"; quality [1, 1, 1, 0].
    # Correct ones "a","a","b" -> classes {0,1},{2}: d = [(3-2)/2, 0.5, (3-1)/2] = [0.5, 0.5, 1];
    # incorrect "c": floor 0.1. Reward = q*d = [0.5, 0.5, 1, 0].
    settings = replace(REFERENCE, partition_scope=PartitionScope.CORRECT)
    out = darling_batch(["a", "a", "b", "c"], [1, 1, 1, 0], [0] * 4, None, settings)
    np.testing.assert_allclose(out.diversity, [0.5, 0.5, 1.0, 0.1])
    np.testing.assert_allclose(out.reward, [0.5, 0.5, 1.0, 0.0])
    assert out.num_classes == [3]


def test_darling_batch_ngram_mode():
    # n = 4 ngram over whitespace; "a b c d" vs "a b c e": 4-grams {abcd} vs {abce}: both
    # unique, 1/1 each. Quality [1, 0.5] -> reward [1, 0.5]; adv [0.25, -0.25].
    settings = replace(REFERENCE, diversity="ngram")
    out = darling_batch(["a b c d", "a b c e"], [1, 0.5], [0, 0], None, settings)
    np.testing.assert_allclose(out.diversity, [1, 1])
    np.testing.assert_allclose(out.advantage, [0.25, -0.25])
    assert list(out.class_ids) == [-1, -1]
