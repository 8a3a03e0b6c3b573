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
    objects; nothing here imports NeMo-RL)."""

    environment: str
    """The NeMo-RL environment actor that scores responses: its class path, also the key of
    NeMo-RL's actor environment registry."""
    env_key: str
    """The config section of that environment, `env.<env_key>`."""
    processor: str
    """How a data row becomes a prompt: "math_hf" (NeMo-RL's math_hf_data_processor) or
    "chat_prompt" (the adapter's chat template renderer)."""
    needs_reward_model: bool
    """What `env.reward_model.enabled` must be (a config for another task is refused naming
    the key)."""
    rehearsal_data: str
    """The shipped JSONL (relative to darling_nemo/resources/) the CPU rehearsal trains on."""
    rehearsal_row: Callable[[Mapping[str, Any]], dict[str, str]]
    """One row of `rehearsal_data` as NeMo-RL's {"input", "output"}."""
    prep_command: str
    """The command that writes NeMo-RL's data files for the task (the data check's hint)."""
    row_task_name: str
    """The `task_name` that command writes into each row, which NeMo-RL routes rows by (an
    older spelling where the task's data had one)."""


@dataclass(frozen=True)
class Task:
    """One task: everything about it that code outside darling_nemo/tasks/ may ask."""

    name: str
    """Its one name on both engines (TRL's `task.kind`, NeMo-RL's `task_name`)."""
    title: str
    """How messages name it ("verifiable math", "open-ended chat")."""
    config: type | None = None
    """Its TRL `task:` section, a `schema.Strict` model whose `kind` is `name` (registering
    the task makes TRL configs accept it); None: not on the TRL engine."""
    prompts: Callable[[Any], Prompts] | None = None
    """(validated TRL run config) -> its `Prompts` (bad data: a ConfigError naming the key
    and file:line)."""
    quality: Callable[[Any], QualityFn] | None = None
    """(its validated `task:` section) -> the quality function, TRL-style."""
    answer_judge: Callable[[], PairJudgeFn | None] | None = None
    """() -> the judge of final answers (one class when the final answers agree) for the
    methods with answer classes (`methods.Method.answer_classes`); it may make None where
    `answers` gives the answers themselves; None: the task has no final answers."""
    answers: Callable[[QualityFn], AnswerFn | None] | None = None
    """(the quality function made) -> each completion's final answer, run where the quality
    runs (reward_funcs' task.answer_func: the engines partition the answers, not the
    responses); None where the section names none."""
    answers_title: str = "final answers"
    """How messages name the answer judge ("math-verify answers")."""
    own_judge: PairJudgeFn | None = None
    """The task's own rule of equivalence (`darling.judge` must stay unset); None: the run's
    `darling.judge` decides."""
    graded: bool = False
    """Its quality is graded, not a verifier's 0/1 with a final answer: the methods that need
    one (`methods.Method.needs`) are refused."""
    evaluations: Mapping[str, str] = field(default_factory=dict)
    """Eval name -> its config (conf/eval/*.yaml) that `darling-compare` runs on a
    checkpoint of this task."""
    nemo_rl: NemoRlTask | None = None
    """What the NeMo-RL engine needs to train it from NeMo-RL's data: and env: sections;
    None: on NeMo-RL only from a config's own `task:` section, where it has `config`,
    `prompts` and `quality` (`registry.trains_from_section`)."""
    aliases: tuple[str, ...] = ()
    """Older spellings of `name`, still accepted where data or configs carry them."""
    training_judge: Callable[[Any], PairJudgeFn | None] | None = None
    """(its `task:` section) -> a judge training calls instead of `own_judge` (the dice
    task's judge of chosen accuracy; evaluation keeps the own judge), None where it asks for
    none."""
    embeddings: Callable[[Any], Callable[[Sequence[str]], Any]] | None = None
    """(its `task:` section) -> texts -> one embedding row per text, for the methods that
    need embeddings (DQO); None: an embedding judge's."""
    config_check: Callable[[Any], None] | None = None
    """(its validated `task:` section) -> None: the checks a --dry-run makes beyond the keys
    (a user's functions imported and called once), a ConfigError naming the key."""
    model_paths: Callable[[Any], list[tuple[str, str]]] | None = None
    """(its `task:` section) -> (key, model) of each model the section names (chat: its
    reward model), checked to be a folder where written as a path before any model loads."""
    nemo_rl_rows: Callable[[Any], list[dict[str, Any]]] | None = None
    """(its validated `task:` section) -> the rows NeMo-RL trains on where a config's own
    `task:` section trains it (`registry.trains_from_section`), each {"prompt", "columns"
    (the row's other fields, the quality's keywords), "row" (its label in run-time errors)},
    where they differ from the training rows `prompts` gives TRL (reward_funcs: every row of
    data_path as written, since NeMo-RL masks over-long prompts itself, without calling the
    functions again); None: `prompts`' training rows."""
    untrained_scores_zero: bool = False
    """A randomly initialised policy (TRL's policy.kind=tiny) practically never earns quality
    here, so its reward and loss are 0 at every step (the TRL engine says so first)."""
    miniature: Callable[[Any, Any], Any] | None = None
    """(its `task:` section, the miniature's `warm_start:` section) -> what the miniature
    needs of it (`mini.warm_start.MiniatureTask`); None: the miniature cannot run it."""
