"""Which pair judge a run calls: decided once, from its task and its `darling:` section.

    the task's own rule     a task that decides equivalence itself (digit_sum's multisets)
    its final answers       a method that needs answer classes (outcome): the task's judge
                            of final answers (math: math-verify; no task: math-verify too)
    darling.judge           where the section calls a pair model
    none                    the core's lexical rules alone

and, given the run's `task:` section, the judge training calls where the task trains with
another (the dice task's judge of chosen accuracy) and the task's own embeddings for a
method that needs them (DQO on the dice task).

Every engine and tool asks `run_judge` and passes the choice down: the NeMo-RL adapter's
reward hook, the TRL engine's task and reward (`trl/tasks.py`), darling-score and the rivals
benchmark (no task); the evaluations make the judge their own config names with
`configured_judge`, as `run_judge` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from darling_nemo import judges, methods
from darling_nemo.methods.base import EMBEDDINGS
from darling_nemo.mini.task import JudgeWithEmbeddings
from darling_nemo.schema import DarlingConfig
from darling_nemo.tasks.base import PairJudgeFn, Task
from darling_nemo.tasks.registry import task

# Whose final answers a run without a task compares (darling-score, the rivals benchmark).
NO_TASK_ANSWERS = "math"


def _none() -> None:
    return None


@dataclass(frozen=True)
class JudgeChoice:
    """A run's pair judge: `said`, how messages name it; `make()`, the judge (None: the
    lexical rules alone; a model judge is loaded only when made)."""

    said: str
    make: Callable[[], PairJudgeFn | None]
    answers: bool = False  # the judge compares final answers (answer classes)
    # The judge training calls instead of `make()`'s, where the task trains with another
    # (its `training_judge`; None from it: make()'s); evaluation keeps make()'s.
    training: Callable[[], PairJudgeFn | None] = _none
    # The task's own embeddings (texts -> vectors) where the method needs embeddings.
    embeddings: Callable[[], Any] | None = None

    def for_reward(self, judge: PairJudgeFn | None) -> PairJudgeFn | None:
        """The judge the reward calls: `judge` with the task's embeddings where the method
        needs them (an embedding judge gives its own otherwise)."""
        if self.embeddings is not None and judge is not None:
            return JudgeWithEmbeddings(judge, self.embeddings())
        return judge


def run_judge(entry: Task | None, darling: DarlingConfig, section: Any = None) -> JudgeChoice:
    """The pair judge a run of task `entry` (None: no task) with this `darling:` section
    calls; `section`, the run's TRL `task:` section, adds training's judge and embeddings."""
    choice = _pair_judge(task(NO_TASK_ANSWERS) if entry is None else entry, darling)
    if entry is None or section is None:
        return choice
    training = (lambda: entry.training_judge(section)) if entry.training_judge else _none
    wants = EMBEDDINGS in methods.method(darling.method).inputs
    embeddings = (lambda: entry.embeddings(section)) if wants and entry.embeddings else None
    return JudgeChoice(choice.said, choice.make, choice.answers, training, embeddings)


def _pair_judge(entry: Task, darling: DarlingConfig) -> JudgeChoice:
    if entry.own_judge is not None:
        own = entry.own_judge
        return JudgeChoice(f"the {entry.name} task's own rule", lambda: own, answers=True)
    if methods.method(darling.method).answer_classes:
        if entry.answer_judge is None:
            raise ValueError(
                f"darling.method={darling.method} needs final answers; the {entry.name} task "
                "has none"
            )
        return JudgeChoice(entry.answers_title, entry.answer_judge, answers=True)
    if not darling.calls_judge:
        return JudgeChoice(darling.judge.kind, _none)
    return JudgeChoice(darling.judge.kind, lambda: configured_judge(darling.judge))


def configured_judge(judge: Any) -> PairJudgeFn | None:
    """The judge a judge config names (`darling.judge`, an evaluation's `judge`); None: the
    lexical rules alone."""
    return judges.make_judge(judge)
