"""What a TRL run trains on: prompts, their quality function and the pair judge.

Three tasks (`task.kind`): the miniature's dice (`digit_sum`, its own multiset judge),
verifiable math from a JSONL file (math-verify), and open-ended chat prompts scored by a
reward model (or a length stand-in for smoke runs). With `darling.method: outcome` the judge
compares final answers: the dice task's multiset judge already does, math gets math-verify's
(judges/answers.py); chat has no final answers (refused by the schema). Quality functions are TRL-style reward
functions, `(prompts=..., completions=..., **dataset columns) -> floats`; `DarlingReward`
turns them into DARLING advantages. Torch-free at import: the reward model loads torch
when it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from darling_nemo import methods
from darling_nemo.core import PairJudge
from darling_nemo.jsonl import read_jsonl_numbered
from darling_nemo.mini.task import DigitSum, multiset_judge, prompt_text
from darling_nemo.schema import (
    ChatTaskConfig,
    ConfigError,
    DigitSumTaskConfig,
    LengthStandInQualityConfig,
    MathTaskConfig,
    RewardFuncsTaskConfig,
    RewardModelQualityConfig,
    TrlRunConfig,
)
from darling_nemo.trl.prompt_budget import fit_prompts
from darling_nemo.trl.reward import completion_text

QualityFn = Callable[..., Sequence[float | None]]
"""A TRL-style reward function: (prompts=..., completions=..., **dataset columns) -> floats."""


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


def build_task(cfg: TrlRunConfig) -> Task:
    """The task a config names, with its quality function and pair judge."""
    task = cfg.task
    if isinstance(task, DigitSumTaskConfig):  # (the schema refuses another judge here)
        digit_sum = digit_sum_task(task)
        targets = digit_sum_targets(task)
        return Task(
            train_rows=[{"prompt": prompt_text(t)} for t in targets["train"]],
            heldout_rows=[{"prompt": prompt_text(t)} for t in targets["heldout"]],
            quality=digit_sum_quality(digit_sum),
            judge=multiset_judge,
            word_vocabulary=digit_sum.vocabulary(),
        )

    from darling_nemo.judges import make_judge

    def judge() -> PairJudge | None:  # loaded once the data is known good (it may be a model)
        return make_judge(cfg.darling.judge) if cfg.darling.calls_judge else None

    if isinstance(task, MathTaskConfig):
        raw, lines = task_rows(task)
        path = task.data_path
        questions = column(raw, lines, task.question_key, path, "task.question_key")
        answers = column(
            raw, lines, task.answer_key, path, "task.answer_key", is_answer, "a string or number"
        )
        prompts = fit_prompts(
            cfg,
            [str(q) for q in questions],
            lambda q: task.prompt_template.format(question=q),
            lines,
        )
        rows = [{"prompt": p, "answer": str(a)} for p, a in zip(prompts, answers, strict=True)]
        split = len(rows) - task.heldout_prompts
        if split < 1:
            raise ConfigError(
                f"task.data_path: {task.data_path} has {len(rows)} row(s), and "
                f"task.heldout_prompts={task.heldout_prompts} leaves none to train on: "
                "add prompts or lower task.heldout_prompts"
            )
        words = prompt_words([*rows, *({"prompt": r["answer"]} for r in rows)])
        if methods.method(cfg.darling.method).answer_classes:  # classes of final answers
            from darling_nemo.judges.answers import MathAnswerJudge

            return Task(rows[:split], rows[split:], math_verify_quality, MathAnswerJudge(), words)
        return Task(rows[:split], rows[split:], math_verify_quality, judge(), words)

    if isinstance(task, RewardFuncsTaskConfig):
        return reward_funcs_task(cfg, task, judge())
    assert isinstance(task, ChatTaskConfig)
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
    rows = [{"prompt": p} for p in fit_prompts(cfg, texts, lambda text: text, lines)]
    if isinstance(task.quality, LengthStandInQualityConfig):
        quality: QualityFn = length_stand_in_quality(task.quality.target_words)
    else:
        quality = RewardModelQuality(task.quality)
    return Task(rows, [], quality, judge(), prompt_words(rows))


def reward_funcs_rows(
    cfg: TrlRunConfig, task: RewardFuncsTaskConfig
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of task.data_path (prompt fitted to the budget, every other column kept for
    the reward functions' keywords) and each row's label for run-time errors."""
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
    check_reward_funcs(task.reward_funcs, task.python_path, first, "task")


def reward_funcs_task(
    cfg: TrlRunConfig, task: RewardFuncsTaskConfig, judge: PairJudge | None
) -> Task:
    """A user's reward functions (darling_nemo/user_rewards.py), checked on the first row."""
    from darling_nemo.user_rewards import UserQuality, check_reward_funcs, prompt_key

    rows, labels = reward_funcs_rows(cfg, task)
    check_reward_funcs(task.reward_funcs, task.python_path, rows[0], "task")
    quality = UserQuality(
        task.reward_funcs,
        task.reward_weights,
        task.python_path,
        task.reward_workers,
        task.reward_timeout_s,
        {prompt_key(row["prompt"]): label for row, label in zip(rows, labels, strict=True)},
    )
    return Task(rows, [], quality, judge, prompt_words(rows))


def prompt_words(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The whitespace words of the rows' prompts, sorted: a tiny policy's vocabulary. A random
    tiny policy then writes words, not characters (a character tokenizer rarely samples a
    space, so its responses were one or two "words", settled by the short-answer rule before
    any judge was asked): the smoke runs exercise the configured judge."""
    return sorted({word for row in rows for word in str(row["prompt"]).split()})


def digit_sum_task(task: DigitSumTaskConfig) -> DigitSum:
    return DigitSum(task.length, task.min_digit, task.max_digit)


def digit_sum_targets(task: DigitSumTaskConfig) -> dict[str, list[int]]:
    """Training and held-out target sums: every `heldout_every`-th target from min+1 is held out."""
    targets = range(task.min_target, task.max_target + 1)
    heldout = [t for t in targets if (t - task.min_target - 1) % task.heldout_every == 0]
    return {"train": [t for t in targets if t not in heldout], "heldout": heldout}
