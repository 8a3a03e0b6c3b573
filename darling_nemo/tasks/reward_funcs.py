"""reward_funcs: a user's own TRL-style reward functions as DARLING's quality, on both engines
(docs/your-own-task.md; on NeMo-RL: darling_nemo/nemo_rl/user_env.py).

Prompts from `task.data_path` (JSONL), every other column passed to the functions as a
keyword, exactly as TRL's GRPOTrainer passes dataset columns; quality is the weighted sum of
`task.reward_funcs` (import paths, `task.reward_weights`), computed in a worker pool with a
per-call timeout (darling_nemo/user_rewards.py). Graded: no final answers to compare, unless
`task.answer_func` names a function that gives them (for the methods with answer classes,
outcome); they are then compared exactly, by the core's partition with no judge.
"""

from __future__ import annotations

from typing import Any

from darling_nemo.schema import RewardFuncsTaskConfig
from darling_nemo.tasks.base import AnswerFn, PairJudgeFn, Prompts, QualityFn, Task


def prompts(cfg: Any) -> Prompts:
    """Every row trains (no held-out split); the first is scored once by every function, so
    a function that cannot run fails here, before any model is loaded."""
    from darling_nemo.trl.tasks import prompt_words, reward_funcs_rows
    from darling_nemo.user_rewards import check_reward_funcs, prompt_key

    section = cfg.task
    rows, labels = reward_funcs_rows(cfg, section)
    check_reward_funcs(
        section.reward_funcs,
        section.python_path,
        rows[0],
        "task",
        section.answer_func,
        section.reward_timeout_s,
    )
    by_prompt = {prompt_key(row["prompt"]): label for row, label in zip(rows, labels, strict=True)}
    return Prompts(rows, [], prompt_words(rows), by_prompt)


def quality(section: RewardFuncsTaskConfig) -> QualityFn:
    from darling_nemo.trl.tasks import reward_funcs_quality

    return reward_funcs_quality(section)


def no_judge() -> PairJudgeFn | None:
    """The answers are compared exactly: equal answers are one class (`answers`)."""
    return None


def answers(quality: QualityFn) -> AnswerFn | None:
    """task.answer_func, in the reward functions' worker pool; None where none is named."""
    from darling_nemo.user_rewards import UserQuality

    assert isinstance(quality, UserQuality)
    return quality.answers if quality.answer_spec is not None else None


def config_check(section: RewardFuncsTaskConfig) -> None:
    """--dry-run: the data file reads and every function imports and scores the first row."""
    from darling_nemo.trl.tasks import check_reward_funcs_task

    check_reward_funcs_task(section)


TASK = Task(
    "reward_funcs",
    "your own reward functions",
    config=RewardFuncsTaskConfig,
    prompts=prompts,
    quality=quality,
    answer_judge=no_judge,
    answers_title="task.answer_func's answers",
    answers=answers,
    graded=True,
    config_check=config_check,
    nemo_rl_setup="darling_nemo.nemo_rl.user_env.setup_user_data",
)
