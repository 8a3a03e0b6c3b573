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

from darling_nemo.schema import ConfigError, RewardFuncsTaskConfig, TrlRunConfig
from darling_nemo.tasks.base import AnswerFn, PairJudgeFn, Prompts, QualityFn, Task
from darling_nemo.tasks.prompt_budget import fit_prompts
from darling_nemo.tasks.rows import chat_prompt_column, column, nonempty_task_rows, prompt_words
from darling_nemo.user_rewards import UserQuality, check_reward_funcs, prompt_key


def reward_funcs_rows(
    cfg: TrlRunConfig, task: RewardFuncsTaskConfig
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of task.data_path (prompt fitted to the budget, every other column kept for
    the reward functions' keywords) and each row's label for run-time errors."""

    raw, lines = nonempty_task_rows(task)
    texts = chat_prompt_column(raw, lines, task)
    prompts = fit_prompts(cfg, texts, lambda text: text, lines)
    rows = [
        {**{k: v for k, v in row.items() if k != task.prompt_key}, "prompt": prompt}
        for row, prompt in zip(raw, prompts, strict=True)
    ]
    labels = [
        f"{task.data_path}:{line}" + (f" (id {row['id']})" if "id" in row else "")
        for row, line in zip(raw, lines, strict=True)
    ]
    return rows, labels


def nemo_rl_rows(task: RewardFuncsTaskConfig) -> list[dict[str, Any]]:
    """Every row of task.data_path as NeMo-RL trains on it: the prompt as written (NeMo-RL
    masks over-long prompts itself, data.max_input_seq_length), the other columns and the
    row's label ("data.jsonl:7 (id x)") for run-time errors (`Task.nemo_rl_rows`)."""
    raw, lines = nonempty_task_rows(task)
    rows = []
    for row, line in zip(raw, lines, strict=True):
        if task.prompt_key not in row:
            raise ConfigError(
                f"task.prompt_key: {task.data_path}:{line} has no {task.prompt_key!r}"
            )
        label = f"{task.data_path}:{line}" + (f" (id {row['id']})" if "id" in row else "")
        columns = {k: v for k, v in row.items() if k != task.prompt_key}
        rows.append({"prompt": row[task.prompt_key], "columns": columns, "row": label})
    return rows


def check_reward_funcs_task(task: RewardFuncsTaskConfig) -> None:
    """The config phase (--dry-run): the data file reads and every reward function imports,
    takes TRL's keywords and scores the first prompt (ConfigError naming the key)."""
    raw, lines = nonempty_task_rows(task)
    prompt = column(raw[:1], lines[:1], task.prompt_key, task.data_path, "task.prompt_key")[0]
    first = {**{k: v for k, v in raw[0].items() if k != task.prompt_key}, "prompt": prompt}
    checked = check_reward_funcs(
        task.reward_funcs,
        task.python_path,
        first,
        "task",
        task.answer_func,
        task.reward_timeout_s,
    )
    for line in checked:  # what the dry run checked, one line per function
        print(f"checked {line}", flush=True)


def reward_funcs_quality(task: RewardFuncsTaskConfig) -> QualityFn:
    """A user's reward functions (darling_nemo/user_rewards.py) as one quality function, and
    task.answer_func in the same pool; a row is named in errors by the label the task's
    prompts give it (`Prompts.row_labels`: task.data_path:line and its id, `build_task`)."""
    return UserQuality(
        task.reward_funcs,
        task.reward_weights,
        task.python_path,
        task.reward_workers,
        task.reward_timeout_s,
        {},
        task.answer_func,
    )


def prompts(cfg: Any) -> Prompts:
    """Every row trains (no held-out split); the first is scored once by every function, so
    a function that cannot run fails here, before any model is loaded."""
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
    return reward_funcs_quality(section)


def no_judge() -> PairJudgeFn | None:
    """The answers are compared exactly: equal answers are one class (`answers`)."""
    return None


def answers(quality: QualityFn) -> AnswerFn | None:
    """task.answer_func, in the reward functions' worker pool; None where none is named."""
    assert isinstance(quality, UserQuality)
    return quality.answers if quality.answer_spec is not None else None


def config_check(section: RewardFuncsTaskConfig) -> None:
    """--dry-run: the data file reads and every function imports and scores the first row."""
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
    nemo_rl_rows=nemo_rl_rows,
)
