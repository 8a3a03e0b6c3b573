"""A judge of final answers for outcome-based exploration (`darling.method: outcome`).

Outcome exploration counts how many responses of a group reach the same final answer
(methods.outcome.outcome_penalty). On math the answers are compared as the quality is scored: by
math-verify, which extracts each response's final answer (the last \\boxed{} or a final
expression) and decides whether two answers are mathematically equal ("1/2" and "0.5").
The core partitions a group with this judge and only exact duplicates decided without it
(core.same_text), so union-find joins answers math-verify calls equal.

A response with no answer math-verify can extract is its own class: it has no outcome to
repeat, so it is never penalised (its quality is 0 anyway).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

CACHE_SIZE = 4096  # parsed responses kept; a rollout batch of 256 x 8 needs 2,048


class MathAnswerJudge:
    """A core.PairJudge: 1.0 when math-verify finds both responses' final answers equal, else
    0.0 (also when either has none, or math-verify fails on it).

    math-verify's own timeouts use SIGALRM, which works only in the main thread; in another
    thread (the NeMo-RL engine's overlapped judge, darling.overlap) it runs without a timeout,
    as math-verify itself advises. Parsed answers are cached per response text, and
    verdicts per pair of extracted answer strings: two responses whose answers read the
    same are one answer without asking sympy, so a group of 8 with 3 distinct answers costs
    8 parses and at most 3 comparisons, not the 20-odd pairs the partition sends.
    """

    __name__ = "math_answer"

    def __init__(self) -> None:
        self._parsed: dict[str, list[Any]] = {}
        self._verdicts: dict[tuple[str, str], bool] = {}
        self.stats = {"pairs": 0, "no_answer": 0, "comparisons": 0}

    @staticmethod
    def _timeout() -> int | None:
        return 5 if threading.current_thread() is threading.main_thread() else None

    def answer(self, text: str) -> list[Any]:
        """math-verify's parse of a response: [] when it finds no answer."""
        if text not in self._parsed:
            from math_verify import parse

            if len(self._parsed) >= CACHE_SIZE:
                self._parsed.clear()
                self._verdicts.clear()
            try:
                self._parsed[text] = parse(text, parsing_timeout=self._timeout())
            except Exception:  # malformed LaTeX or a timeout: no answer
                self._parsed[text] = []
        return self._parsed[text]

    def same_answer(self, a: str, b: str) -> bool:
        from math_verify import verify

        first, second = self.answer(a), self.answer(b)
        if not first or not second:
            self.stats["no_answer"] += 1
            return False
        key = (str(first[-1]), str(second[-1]))  # parse gives [expression, extracted text]
        if key[0] == key[1]:
            return True
        if key not in self._verdicts:
            self.stats["comparisons"] += 1
            try:
                same = bool(verify(first, second, timeout_seconds=self._timeout()))
            except Exception:  # a timeout or an expression sympy cannot compare: different
                same = False
            self._verdicts[key] = self._verdicts[key[::-1]] = same
        return self._verdicts[key]

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        self.stats["pairs"] += len(pairs)
        return [1.0 if self.same_answer(a, b) else 0.0 for a, b in pairs]
