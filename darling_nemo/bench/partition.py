"""Judged pairs per group: wave partition vs one call vs the reference's all pairs.

    python -m darling_nemo.bench.partition [--groups 256] [--seed 0] [--pairs-data PATH]

Three sets of groups of 8, each partitioned three ways with identical classes (checked):
`all pairs` (the reference classifies n(n-1)/2 = 28 pairs), `one call`
(`core.partition_groups_in_one_call`: the pairs the lexical rules leave open, one judge call
per step) and `waves` (`core.partition_groups`: no pair whose responses are already joined,
one call per wave).

1. Built class structures, oracle judge (similar iff same class: a perfectly transitive
   classifier), with and without verbatim copies. With a transitive judge the wave count is
   (cross-class pairs) + (n - classes), the minimum any exact method needs.
2. Real responses with human labels: the NoveltyBench pairs (one labelled pair of
   generations per prompt; darling_nemo/resources/noveltybench_similarity_train.jsonl).
   There is one pair per prompt, so a group of 8 holds the two generations of 4 prompts;
   the judge answers the human label within a prompt and "different" across prompts.
   Classes are at most 2 here: the diverse end of the range, with real short answers that
   the lexical rules settle.
3. Synthetic math groups with repeated approaches: a policy that reuses an approach with
   probability proportional to how often it has used it (a Chinese restaurant process of
   concentration alpha; small alpha = collapsed), half of the repeats verbatim copies; the
   oracle judge, and the same judge with 11% of its answers flipped (the math classifier's
   measured 89% accuracy), which is not transitive.

`judge s/step` is `judges.cost.judge_seconds_per_step` at the paper's math scale: these
judged pairs per group x 256 groups, 4,096 tokens per pair, the estimated H100 throughput
of the 4 B classifier, 8 GPUs, 0.5 s per judge call.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from darling_nemo.core import PairJudge, partition_groups, partition_groups_in_one_call
from darling_nemo.judges.cost import (
    H100_BF16_DENSE_FLOPS,
    MATH_CLASSIFIER,
    PREFILL_MFU,
    forward_flops_per_token,
    judge_seconds_per_step,
    tokens_per_s_per_gpu,
)
from darling_nemo.judges.pairdata import LabelledPair, load_pairs
from darling_nemo.resources import resource_path

NOVELTYBENCH_PAIRS = resource_path("noveltybench_similarity_train.jsonl")
PAPER_GROUPS_PER_STEP = 256
PAPER_TOKENS_PER_PAIR = 4096
PAPER_CLASSIFIER_GPUS = 8
LATENCY_PER_CALL_S = 0.5
MATH_CLASSIFIER_ERROR = 0.11  # 89% held-out accuracy (DARLING's math classifier)


def make_group(sizes: list[int], rng: random.Random, duplicate_share: float) -> list[str]:
    """Responses of >5 words; members of a class paraphrase (or, sometimes, copy) its seed."""
    group = []
    for cls, size in enumerate(sizes):
        first = f"class {cls} answer " + " ".join(rng.choice("abcdefgh") for _ in range(8))
        for k in range(size):
            copy = k > 0 and rng.random() < duplicate_share
            group.append(first if copy or k == 0 else f"{first} paraphrase {k}")
    rng.shuffle(group)
    return group


def oracle(pairs: Sequence[tuple[str, str]]) -> list[float]:
    return [float(a.split()[1] == b.split()[1]) for a, b in pairs]


def noisy(judge: PairJudge, error: float, seed: int) -> PairJudge:
    """`judge` with a share `error` of its answers flipped, the same way for a pair every time
    (a deterministic classifier's mistakes), whatever the order of its responses."""

    def flipped(pairs: Sequence[tuple[str, str]]) -> list[float]:
        out = []
        for (a, b), p in zip(pairs, judge(pairs), strict=True):
            key = "\0".join(sorted((a, b))) + f"\0{seed}"
            draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
            out.append(1.0 - float(p) if draw < error else float(p))
        return out

    return flipped


def restaurant_sizes(n: int, alpha: float, rng: random.Random) -> list[int]:
    """Class sizes of n draws from a Chinese restaurant process of concentration alpha."""
    sizes: list[int] = []
    for k in range(n):
        pick = rng.random() * (k + alpha)
        for c, size in enumerate(sizes):
            if pick < size:
                sizes[c] += 1
                break
            pick -= size
        else:
            sizes.append(1)
    return sizes


def load_noveltybench_pairs(path: Path) -> list[LabelledPair]:
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such file. The human-labelled NoveltyBench pairs ship with the "
            f"package as darling_nemo/resources/{NOVELTYBENCH_PAIRS.name}; pass --pairs-data "
            "PATH to read them from elsewhere"
        )
    return load_pairs(path, "generation_0", "generation_1", "similar", "prompt")


def human_label_groups(
    pairs: Sequence[LabelledPair], prompts_per_group: int, rng: random.Random
) -> tuple[list[list[str]], PairJudge]:
    """Groups of the two generations of `prompts_per_group` consecutive prompts (shuffled),
    and a judge answering the human label within a prompt, 0 across prompts."""
    label: dict[frozenset[str], float] = {}
    groups = []
    for start in range(0, len(pairs) - prompts_per_group + 1, prompts_per_group):
        group = []
        for pair in pairs[start : start + prompts_per_group]:
            label[frozenset((pair.a, pair.b))] = float(pair.label)
            group += [pair.a, pair.b]
        rng.shuffle(group)
        groups.append(group)

    def judge(batch: Sequence[tuple[str, str]]) -> list[float]:
        return [label.get(frozenset(p), 0.0) for p in batch]

    return groups, judge


@dataclass(frozen=True)
class Counts:
    """Per group (means): classes, pairs judged by each method; judge calls for all groups."""

    classes: float
    all_pairs: float
    one_call: float
    waves: float
    wave_calls: int

    def judge_seconds(self, pairs_per_group: float, calls: int) -> float:
        rate = tokens_per_s_per_gpu(
            forward_flops_per_token(MATH_CLASSIFIER, PAPER_TOKENS_PER_PAIR),
            H100_BF16_DENSE_FLOPS,
            PREFILL_MFU,
        )
        return judge_seconds_per_step(
            pairs_per_group * PAPER_GROUPS_PER_STEP,
            PAPER_TOKENS_PER_PAIR,
            rate,
            PAPER_CLASSIFIER_GPUS,
            LATENCY_PER_CALL_S,
            calls,
        )


def count_judged(groups: Sequence[Sequence[str]], judge: PairJudge) -> Counts:
    """Partition `groups` by waves and in one call; fail if their classes ever differ."""
    calls: list[int] = []

    def counting(pairs: Sequence[tuple[str, str]]) -> Sequence[float]:
        calls.append(len(pairs))
        return judge(pairs)

    waved = partition_groups(groups, counting, 0.5)
    single = partition_groups_in_one_call(groups, judge, 0.5)
    if [p.class_ids for p in waved] != [p.class_ids for p in single]:
        raise AssertionError("waves and one call found different classes")
    count = len(groups)
    return Counts(
        classes=sum(p.num_classes for p in waved) / count,
        all_pairs=sum(p.pairs_total for p in waved) / count,
        one_call=sum(p.pairs_judged for p in single) / count,
        waves=sum(p.pairs_judged for p in waved) / count,
        wave_calls=len(calls),
    )


HEADER = (
    f"{'groups of 8':<30} {'classes':>7} {'all':>5} {'1 call':>6} {'waves':>6} {'ratio':>5} "
    f"{'calls':>5} {'judge s/step: all':>17} {'1 call':>6} {'waves':>6}"
)


def row(name: str, c: Counts) -> str:
    return (
        f"{name:<30} {c.classes:>7.2f} {c.all_pairs:>5.1f} {c.one_call:>6.2f} {c.waves:>6.2f} "
        f"{c.waves / c.all_pairs:>5.2f} {c.wave_calls:>5} {c.judge_seconds(c.all_pairs, 1):>17.1f} "
        f"{c.judge_seconds(c.one_call, 1):>6.1f} {c.judge_seconds(c.waves, c.wave_calls):>6.1f}"
    )


def built_structures(groups: int, rng: random.Random) -> list[tuple[str, Callable[[], Counts]]]:
    structures = {
        "1 class (8)": [8],
        "2 classes (4+4)": [4, 4],
        "2 classes (7+1)": [7, 1],
        "4 classes (2x4)": [2, 2, 2, 2],
        "8 classes": [1] * 8,
    }
    rows = []
    for share in (0.0, 0.5):
        for name, sizes in structures.items():
            built = [make_group(sizes, rng, share) for _ in range(groups)]
            rows.append((f"{name}, {share:.0%} copies", count_judged(built, oracle)))
    return rows


def math_approaches(groups: int, rng: random.Random) -> list[tuple[str, Counts]]:
    rows = []
    for alpha in (0.25, 1.0, 4.0, 16.0):
        built = [make_group(restaurant_sizes(8, alpha, rng), rng, 0.5) for _ in range(groups)]
        rows.append((f"alpha {alpha:g}, oracle", count_judged(built, oracle)))
        judge = noisy(oracle, MATH_CLASSIFIER_ERROR, seed=int(alpha * 100))
        rows.append((f"alpha {alpha:g}, 11% errors", count_judged(built, judge)))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=256, help="groups per built row")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs-data", type=Path, default=NOVELTYBENCH_PAIRS)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    try:
        labelled = load_noveltybench_pairs(args.pairs_data)
    except (FileNotFoundError, ValueError) as err:
        parser.exit(2, f"darling_nemo.bench.partition: {err}\n")
    print(f"1. built class structures, oracle judge, {args.groups} groups per row\n{HEADER}")
    for name, counts in built_structures(args.groups, rng):
        print(row(name, counts))
    groups, judge = human_label_groups(labelled, 4, rng)
    print(
        f"\n2. real responses, human labels: {len(labelled)} NoveltyBench pairs "
        f"({sum(p.label for p in labelled)} similar) -> {len(groups)} groups of 4 prompts x 2"
        f"\n{HEADER}\n{row('NoveltyBench, human labels', count_judged(groups, judge))}"
    )
    print(
        f"\n3. synthetic math groups, repeated approaches, {args.groups} groups per row\n{HEADER}"
    )
    for name, counts in math_approaches(args.groups, rng):
        print(row(name, counts))
    print(
        "\nall / 1 call / waves = pairs judged per group (1 call: after the lexical rules); "
        "ratio = waves / all;\ncalls = judge calls of the waves for all groups (all and 1 call "
        "make one); classes are identical in every method."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
