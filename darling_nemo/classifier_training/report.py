"""What a classifier run reports: the held-out figures every mode shares, the embedding-cosine
baseline on the same split, and the judge card (`darling_classifier.json`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.judges.pairdata import (
    LabelledPair,
    accuracy,
    calibrate_threshold,
    cross_fitted_accuracy,
)
from darling_nemo.schema import ClassifierTrainConfig, EmbeddingJudgeConfig


def split_metrics(heldout: list[LabelledPair], steps: int, minutes: float) -> dict[str, Any]:
    """The held-out split's size and class balance (the majority class is the accuracy to
    beat) and the training this run did."""
    labels = [p.label for p in heldout]
    return {
        "heldout_pairs": len(heldout),
        "heldout_similar_share": float(np.mean(labels)),
        "majority_accuracy": float(max(np.mean(labels), 1 - np.mean(labels))),
        "train_steps": steps,
        "train_minutes_this_run": round(minutes, 2),
    }


def embedding_baseline(
    cfg: ClassifierTrainConfig, train: list[LabelledPair], heldout: list[LabelledPair]
) -> dict[str, float]:
    """The untuned embedding cosine on the same split, its threshold calibrated on the
    training part and on the held-out part."""
    from darling_nemo.judges.embedding import EmbeddingJudge

    judge = EmbeddingJudge(EmbeddingJudgeConfig(head="cosine", device=cfg.device))
    labels = [p.label for p in heldout]
    train_cos = judge([(p.a, p.b) for p in train])
    cos = judge([(p.a, p.b) for p in heldout])
    train_threshold, _ = calibrate_threshold(train_cos, [p.label for p in train])
    held_threshold, held_acc = calibrate_threshold(cos, labels)
    return {
        "threshold_calibrated_on_train": train_threshold,
        "accuracy_at_train_threshold": accuracy(cos, labels, train_threshold),
        "threshold_calibrated_on_heldout": held_threshold,
        "accuracy_at_heldout_threshold": held_acc,
        "accuracy_cross_fitted": cross_fitted_accuracy(cos, labels, seed=cfg.split_seed),
    }


def write_card(
    out_dir: Path, judge_settings: dict[str, Any], base_model: str, metrics: dict[str, Any]
) -> None:
    """`darling_classifier.json`, then the metrics and the `--judge` flags that load it."""
    card = {"judge": judge_settings, "base_model": base_model, "metrics": metrics}
    (out_dir / "darling_classifier.json").write_text(json.dumps(card, indent=2))
    print(json.dumps(metrics, indent=2))
    flags = " ".join(
        f"--judge-set {k}={v:.4f}" if isinstance(v, float) else f"--judge-set {k}={v}"
        for k, v in judge_settings.items()
        if k not in ("kind", "max_length")
    )
    print(f"saved {out_dir}\njudge: --judge {judge_settings['kind']} {flags}")


def write_scores(out_dir: Path, scores: dict[str, tuple[list[LabelledPair], np.ndarray]]) -> None:
    """`scores.jsonl`: per scored pair its line in the data file, part, label and score."""
    rows = [
        json.dumps({"line": p.line, "part": part, "similar": p.label, "score": float(score)})
        for part, (pairs, values) in scores.items()
        for p, score in zip(pairs, values, strict=True)
    ]
    (out_dir / "scores.jsonl").write_text("\n".join(rows) + "\n")
