"""What the shipped CPU judges were measured to do: the words of a run's start-up line.

A run whose pairs the `embedding` judge decides (the TRL engine's configs, a one-node
NeMo-RL config with no visible GPU, a served judge's fallback) says at start-up which judge
it got and how that judge errs, so a reader of the log knows what its diversity is worth.
The pair figures are out of fold on the 1,000 shipped human pairs (5 folds split by prompt,
fold seed 0), recomputed from the shipped feature table by
`uv run python -m darling_nemo.bench.judge_operating_point` (part 1; numpy only, the same on
any machine; tests/judges/test_judge_figures.py checks these against it). The speed is
`python -m darling_nemo.bench.calibrated_judge` part 3 on a 2-core Xeon; the training
diversity is DARLING's on the main job's task with a judge wrong at these rates
(`conf/mini/routes_judge_rates.yaml`, docs/calibrated-judge.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JudgeFigures:
    """One shipped judge at its shipped threshold, measured."""

    name: str  # the judge in words
    measured_on: str  # which pairs, how
    threshold: float  # on its P(similar): the figures hold at this one only
    accuracy: float
    balanced_accuracy: float
    false_similar: float  # different pairs judged "similar" / different pairs
    false_different: float  # alike pairs judged "different" / alike pairs
    ms_per_pair: float  # all 28 pairs of a group of 8 new responses, 2 CPU cores
    # DARLING's mean training diversity on the routes task trained with a judge wrong at
    # these two rates (exact judge: ROUTES_EXACT_DIVERSITY); None: not measured
    routes_train_diversity: float | None = None


# DARLING's training diversity on the routes task with the exact route judge (seeds 1-5)
ROUTES_EXACT_DIVERSITY = 0.831
MINILM = "over the shipped all-MiniLM-L6-v2"
OUT_OF_FOLD = "the 1,000 human pairs, out of fold (5 folds split by prompt)"

# key: threshold, accuracy, balanced accuracy, false similar, false different, ms per pair,
# routes training diversity (None: not measured), the judge in words, the pairs measured
_MEASURED = {
    "calibrated_partition": (
        0.74, 0.728, 0.612, 35 / 673, 237 / 327, 10.2, 0.798,
        f"embedding judge, calibrated head {MINILM} (operating point: partition)",
        f"{OUT_OF_FOLD}, at this threshold",
    ),
    "calibrated_balanced": (
        0.516, 0.713, 0.711, 190 / 673, 97 / 327, 10.2, 0.561,
        f"embedding judge, calibrated head {MINILM} (operating point: balanced)",
        f"{OUT_OF_FOLD}, each fold at its own balanced threshold",
    ),
    "cosine": (
        0.89, 0.746, 0.688, 97 / 673, 157 / 327, 10.7, 0.717,
        f"embedding judge, cosine head {MINILM}",
        "the 1,000 human pairs (0.89 was chosen on 800 of them)",
    ),
}  # fmt: skip
SHIPPED: dict[str, JudgeFigures] = {
    key: JudgeFigures(name, where, *figures) for key, (*figures, name, where) in _MEASURED.items()
}


def shipped_figures(judge: Any) -> JudgeFigures | None:
    """The figures of `judge` (a darling.judge section) where it is a shipped CPU judge with
    the shipped model and calibration; None for any other judge."""
    if getattr(judge, "kind", None) != "embedding" or judge.model is not None:
        return None
    if judge.head == "cosine":
        return SHIPPED["cosine"]
    if judge.calibration is not None:
        return None
    return SHIPPED[f"calibrated_{judge.operating_point}"]


def say_judge_figures(darling: Any) -> None:
    """Print, as a run starts on either engine, the measured figures of the judge the
    `darling:` section calls (nothing where it calls none, or none are known)."""
    if darling.calls_judge:
        for line in judge_startup_lines(darling.judge):
            print(line, flush=True)


def judge_startup_lines(judge: Any) -> list[str]:
    """What a run prints at start-up about `judge` (a darling.judge section, or None): the
    measured figures of it and of its fallback, where they are shipped CPU judges."""
    lines = [judge_line(judge, "darling judge")]
    fallback = getattr(judge, "fallback", None)
    if fallback is not None:
        lines.append(judge_line(fallback, "darling judge's fallback (if the servers fail)"))
    return [line for line in lines if line is not None]


def judge_line(judge: Any, lead: str = "darling judge") -> str | None:
    """`darling judge: ...` with the judge's measured figures, or None where none are known
    (a served classifier, a task's own judge, a model or calibration of the user's)."""
    figures = shipped_figures(judge)
    if figures is None:
        return None
    words = f"{lead}: {figures.name}, threshold {judge.threshold:.3f}; measured on {figures.measured_on}"
    if abs(judge.threshold - figures.threshold) > 5e-4:
        return f"{words} at threshold {figures.threshold:g} only (this run's differs)"
    said = (
        f"{words}: accuracy {figures.accuracy:.1%}, balanced {figures.balanced_accuracy:.1%}, "
        f"false similar {figures.false_similar:.1%}, false different "
        f"{figures.false_different:.1%}; {figures.ms_per_pair:g} ms per pair in a group of 8 "
        "(2 CPU cores)"
    )
    if figures.routes_train_diversity is not None:
        said += (
            f"; DARLING's training diversity on the routes task at these rates "
            f"{figures.routes_train_diversity:.2f} (exact judge {ROUTES_EXACT_DIVERSITY:.2f})"
        )
    return said + " (docs/calibrated-judge.md)"
