"""Judged pairs per group: wave partition vs the reference's all-pairs classification.

    python -m darling_nemo.bench.partition [--groups 256] [--n 8] [--seed 0]

Groups of n long responses are drawn with a given class structure; the judge is an oracle
that says "similar" exactly within a class (a perfectly transitive classifier). The
reference classifies all n(n-1)/2 pairs; the wave partition skips pairs already joined.
With a transitive judge, the judged count is (cross-class pairs) + (n - classes), the
minimum any exact method needs, so the ratio falls with fewer, larger classes. Exact
duplicates (a collapsed policy repeats itself verbatim) are settled without the judge.
"""

from __future__ import annotations

import argparse
import random
import time

from darling_nemo.core import partition_all_pairs, partition_groups


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


def oracle(pairs):
    return [float(a.split()[1] == b.split()[1]) for a, b in pairs]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--groups", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    structures = {
        "1 class (8)": [8],
        "2 classes (4+4)": [4, 4],
        "2 classes (7+1)": [7, 1],
        "4 classes (2x4)": [2, 2, 2, 2],
        "8 classes": [1] * 8,
    }
    header = (
        f"{'group of 8':<18} {'dup':>4} {'all pairs':>9} {'judged':>7} {'ratio':>6} "
        f"{'calls':>5} {'ms(all)':>8} {'ms(wave)':>8}"
    )
    print(f"{args.groups} groups per row, oracle judge (similar iff same class)\n{header}")
    for duplicate_share in (0.0, 0.5):
        for name, sizes in structures.items():
            groups = [make_group(sizes, rng, duplicate_share) for _ in range(args.groups)]
            calls = []

            def counting(pairs, calls=calls):
                calls.append(len(pairs))
                return oracle(pairs)

            t0 = time.perf_counter()
            reference = [partition_all_pairs(g, oracle, 0.5) for g in groups]
            t1 = time.perf_counter()
            waved = partition_groups(groups, counting, 0.5)
            t2 = time.perf_counter()
            assert [p.class_ids for p in waved] == [p.class_ids for p in reference]
            total = sum(p.pairs_total for p in waved) / args.groups
            judged = sum(p.pairs_judged for p in waved) / args.groups
            print(
                f"{name:<18} {duplicate_share:>4.1f} {total:>9.1f} {judged:>7.2f} "
                f"{judged / total:>6.2f} {len(calls):>5} {1e3 * (t1 - t0):>8.1f} "
                f"{1e3 * (t2 - t1):>8.1f}"
            )
    print(
        "ratio = judged / all pairs per group; calls = judge calls for ALL groups together\n"
        "(the reference makes one request per pair); partitions are identical to all-pairs."
    )


if __name__ == "__main__":
    main()
