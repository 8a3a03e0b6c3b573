"""What a TRL run trains on: prompts, their quality function and the pair judge, put together.

The task (`task.kind`) is asked of the task registry (darling_nemo/tasks/: its prompts, its
quality function and the row helpers the shipped tasks share), the pair judge of
`tasks.judge.run_judge`. Quality functions are TRL-style reward functions, `(prompts=...,
completions=..., **dataset columns) -> floats`; `DarlingReward` turns them into DARLING
advantages. Torch-free at import.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from darling_nemo import methods, tasks
from darling_nemo.core import PairJudge
from darling_nemo.schema import TrlRunConfig
from darling_nemo.tasks.base import AnswerFn, QualityFn
from darling_nemo.tasks.judge import JudgeChoice, run_judge


@dataclass
class TrainingTask:
    """What a run trains on: prompts (dicts with "prompt" and extra columns), quality, judge."""

    train_rows: list[dict[str, Any]]
    heldout_rows: list[dict[str, Any]]
    quality: QualityFn
    judge: PairJudge | None
    word_vocabulary: list[str] | None  # tiny policies: a word tokenizer over these; None: chars
    # What counts distinct answers in evaluation when it is not `judge`: the dice task trains
    # with a judge of chosen accuracy (task.judge_accuracy) but is measured exactly.
    evaluation_judge: PairJudge | None = None
    # Each completion's final answer, for a method with answer classes, where the task gives
    # them by a function (task.answer_func): the partition compares these, not the texts.
    answers: AnswerFn | None = None


def build_task(cfg: TrlRunConfig, judge: JudgeChoice | None = None) -> TrainingTask:
    """The task a config names (asked of the task registry), with its quality function and
    pair judge. `judge`: the run's judge, decided once by the caller; None: decided here."""
    entry = tasks.task_of(cfg.task)
    assert entry.prompts is not None and entry.quality is not None  # (it has a TRL section)
    prompts = entry.prompts(cfg)
    quality = entry.quality(cfg.task)
    labels = getattr(quality, "row_labels", None)
    if isinstance(labels, dict):  # a user's functions name a failing row by its file:line
        labels.update(prompts.row_labels)
    wants_answers = methods.method(cfg.darling.method).answer_classes
    answers = entry.answers(quality) if wants_answers and entry.answers else None
    choice = judge or run_judge(entry, cfg.darling, cfg.task)
    made = choice.make()  # once the data is known good
    trains_with = choice.training()
    if trains_with is not None:  # training's judge is wrong on purpose; evaluation's is not
        return TrainingTask(
            prompts.train, prompts.heldout, quality, trains_with, prompts.vocabulary, made
        )
    return TrainingTask(
        prompts.train, prompts.heldout, quality, made, prompts.vocabulary, answers=answers
    )


def judge_for_method(cfg: TrlRunConfig, judge: PairJudge | None) -> PairJudge | None:
    """The task's judge, given the task's own embeddings (the dice task's `DigitSum.embed`)
    where the method needs embeddings (DQO), as `run_judge` decides; other tasks' come from
    an embedding judge."""
    return run_judge(tasks.task_of(cfg.task), cfg.darling, cfg.task).for_reward(judge)
