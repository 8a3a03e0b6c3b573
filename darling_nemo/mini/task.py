"""The miniature's task: roll `length` dice (digits min_digit..max_digit) that total S.

A prompt is one token, `S<target>`; a completion is digits separated by spaces, e.g. for
S21 with six dice "6 1 3 4 2 5". Every target has many correct strings and a moderate
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

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations_with_replacement

import numpy as np


def prompt_text(target: int) -> str:
    return f"S{target}"


def target_of(prompt: str) -> int:
    """The target sum of a prompt `S<target>` (raises on anything else)."""
    text = prompt.strip()
    if not (text.startswith("S") and text[1:].isdigit()):
        raise ValueError(f"not a digit-sum prompt: {prompt!r} (expected 'S<target>', e.g. 'S21')")
    return int(text[1:])


def answer_class(completion: str) -> tuple[str, ...]:
    """The equivalence key: the sorted words (the digit multiset for a well-formed answer)."""
    return tuple(sorted(completion.split()))


def multiset_judge(pairs: Sequence[tuple[str, str]]) -> list[float]:
    """A core.PairJudge: P(similar) = 1.0 for the same digit multiset, else 0.0."""
    return [1.0 if answer_class(a) == answer_class(b) else 0.0 for a, b in pairs]


@dataclass(frozen=True)
class DigitSum:
    """`length` digits, each in [min_digit, max_digit], summing to the prompt's target."""

    length: int
    min_digit: int
    max_digit: int

    @cached_property
    def digits(self) -> tuple[str, ...]:
        return tuple(str(d) for d in range(self.min_digit, self.max_digit + 1))

    def feasible(self, target: int) -> bool:
        return self.length * self.min_digit <= target <= self.length * self.max_digit

    def vocabulary(self, targets: Sequence[int]) -> list[str]:
        """The words of a word-level tokenizer: the digits and one prompt token per target."""
        return [*self.digits, *(prompt_text(t) for t in targets)]

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
