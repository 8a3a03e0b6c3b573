"""chat: open-ended prompts (WildChat-style) scored by a reward model, on both engines.

TRL: prompts (text or a conversation) from a JSONL file, scored by `task.quality` (a
reward model, or a length stand-in for smoke runs). NeMo-RL: NeMo-RL's
RewardModelEnvironment (a Bradley-Terry reward model on its own GPUs, env.reward_model)
over rows that darling-prep-wildchat writes. Graded scores and no final answer. Its
NeMo-RL data written before the task had one name say `wildchat`, still accepted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from darling_nemo.schema import (
    ChatTaskConfig,
    LengthStandInQualityConfig,
    RewardModelQualityConfig,
)
from darling_nemo.tasks.base import NemoRlTask, Prompts, QualityFn, Task
from darling_nemo.tasks.prompt_budget import fit_prompts
from darling_nemo.tasks.rows import (
    chat_prompt_column,
    completion_text,
    nonempty_task_rows,
    prompt_words,
)


def length_stand_in_quality(target_words: int) -> QualityFn:
    """STAND-IN, not a quality measure: min(words, target) / target. Smoke runs only."""

    def length_stand_in(
        prompts: Sequence[Any], completions: Sequence[Any], **_: Any
    ) -> list[float]:
        return [
            min(len(completion_text(c).split()), target_words) / target_words for c in completions
        ]

    return length_stand_in


class RewardModelQuality:
    """Scores (prompt, response) with a sequence-classification reward model (logit 0).

    The pair is rendered with the reward model's chat template when it has one (user turn,
    assistant turn), else as prompt + response, like TRL does for reward models.
    """

    __name__ = "reward_model"

    def __init__(self, cfg: RewardModelQualityConfig) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.name_or_path)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            cfg.name_or_path, num_labels=1
        ).to(self.device)
        self.model.eval()
        self.cfg = cfg

    def render(self, prompt: Any, completion: Any) -> str:
        """The reward model's input: the conversation in its chat template, if it has one."""
        response = completion_text(completion)
        if self.tokenizer.chat_template:
            messages = (
                [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            )
            messages.append({"role": "assistant", "content": response})
            return self.tokenizer.apply_chat_template(messages, tokenize=False)
        return completion_text(prompt) + response

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        import torch

        texts = [self.render(p, c) for p, c in zip(prompts, completions, strict=True)]
        scores: list[float] = []
        for start in range(0, len(texts), self.cfg.batch_size):
            encoded = self.tokenizer(
                texts[start : start + self.cfg.batch_size],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=self.cfg.max_length,
                add_special_tokens=not self.tokenizer.chat_template,
            ).to(self.device)
            with torch.inference_mode():
                scores.extend(self.model(**encoded).logits[:, 0].float().tolist())
        return scores


def prompts(cfg: Any) -> Prompts:
    """The file's prompts, each fitted to the prompt budget; none held out."""
    section = cfg.task
    raw, lines = nonempty_task_rows(section)
    texts = chat_prompt_column(raw, lines, section)
    rows = [{"prompt": p} for p in fit_prompts(cfg, texts, lambda text: text, lines)]
    return Prompts(rows, [], prompt_words(rows))


def quality(section: ChatTaskConfig) -> QualityFn:
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
    ),
    aliases=("wildchat",),
)
