"""Which pair judge a run calls: decided once, from its task and its `darling:` section.

    the task's own rule     a task that decides equivalence itself (digit_sum's multisets)
    its final answers       a method that needs answer classes (outcome): the task's judge
                            of final answers (math: math-verify)
    darling.judge           where the section calls a pair model
    none                    the core's lexical rules alone

Every engine and tool asks `run_judge` and passes the choice down (the NeMo-RL adapter's
reward hook, the TRL engine's reward, darling-score, the rivals benchmark).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from darling_nemo import methods
from darling_nemo.schema import DarlingConfig
from darling_nemo.tasks.base import PairJudgeFn, Task


@dataclass(frozen=True)
class JudgeChoice:
    """A run's pair judge: `said`, how messages name it; `make()`, the judge (None: the
    lexical rules alone; a model judge is loaded only when made)."""

    said: str
    make: Callable[[], PairJudgeFn | None]
    answers: bool = False  # the judge compares final answers (answer classes)


def run_judge(entry: Task, darling: DarlingConfig) -> JudgeChoice:
    """The pair judge a run of task `entry` with this `darling:` section calls."""
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
        return JudgeChoice(darling.judge.kind, lambda: None)
    return JudgeChoice(darling.judge.kind, lambda: _configured(darling.judge))


def _configured(judge: Any) -> PairJudgeFn | None:
    from darling_nemo.judges import make_judge

    return make_judge(judge)
