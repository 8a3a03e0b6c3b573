"""A fine-tuned pair judge against the shipped calibrated head, out of fold, paired.

    for k in 0 1 2 3 4; do uv run recipes/train_classifier.py \
        --config conf/classifier/minilm_biencoder_noveltybench.yaml \
        cv_folds=5 cv_fold=$k embedding_baseline=false output_dir=RUNS/fold$k; done
    python -m darling_nemo.bench.judge_cv RUNS/fold{k} [--seed 0] [--resamples 10000]

Each fold's run (`cv_folds=5 cv_fold=k`: the folds of the calibrated judge's benchmark, fold
seed = the run's split_seed) wrote `scores.jsonl`: its model's score of every pair it trained
on and of every pair it held out. Read together they give, for every one of the 1,000
shipped pairs, a score from a model that never saw its prompt. Judges compared, each fold
judged by what was fit on the other four:

- the shipped calibrated head (cos + word overlap over the shipped MiniLM, threshold for
  balanced accuracy), as `python -m darling_nemo.bench.judge_operating_point` part 1;
- the fine-tuned model's score, threshold for balanced accuracy on its fold's training pairs;
- the calibrated head with the fine-tuned cosine in place of the shipped one (needs a
  bi_encoder run: its training pairs' scores are in scores.jsonl).

Differences to the shipped head: paired bootstrap over prompts (one pair per prompt here;
`--resamples`, seed `--seed`), 95% percentile interval; and the mean of the 5 per-fold paired
differences with its t-interval.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from darling_nemo.bench.calibrated_judge import percent
from darling_nemo.judges.calibrate import DEFAULT_FEATURES, SHIPPED_TABLE, columns, read_table
from darling_nemo.judges.calibrated import (
    auc,
    balanced_threshold,
    classification_metrics,
    cross_fit,
    error_rates,
    fit_model,
    grouped_folds,
)

T_975 = {4: 2.776}  # Student t, 97.5th percentile, by degrees of freedom (5 folds)
Metric = Callable[[np.ndarray, np.ndarray, np.ndarray], float]
METRICS: dict[str, Metric] = {
    "accuracy": lambda s, y, d: float(np.mean(d == (y == 1))),
    "balanced accuracy": lambda s, y, d: (float(d[y == 1].mean()) + float((~d[y == 0]).mean())) / 2,
    "AUC": lambda s, y, d: auc(s, y),
}


def read_fold_scores(template: str, k: int, lines: np.ndarray) -> dict[str, np.ndarray]:
    """One fold's run: {"train": score by table row (nan where not scored), "heldout": ...}."""
    path = Path(template.format(k=k)) / "scores.jsonl"
    try:
        rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    except (OSError, json.JSONDecodeError) as err:
        raise SystemExit(f"judge_cv: cannot read {path}: {err}") from None
    row_of = {int(line): r for r, line in enumerate(lines)}
    parts: dict[str, np.ndarray] = {}
    for row in rows:
        part = parts.setdefault(row["part"], np.full(len(lines), np.nan))
        part[row_of[row["line"]]] = row["score"]
    return parts


def finetuned_out_of_fold(
    template: str, x: np.ndarray, y: np.ndarray, folds: np.ndarray, lines: np.ndarray
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(out-of-fold scores, decisions) of the fine-tuned judges, by name."""
    judged = {"fine-tuned score": (np.zeros(y.size), np.zeros(y.size, dtype=bool))}
    for k in np.unique(folds):
        held = folds == k
        parts = read_fold_scores(template, int(k), lines)
        if not np.array_equal(~np.isnan(parts["heldout"]), held):
            raise SystemExit(f"judge_cv: fold {k}'s held-out pairs are not fold {k} of the table")
        threshold, _ = balanced_threshold(parts["train"][~held], y[~held])
        scores, decisions = judged["fine-tuned score"]
        scores[held] = parts["heldout"][held]
        decisions[held] = scores[held] > threshold
        if "train" in parts:
            name = "calibrated head over the fine-tuned cosine"
            scores, decisions = judged.setdefault(
                name, (np.zeros(y.size), np.zeros(y.size, dtype=bool))
            )
            tuned = x[:, columns(DEFAULT_FEATURES)].copy()
            tuned[:, 0] = np.where(held, parts["heldout"], parts["train"])  # cos is column 0
            fitted = fit_model(tuned[~held], y[~held], DEFAULT_FEATURES)
            scores[held] = fitted.probability(tuned[held])
            decisions[held] = scores[held] > fitted.threshold
    return judged


def paired_rows(
    base: tuple[np.ndarray, np.ndarray],
    other: tuple[np.ndarray, np.ndarray],
    y: np.ndarray,
    folds: np.ndarray,
    resamples: int,
    seed: int,
) -> list[str]:
    """Per metric: (other - shipped) over all pairs, bootstrap interval, per-fold interval."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, y.size, size=(resamples, y.size))
    rows = []
    for name, metric in METRICS.items():
        point = _diff(metric, base, other, y)
        boot = np.array([_diff(metric, base, other, y, rows_=d) for d in draws])
        low, high = np.percentile(boot, [2.5, 97.5])
        per_fold = np.array([_diff(metric, base, other, y, rows_=np.flatnonzero(folds == k))
                             for k in np.unique(folds)])  # fmt: skip
        half = T_975.get(per_fold.size - 1, 1.96) * per_fold.std(ddof=1) / np.sqrt(per_fold.size)
        rows.append(
            f"| {name} | {100 * point:+.1f} | [{100 * low:+.1f}, {100 * high:+.1f}] "
            f"| {100 * per_fold.mean():+.1f} [{100 * (per_fold.mean() - half):+.1f}, "
            f"{100 * (per_fold.mean() + half):+.1f}] |"
        )
    return rows


def _diff(
    metric: Metric,
    base: tuple[np.ndarray, np.ndarray],
    other: tuple[np.ndarray, np.ndarray],
    y: np.ndarray,
    rows_: np.ndarray | None = None,
) -> float:
    r = np.arange(y.size) if rows_ is None else rows_
    return metric(other[0][r], y[r], other[1][r]) - metric(base[0][r], y[r], base[1][r])


def judge_row(name: str, scores: np.ndarray, decisions: np.ndarray, y: np.ndarray) -> str:
    m = classification_metrics(scores, y, decisions)
    rates = error_rates(y, decisions)
    return (
        f"| {name} | {percent(m['accuracy'])} | {percent(m['balanced_accuracy'])} "
        f"| {m['auc']:.3f} | {percent(rates['false_similar'])} "
        f"| {percent(rates['false_different'])} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m darling_nemo.bench.judge_cv", description=__doc__.split("\n")[0]
    )
    parser.add_argument("runs", help="the fold runs' output folder, with {k} for the fold")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="fold seed (the runs' split_seed)")
    parser.add_argument("--resamples", type=int, default=10000)
    args = parser.parse_args(argv)

    x, y, groups, rows = read_table(SHIPPED_TABLE)
    lines = np.array([r["line"] for r in rows])
    folds = grouped_folds(groups, args.folds, args.seed)
    shipped = cross_fit(x[:, columns(DEFAULT_FEATURES)], y, folds, DEFAULT_FEATURES)
    judged = finetuned_out_of_fold(args.runs, x, y, folds, lines)
    print(
        f"{y.size} shipped human pairs, out of fold ({args.folds} folds by prompt, seed {args.seed})\n"
    )
    print("| judge | accuracy | balanced accuracy | AUC | false similar | false different |")
    print("|---|---|---|---|---|---|")
    print(judge_row("shipped calibrated head", *shipped, y))
    for name, (scores, decisions) in judged.items():
        print(judge_row(name, scores, decisions, y))
    for name, other in judged.items():
        print(
            f"\n{name} minus the shipped head, points (bootstrap over prompts: "
            f"{args.resamples} resamples, seed {args.seed}; per fold: mean of {args.folds} "
            "paired differences, t-interval)\n"
        )
        print("| metric | difference | 95% bootstrap | per-fold mean [95%] |")
        print("|---|---|---|---|")
        print("\n".join(paired_rows(shipped, other, y, folds, args.resamples, args.seed)))


if __name__ == "__main__":
    main()
