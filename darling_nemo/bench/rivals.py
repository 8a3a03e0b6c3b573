"""The core's seconds per rollout batch for DARLING and its rivals (docs/rivals.md).

    python -m darling_nemo.bench.rivals [--prompts 256] [--group-size 8] [--repeats 3]

One batch of the math recipes' shape (256 prompts x 8 responses): each response ends in a
boxed answer drawn from three values per prompt (quality 1 for the first), so groups hold
repeats for outcome exploration and mixed 0/1 rewards for pass@k. Every method runs on the
same batch (with random log-probabilities per response, which only the unlikeliness reward
reads) with the lexical rules as its pair judge (a classifier's own time is measured in
docs/judge-cost.md); outcome exploration asks math-verify, as on a real math run, with a
fresh cache each time (no response is parsed twice across repeats). Prints the median
seconds of `--repeats` runs and the pairs each method judged.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from darling_nemo import methods
from darling_nemo.core import darling_batch
from darling_nemo.methods.base import EMBEDDINGS
from darling_nemo.schema import LexicalJudgeConfig, validate_darling
from darling_nemo.tasks.judge import run_judge

METHODS: dict[str, dict[str, Any]] = {
    "darling (lexical rules)": {},
    "darling, fusion gdpo (lexical rules)": {"fusion": "gdpo"},
    "pass_at_k, k=4": {"method": "pass_at_k", "k": 4},
    "outcome (math-verify answers)": {"method": "outcome"},
    "unlikeliness (log-probs given)": {"method": "unlikeliness"},
    "pkpo, k=4": {"method": "pkpo", "pkpo_k": 4},
    "dqo (384-d embeddings given)": {"method": "dqo"},
}


class GivenEmbeddings:
    """A judge for DQO's row: a fixed random unit vector per text (MiniLM's 384 dimensions;
    the embedding model's own time is the judge's, docs/judge-cost.md) and no pair joined
    (the pairs the lexical rules leave open still go to it, for the class metrics)."""

    def __init__(self, texts: list[str], seed: int = 0) -> None:
        vectors = np.random.default_rng(seed).normal(size=(len(texts), 384))
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        self.vectors = dict(zip(texts, unit, strict=True))

    def __call__(self, pairs: list[tuple[str, str]]) -> list[float]:
        return [0.0] * len(pairs)

    def embed(self, texts: list[str]) -> dict[str, np.ndarray]:
        return {t: self.vectors[t] for t in texts}


def batch(prompts: int, group_size: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[int]]:
    """(responses, quality, group ids) of the synthetic math batch."""
    rng = np.random.default_rng(seed)
    answers = rng.integers(0, 3, size=prompts * group_size)
    texts = [
        f"Working through problem {i // group_size} step by step, the answer is "
        f"\\boxed{{{a + i // group_size}}}."
        for i, a in enumerate(answers)
    ]
    return texts, (answers == 0).astype(float), [i // group_size for i in range(len(texts))]


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=256)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    texts, quality, groups = batch(args.prompts, args.group_size)
    logprobs = np.random.default_rng(1).normal(-1.0, 0.3, size=len(texts))  # per response
    print(f"{args.prompts} prompts x {args.group_size} responses, median of {args.repeats} runs")
    medians = {}
    for name, section in METHODS.items():
        darling = validate_darling({"judge": LexicalJudgeConfig().model_dump(), **section})
        seconds, judged = [], 0
        for _ in range(args.repeats):
            method = methods.method(darling.method)
            judge: Any = run_judge(None, darling).make()  # outcome: math-verify, as on math
            if EMBEDDINGS in method.inputs:  # DQO; the log-probs go to every method
                judge = GivenEmbeddings(texts)
            start = time.perf_counter()
            settings = darling.settings()
            result = darling_batch(texts, quality, groups, judge, settings, logprobs=logprobs)
            seconds.append(time.perf_counter() - start)
            judged = result.pairs_judged
        medians[name] = statistics.median(seconds)
        print(f"| {name} | {medians[name]:.3f} s | {judged} of {result.pairs_total} pairs |")
    return medians


if __name__ == "__main__":
    main()
