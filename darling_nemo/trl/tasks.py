"""What a TRL run trains on: prompts, their quality function and the pair judge.

The task (`task.kind`) is asked of the task registry (darling_nemo/tasks/: its prompts and
its quality), the pair judge of `tasks.judge.run_judge`. Here: the quality functions and
the data helpers the shipped tasks share. Quality functions are TRL-style reward
functions, `(prompts=..., completions=..., **dataset columns) -> floats`; `DarlingReward`
turns them into DARLING advantages. Torch-free at import: the reward model loads torch
when it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from darling_nemo import methods, tasks
from darling_nemo.core import PairJudge
from darling_nemo.jsonl import read_jsonl_numbered
from darling_nemo.methods.base import EMBEDDINGS
from darling_nemo.mini.task import DigitSum, JudgeWithEmbeddings
from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    MathTaskConfig,
    RewardFuncsTaskConfig,
    RewardModelQualityConfig,
    TrlRunConfig,
)
from darling_nemo.tasks.base import AnswerFn, QualityFn
from darling_nemo.tasks.digit_sum import (  # noqa: F401 (re-exported: the miniature's recipe)
    digit_sum_targets,
    digit_sum_task,
)
from darling_nemo.tasks.judge import JudgeChoice, run_judge
from darling_nemo.trl.reward import completion_text


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


def math_verify_quality(
    prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str], **_: Any
) -> list[float]:
    """1.0 if math-verify finds the reference answer in the completion (boxed or last), else 0.0."""
    from math_verify import parse, verify

    scores = []
    for completion, reference in zip(completions, answer, strict=True):
        gold = parse(f"${reference}$")
        try:
            scores.append(float(verify(gold, parse(completion_text(completion)))))
        except Exception:  # math-verify raises on malformed LaTeX or a timeout: not correct
            scores.append(0.0)
    return scores


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


def column(
    rows: Sequence[Mapping[str, Any]],
    lines: Sequence[int],
    key: str,
    path: str,
    config_key: str,
    accepts: Callable[[Any], bool] = lambda value: isinstance(value, str),
    wanted: str = "a string",
) -> list[Any]:
    """rows[i][key] for every row; a missing key, or a value `accepts` refuses (a number or
    null for a question), is a ConfigError naming the file:line, the key and its type."""
    values = []
    for line, row in zip(lines, rows, strict=True):
        if key not in row:
            raise ConfigError(
                f"{path}:{line}: no {key!r} (set {config_key} to one of {sorted(row)})"
            )
        if not accepts(row[key]):
            raise ConfigError(
                f"{path}:{line}: {key!r} is {json_type(row[key])} ({row[key]!r:.40}), "
                f"not {wanted} ({config_key})"
            )
        values.append(row[key])
    return values


def json_type(value: Any) -> str:
    """A JSON value's type as JSON names it (what the user wrote in the file)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), "a value")


def is_answer(value: Any) -> bool:
    """A math answer: text, or a number (a dataset may store 70 for "70")."""
    return isinstance(value, str) or (
        isinstance(value, int | float) and not isinstance(value, bool)
    )


def is_chat_prompt(value: Any) -> bool:
    """A chat prompt: text, or a conversation of {"role": str, "content": str} turns."""
    if isinstance(value, str):
        return True
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(
            isinstance(turn, dict)
            and isinstance(turn.get("role"), str)
            and isinstance(turn.get("content"), str)
            for turn in value
        )
    )


def task_rows(
    task: MathTaskConfig | ChatTaskConfig | RewardFuncsTaskConfig,
) -> tuple[list[dict[str, Any]], list[int]]:
    """The first `max_prompts` rows of task.data_path and their line numbers; a missing or
    malformed file is a ConfigError naming the key and every bad line."""
    try:
        numbered = read_jsonl_numbered(task.data_path)[: task.max_prompts]
    except (FileNotFoundError, ValueError) as err:
        raise ConfigError(f"task.data_path: {err}") from None
    return [row for _, row in numbered], [line for line, _ in numbered]


@dataclass
class Task:
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


def build_task(cfg: TrlRunConfig, judge: JudgeChoice | None = None) -> Task:
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
    made = (judge or run_judge(entry, cfg.darling)).make()  # once the data is known good
    trains_with = entry.training_judge(cfg.task) if entry.training_judge else None
    if trains_with is not None:  # training's judge is wrong on purpose; evaluation's is not
        return Task(prompts.train, prompts.heldout, quality, trains_with, prompts.vocabulary, made)
    return Task(prompts.train, prompts.heldout, quality, made, prompts.vocabulary, answers=answers)


def reward_funcs_rows(
    cfg: TrlRunConfig, task: RewardFuncsTaskConfig
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of task.data_path (prompt fitted to the budget, every other column kept for
    the reward functions' keywords) and each row's label for run-time errors."""
    from darling_nemo.trl.prompt_budget import fit_prompts

    raw, lines = task_rows(task)
    if not raw:
        raise ConfigError(f"task.data_path: {task.data_path} has no rows: nothing to train on")
    texts = column(
        raw,
        lines,
        task.prompt_key,
        task.data_path,
        "task.prompt_key",
        is_chat_prompt,
        'a string or a list of {"role": ..., "content": ...} turns',
    )
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


def check_reward_funcs_task(task: RewardFuncsTaskConfig) -> None:
    """The config phase (--dry-run): the data file reads and every reward function imports,
    takes TRL's keywords and scores the first prompt (ConfigError naming the key)."""
    from darling_nemo.user_rewards import check_reward_funcs

    raw, lines = task_rows(task)
    if not raw:
        raise ConfigError(f"task.data_path: {task.data_path} has no rows: nothing to train on")
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
    from darling_nemo.user_rewards import UserQuality

    return UserQuality(
        task.reward_funcs,
        task.reward_weights,
        task.python_path,
        task.reward_workers,
        task.reward_timeout_s,
        {},
        task.answer_func,
    )


def prompt_words(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The whitespace words of the rows' prompts, sorted: a tiny policy's vocabulary. A random
    tiny policy then writes words, not characters (a character tokenizer rarely samples a
    space, so its responses were one or two "words", settled by the short-answer rule before
    any judge was asked): the smoke runs exercise the configured judge."""
    return sorted({word for row in rows for word in str(row["prompt"]).split()})


def judge_for_method(cfg: TrlRunConfig, judge: PairJudge | None) -> PairJudge | None:
    """The task's judge, given the task's own embeddings (the dice task's `DigitSum.embed`)
    where the method needs embeddings (DQO); other tasks' come from an embedding judge."""
    wants = EMBEDDINGS in methods.method(cfg.darling.method).inputs
    entry = tasks.task_of(cfg.task)
    if wants and judge is not None and entry.embeddings is not None:
        return JudgeWithEmbeddings(judge, entry.embeddings(cfg.task))
    return judge
