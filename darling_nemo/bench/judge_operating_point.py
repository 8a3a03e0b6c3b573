"""The calibrated judge's errors by kind, and its threshold chosen by the partition it makes.

    python -m darling_nemo.bench.judge_operating_point [--folds 5] [--seed 0] [--groups 4000]

numpy only, from the shipped feature table (darling_nemo/resources/), so every figure is the
same on any machine:

1. Out of fold (5 folds grouped by prompt, fold seed `--seed`: the folds of
   `python -m darling_nemo.bench.calibrated_judge`), the shipped head's decisions at each
   fold's own threshold: per fold and pooled, accuracy, balanced accuracy, the false-
   "similar" rate (different pairs judged similar / different pairs) and the false-
   "different" rate (similar pairs judged different / similar pairs).
2. The operating point. DARLING does not use pair verdicts: it uses each response's
   diversity (n - |class|) / (n - 1), its class the union-find component of the "similar"
   pairs, so a false "similar" can merge two whole classes. Groups of 8 responses are drawn
   with a true partition (a Chinese restaurant process whose pairwise share of same-class
   pairs is `--same-share`); each pair's score is the out-of-fold P(similar) of a human pair
   drawn with the pair's true label (so the judge's errors are the measured ones, pair by
   pair independent). For each threshold on P: the mean absolute error of each response's
   diversity against the true partition's, the mean signed error (judge minus truth), and
   the pair error rates. The threshold of least diversity error is the partition's choice;
   the table sets it beside the balanced-accuracy threshold the head ships with.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from darling_nemo.bench.calibrated_judge import percent
from darling_nemo.judges.calibrate import (
    DEFAULT_FEATURES,
    SHIPPED_FILE,
    SHIPPED_TABLE,
    columns,
    read_table,
)
from darling_nemo.judges.calibrated import (
    CalibratedModel,
    classification_metrics,
    cross_fit,
    error_rates,
    grouped_folds,
)
from darling_nemo.schema.judges import PARTITION_THRESHOLD

GROUP_SIZE = 8
THRESHOLDS = np.round(np.arange(0.30, 0.961, 0.02), 2)
SAME_SHARES = (0.05, 0.15, 0.327, 0.5)  # 0.327: the human pairs' share of similar pairs


def out_of_fold(seed: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(labels, fold of each pair, out-of-fold P(similar), out-of-fold decisions) of the
    shipped head's features on the shipped table."""
    x, y, groups, _ = read_table(SHIPPED_TABLE)
    folds = grouped_folds(groups, k, seed)
    scores, decisions = cross_fit(x[:, columns(DEFAULT_FEATURES)], y, folds, DEFAULT_FEATURES)
    return y, folds, scores, decisions


def fold_rows(y: np.ndarray, folds: np.ndarray, scores: np.ndarray, said: np.ndarray) -> list[str]:
    """Part 1's markdown rows: each fold, then all pairs pooled."""
    rows = []
    parts = [(f"fold {k}", folds == k) for k in np.unique(folds)]
    for name, mask in [*parts, ("all (pooled)", np.ones(y.size, dtype=bool))]:
        metrics = classification_metrics(scores[mask], y[mask], said[mask])
        rates = error_rates(y[mask], said[mask])
        different, similar = int((y[mask] == 0).sum()), int((y[mask] == 1).sum())
        rows.append(
            f"| {name} | {int(mask.sum())} ({similar} similar) | {percent(metrics['accuracy'])} "
            f"| {percent(metrics['balanced_accuracy'])} "
            f"| {percent(rates['false_similar'])} ({int(said[mask][y[mask] == 0].sum())}/{different}) "
            f"| {percent(rates['false_different'])} ({int((~said[mask])[y[mask] == 1].sum())}/{similar}) |"
        )
    return rows


def crp_partitions(count: int, n: int, same_share: float, rng: np.random.Generator) -> np.ndarray:
    """`count` true partitions of n responses (class ids, rows), Chinese restaurant process of
    concentration alpha = 1 / same_share - 1: two responses share a class with probability
    same_share."""
    alpha = 1.0 / same_share - 1.0
    ids = np.zeros((count, n), dtype=np.int64)
    for g in range(count):
        sizes: list[int] = []
        for i in range(n):
            weights = np.array([*sizes, alpha], dtype=float)
            c = int(rng.choice(len(weights), p=weights / weights.sum()))
            if c == len(sizes):
                sizes.append(0)
            sizes[c] += 1
            ids[g, i] = c
    return ids


def class_sizes(linked: np.ndarray) -> np.ndarray:
    """Size of each response's component, for boolean adjacency matrices (..., n, n)."""
    n = linked.shape[-1]
    reach = linked | np.eye(n, dtype=bool)
    for _ in range(int(np.ceil(np.log2(n)))):  # paths of length up to 2^steps >= n
        reach = (reach.astype(np.int32) @ reach.astype(np.int32)) > 0
    return reach.sum(axis=-1)


def partition_errors(
    y: np.ndarray, scores: np.ndarray, same_share: float, groups: int, seed: int
) -> dict[str, np.ndarray]:
    """Per threshold in THRESHOLDS: the diversity errors of the judged partitions against the
    true ones (mean absolute, mean signed) over `groups` groups of GROUP_SIZE."""
    rng = np.random.default_rng(seed)
    n = GROUP_SIZE
    truth = crp_partitions(groups, n, same_share, rng)
    same = truth[:, :, None] == truth[:, None, :]
    pools = {1: scores[y == 1], 0: scores[y == 0]}
    pair_scores = np.zeros((groups, n, n))
    upper = np.triu_indices(n, 1)
    for label in (0, 1):
        where = same[:, upper[0], upper[1]] == bool(label)
        drawn = rng.choice(pools[label], size=int(where.sum()))
        block = pair_scores[:, upper[0], upper[1]]
        block[where] = drawn
        pair_scores[:, upper[0], upper[1]] = block
    pair_scores = pair_scores + np.transpose(pair_scores, (0, 2, 1))
    true_div = (n - same.sum(axis=-1)) / (n - 1)
    linked = pair_scores[None] > THRESHOLDS[:, None, None, None]
    off_diagonal = ~np.eye(n, dtype=bool)
    judged_div = (n - class_sizes(linked & off_diagonal)) / (n - 1)
    error = judged_div - true_div[None]
    return {"mae": np.abs(error).mean(axis=(1, 2)), "bias": error.mean(axis=(1, 2))}


def operating_rows(
    y: np.ndarray, scores: np.ndarray, balanced: float, groups: int, seed: int
) -> list[str]:
    """Part 2's markdown rows: per threshold, the pair error rates and, per same-class share,
    the diversity error; the least error per share is starred, the default threshold and the
    calibration file's balanced one are marked."""
    errors = [partition_errors(y, scores, share, groups, seed) for share in SAME_SHARES]
    best = [int(np.argmin(e["mae"])) for e in errors]
    rows = []
    for t, threshold in enumerate(THRESHOLDS):
        rates = error_rates(y, scores > threshold)
        balanced = 1 - (rates["false_similar"] + rates["false_different"]) / 2
        cells = [
            f"{e['mae'][t]:.3f} ({e['bias'][t]:+.3f}){' *' if best[s] == t else ''}"
            for s, e in enumerate(errors)
        ]
        rows.append(
            f"| {threshold:.2f}{marks(threshold, balanced)} "
            f"| {percent(rates['false_similar'])} | {percent(rates['false_different'])} "
            f"| {percent(balanced)} | " + " | ".join(cells) + " |"
        )
    return rows


def marks(threshold: float, balanced: float) -> str:
    """ " (default)" at the shipped default (the partition's), " (balanced ~)" near the
    calibration file's threshold of balanced pairwise accuracy."""
    if abs(threshold - PARTITION_THRESHOLD) < 1e-9:
        return " (default)"
    return " (balanced ~)" if abs(threshold - balanced) < 0.01 else ""


def part_two_choice(y: np.ndarray, scores: np.ndarray, groups: int, seed: int) -> float:
    """The threshold of least diversity error at the human pairs' own share of alike pairs
    (the rule that chose PARTITION_THRESHOLD)."""
    errors = partition_errors(y, scores, float(np.mean(y)), groups, seed)
    return float(THRESHOLDS[int(np.argmin(errors["mae"]))])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m darling_nemo.bench.judge_operating_point",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--groups", type=int, default=4000, help="groups per same-class share")
    args = parser.parse_args(argv)

    y, folds, scores, said = out_of_fold(args.seed, args.folds)
    print(
        f"1. The shipped calibrated head out of fold ({args.folds} folds grouped by prompt, "
        f"fold seed {args.seed}; each fold judged at the threshold fit on the others)\n"
    )
    print("| pairs | count | accuracy | balanced accuracy | false similar | false different |")
    print("|---|---|---|---|---|---|")
    print("\n".join(fold_rows(y, folds, scores, said)))

    balanced = CalibratedModel.load(SHIPPED_FILE).threshold
    print(
        f"\n2. Threshold on the out-of-fold P(similar) by the partition: groups of {GROUP_SIZE}, "
        f"{args.groups} per share of same-class pairs (seed {args.seed}); each cell: mean "
        "|diversity error| per response (mean signed error, judge minus truth); * least\n"
    )
    shares = " | ".join(f"same share {s:g}" for s in SAME_SHARES)
    print(f"| threshold | false similar | false different | balanced accuracy | {shares} |")
    print("|---" * (4 + len(SAME_SHARES)) + "|")
    print("\n".join(operating_rows(y, scores, balanced, args.groups, args.seed)))


if __name__ == "__main__":
    main()
