"""reward_funcs: a user's own TRL-style reward functions as DARLING's quality, on both engines
(docs/your-own-task.md; on NeMo-RL: darling_nemo/nemo_rl/user_env.py).

Prompts from `task.data_path` (JSONL), every other column passed to the functions as a
keyword, exactly as TRL's GRPOTrainer passes dataset columns; quality is the weighted sum of
`task.reward_funcs` (import paths, `task.reward_weights`), computed in a worker pool with a
per-call timeout (darling_nemo/user_rewards.py). Graded: no final answers to compare.
"""

from __future__ import annotations

from typing import Any

from darling_nemo.schema import RewardFuncsTaskConfig
from darling_nemo.tasks.base import Prompts, QualityFn, Task


def prompts(cfg: Any) -> Prompts:
    """Every row trains (no held-out split); the first is scored once by every function, so
    a function that cannot run fails here, before any model is loaded."""
    from darling_nemo.trl.tasks import prompt_words, reward_funcs_rows
    from darling_nemo.user_rewards import check_reward_funcs

    rows, _ = reward_funcs_rows(cfg, cfg.task)
    check_reward_funcs(cfg.task.reward_funcs, cfg.task.python_path, rows[0], "task")
    return Prompts(rows, [], prompt_words(rows))


def quality(section: RewardFuncsTaskConfig) -> QualityFn:
    from darling_nemo.trl.tasks import reward_funcs_quality

    return reward_funcs_quality(section)


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
    graded=True,
    config_check=config_check,
    nemo_rl_setup="darling_nemo.nemo_rl.user_env.setup_user_data",
)
