"""math: verifiable math, on both engines; quality 1 when math-verify accepts the answer.

TRL: questions and reference answers from a JSONL file (`task.data_path`), written into the
prompt template. NeMo-RL: NeMo-RL's MathEnvironment (math-verify, reward 1/0) over rows that
darling-prep-math writes. Final answers are compared by math-verify (judges/answers.py) for
the methods that need answer classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from darling_nemo.judges.answers import MathAnswerJudge
from darling_nemo.schema import ConfigError, MathTaskConfig
from darling_nemo.tasks.base import NemoRlTask, PairJudgeFn, Prompts, QualityFn, Task
from darling_nemo.tasks.prompt_budget import fit_prompts
from darling_nemo.tasks.rows import column, completion_text, is_answer, prompt_words, task_rows


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


def prompts(cfg: Any) -> Prompts:
    """The file's questions in the template, the last `heldout_prompts` held out."""
    section = cfg.task
    raw, lines = task_rows(section)
    path = section.data_path
    questions = column(raw, lines, section.question_key, path, "task.question_key")
    answers = column(
        raw, lines, section.answer_key, path, "task.answer_key", is_answer, "a string or number"
    )
    texts = fit_prompts(
        cfg,
        [str(q) for q in questions],
        lambda q: section.prompt_template.format(question=q),
        lines,
    )
    rows = [{"prompt": p, "answer": str(a)} for p, a in zip(texts, answers, strict=True)]
    split = len(rows) - section.heldout_prompts
    if split < 1:
        raise ConfigError(
            f"task.data_path: {section.data_path} has {len(rows)} row(s), and "
            f"task.heldout_prompts={section.heldout_prompts} leaves none to train on: "
            "add prompts or lower task.heldout_prompts"
        )
    words = prompt_words([*rows, *({"prompt": r["answer"]} for r in rows)])
    return Prompts(rows[:split], rows[split:], words)


def quality(section: MathTaskConfig) -> QualityFn:
    return math_verify_quality


def answer_judge() -> PairJudgeFn:
    return MathAnswerJudge()


def rehearsal_row(row: Mapping[str, Any]) -> dict[str, str]:
    return {"input": row["question"], "output": row["answer"]}


TASK = Task(
    "math",
    "verifiable math",
    config=MathTaskConfig,
    prompts=prompts,
    quality=quality,
    answer_judge=answer_judge,
    answers_title="math-verify answers",
    evaluations={"math": "conf/eval/math.yaml"},
    nemo_rl=NemoRlTask(
        environment="nemo_rl.environments.math_environment.MathEnvironment",
        env_key="math",
        processor="math_hf",
        needs_reward_model=False,
        rehearsal_data="math_eval/aime25.jsonl",
        rehearsal_row=rehearsal_row,
        prep_command="darling-prep-math",
        row_task_name="math",
    ),
    untrained_scores_zero=True,
)
