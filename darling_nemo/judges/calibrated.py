"""The calibrated embedding judge's arithmetic: pair features, the logistic model, its fit.

numpy only (no torch): the fit, the shipped file and the benchmark's cross-fitting run on a
feature table, so refitting the shipped file is cheap and does not depend on a torch build.

Features of a pair (a, b), each symmetric in a and b:

    cos               cosine of the two responses' embeddings (MiniLM sees the first 256
                      word pieces of each)
    cos_first         cosine of the embeddings of their opening sentences
    cos_prompt        cos(e(a) - e(p), e(b) - e(p)): the cosine once the prompt's embedding
                      is taken out of both (benchmark only: the judge interface passes
                      pairs, never their prompt; docs/calibrated-judge.md)
    jaccard_words     |W(a) & W(b)| / |W(a) | W(b)| over the sets of lower-cased words
    jaccard_bigrams   the same over the sets of consecutive word pairs
    length_ratio      min(len) / max(len) in words

Model: P(similar) = sigmoid(intercept + sum_k coef_k (x_k - mean_k) / scale_k), fit by
Newton's method on the class-weighted log-loss (each class weighs half; a small ridge keeps
the Hessian well conditioned), then the threshold on P that maximises balanced accuracy on
the same pairs, so a set with more similar pairs than the training set is not judged
"different" by default.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ALL_FEATURES = (
    "cos",
    "cos_first",
    "cos_prompt",
    "jaccard_words",
    "jaccard_bigrams",
    "length_ratio",
)
JUDGE_FEATURES = frozenset(ALL_FEATURES) - {"cos_prompt"}  # what a PairJudge can compute
EMBEDDING_FEATURES = frozenset({"cos", "cos_first", "cos_prompt"})
CALIBRATION_FORMAT = 1
RIDGE = 1.0  # on standardized features, against a class-weighted loss summed over ~1,000 pairs
NEWTON_STEPS = 100
SIGNIFICANT_DIGITS = 10  # of every number written: far above BLAS/SIMD rounding differences

_WORD = re.compile(r"\w+")
_SENTENCE_END = re.compile(r"[.!?][\"'\u201d\u2019)*_]*(?=\s|$)")  # closing quotes, markup
_MARKUP = " \t#*>_-`"


def words(text: str) -> list[str]:
    """Lower-cased words (runs of letters, digits and underscores)."""
    return _WORD.findall(text.lower())


def opening_sentence(text: str) -> str:
    """The first non-empty line without markdown markers, cut after its first full stop,
    question or exclamation mark that ends a word (not the one of 3.5); the whole text when
    it has no non-empty line."""
    for line in text.splitlines():
        line = line.strip(_MARKUP)
        if line:
            end = _SENTENCE_END.search(line)
            return line[: end.end()].rstrip(_MARKUP) if end else line
    return text


@dataclass(frozen=True)
class WordStats:
    """What the word-overlap features need of one text (computed once per text)."""

    words: frozenset[str]
    bigrams: frozenset[tuple[str, str]]
    count: int

    @classmethod
    def of(cls, text: str) -> WordStats:
        w = words(text)
        return cls(frozenset(w), frozenset(itertools.pairwise(w)), len(w))


def jaccard(a: frozenset[Any], b: frozenset[Any]) -> float:
    """|a & b| / |a | b|; two empty sets are identical (1.0)."""
    union = len(a | b)
    return len(a & b) / union if union else 1.0


def word_features(a: WordStats, b: WordStats) -> dict[str, float]:
    longest = max(a.count, b.count)
    return {
        "jaccard_words": jaccard(a.words, b.words),
        "jaccard_bigrams": jaccard(a.bigrams, b.bigrams),
        "length_ratio": min(a.count, b.count) / longest if longest else 1.0,
    }


def cosine(u: np.ndarray, v: np.ndarray) -> float:
    """Cosine of two vectors; 0 when either is zero (a prompt equal to a response)."""
    norm = float(np.linalg.norm(u) * np.linalg.norm(v))
    return float(np.dot(u, v)) / norm if norm > 0 else 0.0


def round_sig(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    return float(f"{x:.{digits}g}")


def round_array(values: np.ndarray) -> np.ndarray:
    return np.array([round_sig(float(v)) for v in values])


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CalibratedModel:
    """A fitted logistic model over named pair features, and its decision threshold."""

    features: tuple[str, ...]
    mean: np.ndarray
    scale: np.ndarray
    coef: np.ndarray
    intercept: float
    threshold: float
    model: str | None  # the embedding model the features were computed with (None: shipped)

    def probability(self, x: np.ndarray) -> np.ndarray:
        """P(similar) for rows of features in `self.features` order."""
        z = self.intercept + ((np.asarray(x, dtype=float) - self.mean) / self.scale) @ self.coef
        return 1.0 / (1.0 + np.exp(-z))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "calibration") -> CalibratedModel:
        if data.get("format") != CALIBRATION_FORMAT:
            raise ValueError(
                f"{where}: format {data.get('format')!r}, expected {CALIBRATION_FORMAT}; refit "
                "with `python -m darling_nemo.judges.calibrate`"
            )
        features = tuple(data["features"])
        unknown = [f for f in features if f not in JUDGE_FEATURES]
        if unknown:
            raise ValueError(
                f"{where}: feature(s) {unknown} cannot be computed by the judge (known: "
                f"{', '.join(sorted(JUDGE_FEATURES))})"
            )
        return cls(
            features=features,
            mean=np.asarray(data["mean"], dtype=float),
            scale=np.asarray(data["scale"], dtype=float),
            coef=np.asarray(data["coef"], dtype=float),
            intercept=float(data["intercept"]),
            threshold=float(data["threshold"]),
            model=data["model"],
        )

    @classmethod
    def load(cls, path: str | Path) -> CalibratedModel:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"cannot read the judge calibration {path}: {err}") from None
        return cls.from_dict(data, str(path))


def fit_logistic(
    x: np.ndarray, y: np.ndarray, ridge: float = RIDGE
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coef, intercept) of a class-weighted, ridge-penalised logistic regression.

    Weights n / (2 n_c) make both classes count as much in the loss. Newton's method from
    zero: the loss is strictly convex (ridge > 0), so the steps converge to the one minimum
    and the result does not depend on a random start.
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    positives = y.sum()
    if positives == 0 or positives == y.size:
        raise ValueError("the fit needs pairs of both labels")
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)  # a constant feature stays 0 after centring
    z = np.column_stack([np.ones(len(x)), (x - mean) / scale])
    weight = np.where(y == 1, y.size / (2 * positives), y.size / (2 * (y.size - positives)))
    penalty = np.full(z.shape[1], ridge)
    penalty[0] = 0.0  # the intercept is not shrunk
    w = np.zeros(z.shape[1])
    for _ in range(NEWTON_STEPS):
        p = 1.0 / (1.0 + np.exp(-(z @ w)))
        gradient = z.T @ (weight * (p - y)) + penalty * w
        hessian = (z * (weight * p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        w = w - step
        if np.max(np.abs(step)) < 1e-12:
            break
    return mean, scale, w[1:], float(w[0])


def balanced_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """(threshold, balanced accuracy) maximising the balanced accuracy of score > threshold.

    Candidates: midpoints between consecutive distinct scores, plus one below the lowest and
    the highest itself; ties go to the lowest threshold (as pairdata.calibrate_threshold).
    """
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    if not 0 < y.sum() < y.size:
        raise ValueError("balanced accuracy needs pairs of both labels")
    distinct = np.unique(s)
    candidates = np.concatenate(
        [[distinct[0] - 1e-3], (distinct[:-1] + distinct[1:]) / 2, [distinct[-1]]]
    )
    said_similar = s[None, :] > candidates[:, None]
    tpr = (said_similar & (y == 1)).sum(axis=1) / (y == 1).sum()
    tnr = (~said_similar & (y == 0)).sum(axis=1) / (y == 0).sum()
    balanced = (tpr + tnr) / 2
    best = int(np.argmax(balanced))
    return float(candidates[best]), float(balanced[best])


def fit_model(
    x: np.ndarray, y: np.ndarray, features: Sequence[str], model: str | None = None
) -> CalibratedModel:
    """Fit the logistic model and its balanced-accuracy threshold on the same pairs.

    The parameters are rounded to SIGNIFICANT_DIGITS before the threshold is chosen, so the
    threshold is the best one for the model as written to the file."""
    raw = fit_logistic(x, y)
    mean, scale, coef = (round_array(v) for v in raw[:3])
    intercept = round_sig(raw[3])
    fitted = CalibratedModel(tuple(features), mean, scale, coef, intercept, 0.5, model)
    threshold, _ = balanced_threshold(fitted.probability(x), y)
    return CalibratedModel(
        tuple(features), mean, scale, coef, intercept, round_sig(threshold), model
    )


# ---------------------------------------------------------------------------------------------
# Metrics and folds (the benchmark's cross-fitting)
# ---------------------------------------------------------------------------------------------


def classification_metrics(
    scores: Sequence[float], labels: Sequence[int], said_similar: Sequence[bool]
) -> dict[str, float]:
    """accuracy, balanced accuracy (mean of the recall of each class) and AUC."""
    s, y, d = np.asarray(scores, float), np.asarray(labels, int), np.asarray(said_similar, bool)
    return {
        "accuracy": float(np.mean(d == (y == 1))),
        "balanced_accuracy": float((d[y == 1].mean() + (~d[y == 0]).mean()) / 2),
        "auc": auc(s, y),
    }


def error_rates(labels: Sequence[int], said_similar: Sequence[bool]) -> dict[str, float]:
    """false_similar: the share of different pairs judged similar (what merges classes);
    false_different: the share of similar pairs judged different."""
    y, d = np.asarray(labels, int), np.asarray(said_similar, bool)
    if not 0 < y.sum() < y.size:
        raise ValueError("error rates need pairs of both labels")
    return {"false_similar": float(d[y == 0].mean()), "false_different": float((~d[y == 1]).mean())}


def auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """P(score of a similar pair > score of a different one), ties counted one half."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    positives, negatives = s[y == 1], s[y == 0]
    if positives.size == 0 or negatives.size == 0:
        raise ValueError("AUC needs pairs of both labels")
    ordered = np.sort(negatives)
    below = np.searchsorted(ordered, positives, side="left")
    equal = np.searchsorted(ordered, positives, side="right") - below
    return float((below + 0.5 * equal).sum() / (positives.size * negatives.size))


def grouped_folds(groups: Sequence[str], k: int, seed: int) -> np.ndarray:
    """Fold index of each row: distinct groups (prompts), sorted then shuffled by seed, are
    dealt to the k folds in turn, so no group is on both sides of a fold."""
    names = sorted(set(groups))
    if len(names) < k:
        raise ValueError(f"{len(names)} groups cannot fill {k} folds")
    order = np.random.default_rng(seed).permutation(len(names))
    fold_of = {names[g]: rank % k for rank, g in enumerate(order)}
    return np.array([fold_of[g] for g in groups])


def cross_fit(
    x: np.ndarray, y: np.ndarray, folds: np.ndarray, features: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold P(similar) and decisions: each fold judged by a model and threshold fit
    on the other folds only."""
    scores, decisions = np.zeros(len(y)), np.zeros(len(y), dtype=bool)
    for k in np.unique(folds):
        held = folds == k
        fitted = fit_model(x[~held], y[~held], features)
        scores[held] = fitted.probability(x[held])
        decisions[held] = scores[held] > fitted.threshold
    return scores, decisions


def cross_fit_threshold(scores: np.ndarray, y: np.ndarray, folds: np.ndarray) -> np.ndarray:
    """Out-of-fold decisions of one score with a balanced-accuracy threshold fit on the
    other folds (the cosine baseline given the same calibration rule)."""
    decisions = np.zeros(len(y), dtype=bool)
    for k in np.unique(folds):
        held = folds == k
        threshold, _ = balanced_threshold(scores[~held], y[~held])
        decisions[held] = scores[held] > threshold
    return decisions


# ---------------------------------------------------------------------------------------------
# The calibration file
# ---------------------------------------------------------------------------------------------


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def calibration_document(
    fitted: CalibratedModel,
    x: np.ndarray,
    y: np.ndarray,
    provenance: dict[str, Any],
) -> str:
    """The calibration file's text: coefficients, threshold, provenance and in-sample
    figures, every number to SIGNIFICANT_DIGITS digits (so the same features give the same
    bytes on any machine)."""
    probability = fitted.probability(x)
    in_sample = classification_metrics(probability, y, probability > fitted.threshold)

    def numbers(values: np.ndarray) -> list[float]:
        return [round_sig(float(v)) for v in values]

    document = {
        "format": CALIBRATION_FORMAT,
        "what": (
            "darling-nemo calibrated embedding judge: P(similar) = sigmoid(intercept + "
            "sum_k coef_k * (x_k - mean_k) / scale_k); similar iff P > threshold"
        ),
        "model": fitted.model,
        "features": list(fitted.features),
        "mean": numbers(fitted.mean),
        "scale": numbers(fitted.scale),
        "coef": numbers(fitted.coef),
        "intercept": round_sig(fitted.intercept),
        "threshold": round_sig(fitted.threshold),
        "fit": {
            **provenance,
            "pairs": int(y.size),
            "similar": int(y.sum()),
            "class_weights": "n / (2 n_class): each class weighs half",
            "ridge": RIDGE,
            "threshold_rule": "maximum balanced accuracy on the training pairs",
        },
        "in_sample": {k: round_sig(v) for k, v in in_sample.items()},
    }
    return json.dumps(document, indent=2) + "\n"
