"""What a task is: the shape of a task registry entry (`Task`), read by both engines.

A task is what a run trains on: where its prompts come from and how they are written, how a
response is scored (its quality), how two final answers are compared where a method needs
answer classes, the judge it brings of its own, the evaluations that measure it, and what
each engine needs of it. Its name is the same on both engines: `task.kind` of a TRL run,
the `task_name` of NeMo-RL's data rows and environments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

QualityFn = Callable[..., Sequence[float | None]]
"""A TRL-style reward function: (prompts=..., completions=..., **dataset columns) -> floats."""

PairJudgeFn = Callable[[Sequence[tuple[str, str]]], Sequence[float]]
"""The core's `PairJudge`: pairs of responses -> the probability each pair is equivalent."""

AnswerFn = Callable[..., Sequence[str | None]]
"""TRL-style like `QualityFn`: (prompts=..., completions=..., **columns) -> each completion's
final answer (None: no answer)."""


@dataclass(frozen=True)
class Prompts:
    """A TRL run's prompts: rows ({"prompt": ..., and the columns its quality reads}), the
    held-out rows its evaluation samples, a tiny policy's word vocabulary (None: the tiny
    policy's tokenizer is made of characters) and, where the quality has `row_labels` (a
    user's reward functions), each training prompt's label in its run-time errors."""

    train: list[dict[str, Any]]
    heldout: list[dict[str, Any]]
    vocabulary: list[str] | None
    row_labels: dict[str, str] = field(default_factory=dict)  # prompt text -> "data.jsonl:7"


@dataclass(frozen=True)
class NemoRlTask:
    """What the NeMo-RL engine needs of a task (darling_nemo/nemo_rl/ maps it to NeMo-RL's
    objects; nothing here imports NeMo-RL).

    environment: the NeMo-RL environment actor that scores responses (its class path, also
        the key of NeMo-RL's actor environment registry).
    env_key: the config section of that environment, `env.<env_key>`.
    processor: how a data row becomes a prompt: "math_hf" (NeMo-RL's math_hf_data_processor)
        or "chat_prompt" (the adapter's chat template renderer).
    needs_reward_model: `env.reward_model.enabled` must be this (a config for another task is
        refused naming the key).
    rehearsal_data: the shipped JSONL (relative to darling_nemo/resources/) the CPU rehearsal
        trains on, and `rehearsal_row`, one of its rows as NeMo-RL's {"input", "output"}.
    prep_command: the command that writes NeMo-RL's data files for it (named by the data
        check's hint).
    row_task_name: the `task_name` that command writes into each data row, which NeMo-RL
        routes rows by (an older spelling where the task's data had one).
    judge_overhead: darling.overlap mode ("sync", "overlap", "overlap+stream") -> the judge's
        simulated share of a step at the paper's scale (docs/judge-cost.md), which a smoke
        run's report prints beside its measured one.
    """

    environment: str
    env_key: str
    processor: str
    needs_reward_model: bool
    rehearsal_data: str
    rehearsal_row: Callable[[Mapping[str, Any]], dict[str, str]]
    prep_command: str
    row_task_name: str
    judge_overhead: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    """One task: everything about it that code outside darling_nemo/tasks/ may ask.

    name: its one name on both engines (TRL's `task.kind`, NeMo-RL's `task_name`).
    title: in messages ("verifiable math", "open-ended chat").
    config: its TRL `task:` section, a `schema.Strict` model whose `kind` is `name`
        (registering the task makes TRL configs accept it); None: not on the TRL engine.
    prompts: (validated TRL run config) -> its `Prompts`: the prompt source and template
        (bad data is a ConfigError naming the key and file:line).
    quality: (its validated `task:` section) -> the quality function, TRL-style.
    answer_judge: () -> the judge of final answers (two responses are one class when their
        final answers agree), for the methods that need answer classes
        (`methods.Method.answer_classes`, e.g. outcome); None: the task has no final answers.
        The judge made may be None where `answers` gives the answers themselves.
    answers: (the quality function `quality` made) -> the function giving each completion's
        final answer, run where the quality runs, or None where the section names none;
        the engines then partition the answers (`user_rewards.answer_keys`), not the
        responses, for the methods with answer classes (reward_funcs' task.answer_func).
    answers_title: how messages name that judge ("math-verify answers").
    own_judge: the task decides equivalence by its own rule (`darling.judge` must stay
        unset); None: the run's `darling.judge` decides.
    graded: its quality is graded, not a verifier's 0/1 with a final answer: the methods
        that need one (`methods.Method.needs`) are refused.
    evaluations: eval name -> its config (conf/eval/*.yaml) that `darling-compare` runs on a
        checkpoint of this task.
    nemo_rl: what the NeMo-RL engine needs; None: not on the NeMo-RL engine.
    aliases: older spellings of `name`, still accepted where data or configs carry them.
    training_judge: (its `task:` section) -> a judge training calls instead of `own_judge`
        (the dice task's judge of chosen accuracy, `task.judge_accuracy`; evaluation keeps
        the own judge), or None where the section asks for none.
    embeddings: (its `task:` section) -> texts -> one embedding row per text, the task's
        own embeddings for the methods that need them (DQO); None: an embedding judge's.
    config_check: (its validated `task:` section) -> None, the checks a --dry-run makes
        beyond the keys (a user's functions imported and called once), ConfigError naming
        the key; None: the keys are all.
    model_paths: (its `task:` section) -> (key, model) of each model the section names
        (chat: its reward model), checked to be a folder where written as a path before any
        model loads; None: it names none.
    nemo_rl_setup: on NeMo-RL, a task trained from the config's own `task:` section (its TRL
        section) rather than NeMo-RL's data: and env: sections: the import path of the
        function (tokenizer, cfg, env_vars) -> (dataset, val dataset, task_to_env,
        val_task_to_env) that builds its data and environment; None: `nemo_rl` says.
    untrained_scores_zero: a randomly initialised policy (TRL's policy.kind=tiny)
        practically never earns quality here, so such a run's reward and loss are 0 at every
        step (the TRL engine says so before it starts).
    miniature: (its `task:` section, the miniature's `warm_start:` section) -> what the
        miniature's recipe needs of it (`mini.warm_start.MiniatureTask`: each seed's
        warm-start data, the report's words); None: the miniature cannot run it.
    """

    name: str
    title: str
    config: type | None = None
    prompts: Callable[[Any], Prompts] | None = None
    quality: Callable[[Any], QualityFn] | None = None
    answer_judge: Callable[[], PairJudgeFn | None] | None = None
    answers: Callable[[QualityFn], AnswerFn | None] | None = None
    answers_title: str = "final answers"
    own_judge: PairJudgeFn | None = None
    graded: bool = False
    evaluations: Mapping[str, str] = field(default_factory=dict)
    nemo_rl: NemoRlTask | None = None
    aliases: tuple[str, ...] = ()
    training_judge: Callable[[Any], PairJudgeFn | None] | None = None
    embeddings: Callable[[Any], Callable[[Sequence[str]], Any]] | None = None
    config_check: Callable[[Any], None] | None = None
    model_paths: Callable[[Any], list[tuple[str, str]]] | None = None
    nemo_rl_setup: str | None = None
    untrained_scores_zero: bool = False
    miniature: Callable[[Any, Any], Any] | None = None
