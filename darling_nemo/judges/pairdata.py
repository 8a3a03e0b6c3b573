"""Labelled pair data, its held-out split, and threshold calibration (numpy only).

A pair file is JSONL with two texts and a 0/1 label per line (field names configurable; the
NoveltyBench human judgements use generation_0, generation_1, similar). The split keeps all
pairs that share `split_key` (the prompt) on one side, chosen by seed, so no prompt is seen
in training and evaluation both.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from darling_nemo.jsonl import scan_jsonl


@dataclass(frozen=True)
class LabelledPair:
    a: str
    b: str
    label: int  # 1 = semantically equivalent
    group: str  # the split key's value (e.g. the prompt), JSON-encoded
    line: int  # line number in the file (for reporting the split)


def load_pairs(
    path: str | Path, text_a: str, text_b: str, label: str, split_key: str
) -> list[LabelledPair]:
    """Read and check every line; one error lists every bad line as file:line."""
    path = Path(path)
    pairs = []
    try:
        records, problems = scan_jsonl(path)
    except FileNotFoundError:
        raise ValueError(f"pair data not found: {path}") from None
    for lineno, row in records:
        missing = [k for k in (text_a, text_b, label) if k not in row]
        if missing:
            problems.append((lineno, f"missing field(s) {', '.join(missing)}"))
            continue
        if not isinstance(row[text_a], str) or not isinstance(row[text_b], str):
            problems.append((lineno, f"{text_a} and {text_b} must be strings"))
            continue
        value = row[label]
        if value not in (0, 1):  # True/False compare equal to 1/0
            problems.append((lineno, f"{label} must be 0 or 1, got {value!r}"))
            continue
        group = row.get(split_key, f"line {lineno}")
        pairs.append(LabelledPair(row[text_a], row[text_b], int(value), json.dumps(group), lineno))
    if problems:
        lines = [f"{path}:{lineno}: {problem}" for lineno, problem in sorted(problems)[:20]]
        raise ValueError("malformed pair data:\n  " + "\n  ".join(lines))
    if not pairs:
        raise ValueError(f"{path}: no pairs")
    return pairs


def group_key(pair: LabelledPair) -> str:
    """A short stable name of the pair's group (its prompt): the feature table's `group`,
    by which the benchmark's folds and a classifier run's `cv_folds` deal pairs."""
    return hashlib.sha256(pair.group.encode()).hexdigest()[:16]


def split_pairs(
    pairs: Sequence[LabelledPair], heldout_fraction: float, seed: int
) -> tuple[list[LabelledPair], list[LabelledPair]]:
    """(train, held-out): whole groups, shuffled by seed, go to held-out until it holds
    at least heldout_fraction of the pairs."""
    groups = sorted({p.group for p in pairs})
    random.Random(seed).shuffle(groups)
    size: dict[str, int] = {}
    for p in pairs:
        size[p.group] = size.get(p.group, 0) + 1
    heldout_groups: set[str] = set()
    count = 0
    for g in groups:
        if count >= heldout_fraction * len(pairs):
            break
        heldout_groups.add(g)
        count += size[g]
    train = [p for p in pairs if p.group not in heldout_groups]
    heldout = [p for p in pairs if p.group in heldout_groups]
    return train, heldout


def accuracy(scores: Sequence[float], labels: Sequence[int], threshold: float) -> float:
    """Share of pairs where (score > threshold) equals the label."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    return float(np.mean((s > threshold) == (y == 1)))


def calibrate_threshold(scores: Sequence[float], labels: Sequence[int]) -> tuple[float, float]:
    """(threshold, accuracy) maximising accuracy of `score > threshold`.

    Candidates: midpoints between consecutive distinct scores, plus one below the lowest
    (all similar) and the highest (none similar). Ties go to the lowest threshold.
    """
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    if s.size == 0:
        raise ValueError("no scores to calibrate on")
    distinct = np.unique(s)
    candidates = np.concatenate(
        [[distinct[0] - 1e-3], (distinct[:-1] + distinct[1:]) / 2, [distinct[-1]]]
    )
    correct = ((s[None, :] > candidates[:, None]) == (y[None, :] == 1)).mean(axis=1)
    best = int(np.argmax(correct))
    return float(candidates[best]), float(correct[best])


def cross_fitted_accuracy(
    scores: Sequence[float], labels: Sequence[int], folds: int = 2, seed: int = 0
) -> float:
    """Accuracy with a threshold calibrated on the OTHER folds (an honest estimate of
    "calibrate on this split, then use" without scoring the pairs the threshold saw)."""
    s, y = np.asarray(scores, dtype=float), np.asarray(labels, dtype=int)
    if s.size < 2:
        raise ValueError("cross-fitting needs at least 2 pairs")
    order = np.random.default_rng(seed).permutation(s.size)
    correct = 0
    for k in range(folds):
        held = order[k::folds]
        rest = np.setdiff1d(order, held)
        threshold, _ = calibrate_threshold(s[rest], y[rest])
        correct += int(np.sum((s[held] > threshold) == (y[held] == 1)))
    return correct / s.size
