"""chat: open-ended prompts (WildChat-style) scored by a reward model, on both engines.

TRL: prompts (text or a conversation) from a JSONL file, scored by `task.quality` (a
reward model, or a length stand-in for smoke runs). NeMo-RL: NeMo-RL's
RewardModelEnvironment (a Bradley-Terry reward model on its own GPUs, env.reward_model)
over rows that darling-prep-wildchat writes. Graded scores and no final answer. Its
NeMo-RL data written before the task had one name say `wildchat`, still accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    LengthStandInQualityConfig,
    RewardModelQualityConfig,
)
from darling_nemo.tasks.base import NemoRlTask, Prompts, QualityFn, Task


def prompts(cfg: Any) -> Prompts:
    """The file's prompts, each fitted to the prompt budget; none held out."""
    from darling_nemo.trl.prompt_budget import fit_prompts
    from darling_nemo.trl.tasks import column, is_chat_prompt, prompt_words, task_rows

    section = cfg.task
    raw, lines = task_rows(section)
    if not raw:
        raise ConfigError(f"task.data_path: {section.data_path} has no rows: nothing to train on")
    texts = column(
        raw,
        lines,
        section.prompt_key,
        section.data_path,
        "task.prompt_key",
        is_chat_prompt,
        'a string or a list of {"role": ..., "content": ...} turns',
    )
    rows = [{"prompt": p} for p in fit_prompts(cfg, texts, lambda text: text, lines)]
    return Prompts(rows, [], prompt_words(rows))


def quality(section: ChatTaskConfig) -> QualityFn:
    from darling_nemo.trl.tasks import RewardModelQuality, length_stand_in_quality

    if isinstance(section.quality, LengthStandInQualityConfig):
        return length_stand_in_quality(section.quality.target_words)
    return RewardModelQuality(section.quality)


def model_paths(section: ChatTaskConfig) -> list[tuple[str, str]]:
    if isinstance(section.quality, RewardModelQualityConfig):
        return [("task.quality.name_or_path", section.quality.name_or_path)]
    return []


def rehearsal_row(row: Mapping[str, Any]) -> dict[str, str]:
    return {"input": row["prompt"], "output": ""}


TASK = Task(
    "chat",
    "open-ended chat",
    config=ChatTaskConfig,
    prompts=prompts,
    quality=quality,
    graded=True,
    model_paths=model_paths,
    evaluations={
        "noveltybench": "conf/eval/noveltybench.yaml",
        "creative": "conf/eval/creative.yaml",
    },
    nemo_rl=NemoRlTask(
        environment="nemo_rl.environments.reward_model_environment.RewardModelEnvironment",
        env_key="reward_model",
        processor="chat_prompt",
        needs_reward_model=True,
        rehearsal_data="noveltybench/wildchat-1k.jsonl",
        rehearsal_row=rehearsal_row,
        prep_command="darling-prep-wildchat",
        row_task_name="wildchat",
        judge_overhead={"sync": 0.144, "overlap": 0.0, "overlap+stream": 0.0},
    ),
    aliases=("wildchat",),
)
