"""digit_sum: the miniature's dice task (darling_nemo/mini/task.py), TRL engine only.

`length` digits that total a target; quality 1 for a right answer. Two answers are one
class when they hold the same digits (its own multiset judge, so `darling.judge` stays
unset): it compares final answers already, for every method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from darling_nemo.mini.task import (
    DigitSum,
    FlippedJudge,
    multiset_judge,
    prompt_text,
    training_judge_of,
)
from darling_nemo.mini.warm_start import MiniatureTask, WarmStartData
from darling_nemo.schema import DigitSumTaskConfig, WarmStartConfig
from darling_nemo.tasks.base import Prompts, QualityFn, Task
from darling_nemo.tasks.rows import completion_text


def digit_sum_task(section: DigitSumTaskConfig) -> DigitSum:
    return DigitSum(section.length, section.min_digit, section.max_digit)


def digit_sum_targets(section: DigitSumTaskConfig) -> dict[str, list[int]]:
    """Training and held-out target sums: every `heldout_every`-th target from min+1 is held out."""
    targets = range(section.min_target, section.max_target + 1)
    heldout = [t for t in targets if (t - section.min_target - 1) % section.heldout_every == 0]
    return {"train": [t for t in targets if t not in heldout], "heldout": heldout}


def prompts(cfg: Any) -> Prompts:
    targets = digit_sum_targets(cfg.task)
    return Prompts(
        train=[{"prompt": prompt_text(t)} for t in targets["train"]],
        heldout=[{"prompt": prompt_text(t)} for t in targets["heldout"]],
        vocabulary=digit_sum_task(cfg.task).vocabulary(),
    )


def digit_sum_quality(task: DigitSum) -> QualityFn:
    """1.0 for an answer of the right length, digits and total, else 0.0."""

    def digit_sum_correct(
        prompts: Sequence[str], completions: Sequence[Any], **_: Any
    ) -> list[float]:
        return [
            float(task.is_correct(completion_text(p), completion_text(c)))
            for p, c in zip(prompts, completions, strict=True)
        ]

    return digit_sum_correct


def quality(section: DigitSumTaskConfig) -> QualityFn:
    return digit_sum_quality(digit_sum_task(section))


def training_judge(section: DigitSumTaskConfig) -> FlippedJudge | None:
    """The multiset judge made wrong on a chosen fraction of pairs (task.judge_accuracy), or
    at chosen false-similar and false-different rates (task.judge_false_*)."""
    return training_judge_of(multiset_judge, section)


def embeddings(section: DigitSumTaskConfig) -> Any:
    return digit_sum_task(section).embed


def miniature(section: DigitSumTaskConfig, warm: WarmStartConfig) -> MiniatureTask:
    """Every target, training and held-out alike (the role of pretraining), with Zipf weights
    over each target's multisets in an order fixed by the seed."""
    task = digit_sum_task(section)
    targets = digit_sum_targets(section)

    def data(seed: int) -> WarmStartData:
        return WarmStartData(
            keys=targets["train"] + targets["heldout"],
            prompt=prompt_text,
            answer=lambda target, rng: [
                str(d) for d in task.sample_answer(target, warm.zipf_exponent, seed, rng)
            ],
        )

    heldout = targets["heldout"]
    return MiniatureTask(
        warm_start=data,
        heldout_note=f"Held-out targets {heldout}",
        title=(
            f"Dice task: {section.length} dice ({section.min_digit}..{section.max_digit}) "
            f"totalling S; held out of RL: S = {', '.join(map(str, heldout))}"
        ),
    )


TASK = Task(
    "digit_sum",
    "the dice task",
    config=DigitSumTaskConfig,
    prompts=prompts,
    quality=quality,
    own_judge=multiset_judge,
    training_judge=training_judge,
    embeddings=embeddings,
    miniature=miniature,
)
