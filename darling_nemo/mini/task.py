"""The miniature's task: roll `length` dice (digits min_digit..max_digit) that total S.

A prompt is the target in decimal, one token per place ("T2 U1" for 21, so a held-out
target is a new combination of tokens the policy has trained on); a completion is digits
separated by spaces, e.g. for 21 with six dice "6 1 3 4 2 5". Every target has many correct strings and a moderate
number of genuinely different answers: with six dice, targets 12..30 have 10 to 32
correct multisets (order of the dice does not matter), a few times the group size of 8,
so a policy can be right in many ways or in one, and repeats inside a group are common
enough for the diversity term to matter.

Equivalence (the "semantic" rule the DARLING partition uses): two answers are the same
answer when they use the same multiset of digits, i.e. one is a permutation of the other.
"6 1 3 4 2 5" and "1 2 3 4 5 6" are one answer written twice; "6 1 3 4 2 5" and
"6 6 1 1 2 5" are two answers. Mode collapse here means putting the mass on a few
multisets and merely shuffling them, which a string-level diversity measure would miss.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations_with_replacement
from typing import Any

import numpy as np


def prompt_text(target: int) -> str:
    """The target in decimal, one token per place: 21 -> "T2 U1" (tens, units)."""
    if not 0 <= target <= 99:
        raise ValueError(f"target {target} is outside 0..99")
    return f"T{target // 10} U{target % 10}"


def target_of(prompt: str) -> int:
    """The target of a prompt "T<tens> U<units>" (raises on anything else)."""
    words = prompt.split()
    if (
        len(words) != 2
        or not (words[0][:1] == "T" and words[0][1:].isdigit() and len(words[0]) == 2)
        or not (words[1][:1] == "U" and words[1][1:].isdigit() and len(words[1]) == 2)
    ):
        raise ValueError(f"not a digit-sum prompt: {prompt!r} (expected e.g. 'T2 U1' for 21)")
    return 10 * int(words[0][1]) + int(words[1][1])


def answer_class(completion: str) -> tuple[str, ...]:
    """The equivalence key: the sorted words (the digit multiset for a well-formed answer)."""
    return tuple(sorted(completion.split()))


def multiset_judge(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """A core.PairJudge: P(similar) = 1.0 for the same digit multiset, else 0.0."""
    return [1.0 if answer_class(a) == answer_class(b) else 0.0 for a, b in pairs]


def flip_draw(seed: int, a: str, b: str) -> float:
    """A number in [0, 1) fixed by the seed and the pair's two texts, in either order.

    Keyed on the texts, not on the pair's positions in a group: a learned classifier is a
    function of its input, so the same two answers get the same (right or wrong) verdict
    whenever and wherever they meet, in a rerun, a resumed run, or another group; and the
    verdict of (a, b) is that of (b, a). A position key would give the same two texts
    different verdicts in different groups: noise no classifier has.
    """
    first, second = sorted((a, b))
    digest = hashlib.blake2b(f"{seed}\0{first}\0{second}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class FlippedJudge:
    """A task's exact pair judge (a core.PairJudge), wrong on a fraction 1 - accuracy of pairs.

    A pair's verdict is flipped (same <-> different) when `flip_draw(seed, a, b)` < 1 -
    accuracy: over many distinct pairs the flipped fraction is 1 - accuracy, and each pair's
    verdict is deterministic and symmetric. Errors fall on both kinds of pair alike, as in the
    paper's classifier (right on 78-79% of human-labelled pairs).

    `false_similar` / `false_different` add a flip of each kind alone (a measured judge's two
    rates: a pair of different answers said "similar", a pair of one answer said
    "different"); at their 0.0 defaults the verdicts are those of the symmetric judge.
    """

    exact: Callable[[Sequence[tuple[str, str]]], list[float]]
    accuracy: float
    seed: int
    false_similar: float = 0.0
    false_different: float = 0.0

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        exact = self.exact(pairs)
        error = 1.0 - self.accuracy
        flip = {1.0: error + self.false_different, 0.0: error + self.false_similar}
        return [
            1.0 - verdict if flip_draw(self.seed, a, b) < flip[verdict] else verdict
            for verdict, (a, b) in zip(exact, pairs, strict=True)
        ]


def training_judge_of(
    exact: Callable[[Sequence[tuple[str, str]]], list[float]], section: Any
) -> FlippedJudge | None:
    """The judge a miniature task trains with (a NoisyJudgeTaskSection's keys): None where
    the section leaves it exact, else `exact` wrong at the chosen accuracy or rates."""
    rates = (section.judge_false_similar, section.judge_false_different)
    if section.judge_accuracy == 1.0 and rates == (0.0, 0.0):
        return None
    return FlippedJudge(exact, section.judge_accuracy, section.judge_seed, *rates)


@dataclass(frozen=True)
class DigitSum:
    """`length` digits, each in [min_digit, max_digit], summing to the prompt's target."""

    length: int
    min_digit: int
    max_digit: int

    @cached_property
    def digits(self) -> tuple[str, ...]:
        return tuple(str(d) for d in range(self.min_digit, self.max_digit + 1))

    def vocabulary(self) -> list[str]:
        """The words of a word-level tokenizer: the answer digits and the prompt's place tokens."""
        return [*self.digits, *(f"T{d}" for d in range(10)), *(f"U{d}" for d in range(10))]

    def is_correct(self, prompt: str, completion: str) -> bool:
        words = completion.split()
        return (
            len(words) == self.length
            and all(w in self.digits for w in words)
            and sum(int(w) for w in words) == target_of(prompt)
        )

    def correct_multisets(self, target: int) -> list[tuple[int, ...]]:
        """Every correct answer up to order, as sorted digit tuples."""
        faces = range(self.min_digit, self.max_digit + 1)
        return [m for m in combinations_with_replacement(faces, self.length) if sum(m) == target]

    def sample_answer(
        self, target: int, zipf_exponent: float, seed: int, rng: np.random.Generator
    ) -> list[int]:
        """A correct answer for the warm start: a multiset, then a random order of it.

        The target's multisets are put in a fixed random order drawn from (seed, target);
        rank r gets weight (r + 1) ** -zipf_exponent (0: uniform over multisets). So every
        target has favourite answers and a tail, like a pretrained model with habits.
        """
        multisets = self.correct_multisets(target)
        if not multisets:
            raise ValueError(f"no answer of {self.length} digits in {self.digits} sums to {target}")
        order = np.random.default_rng([seed, target]).permutation(len(multisets))
        weights = (np.arange(len(multisets)) + 1.0) ** -zipf_exponent
        chosen = multisets[order[int(rng.choice(len(multisets), p=weights / weights.sum()))]]
        return [int(d) for d in rng.permutation(chosen)]

    def embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """An embedding of each answer for a method that needs one (DQO): how many times
        each digit occurs, then the count of other words and an empty-answer flag, scaled to
        unit length. Two orders of one multiset embed alike (the judge's rule); answers
        that share most of their dice lie close."""
        out = {}
        for text in texts:
            words = text.split()
            counts = [words.count(d) for d in self.digits]
            vector = np.array([*counts, len(words) - sum(counts), float(not words)])
            out[text] = vector / np.linalg.norm(vector)
        return out


@dataclass(frozen=True)
class JudgeWithEmbeddings:
    """A pair judge's verdicts plus an `embed` (texts -> {text: vector}) from elsewhere: the
    dice task's judge and `DigitSum.embed`, for a method that needs embeddings."""

    judge: Callable[[Sequence[tuple[str, str]]], Sequence[float]]
    embed: Callable[[Sequence[str]], dict[str, np.ndarray]]

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> Sequence[float]:
        return self.judge(pairs)
