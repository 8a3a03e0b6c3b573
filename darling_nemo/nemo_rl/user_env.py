"""A registered task's TRL prompts and quality as NeMo-RL v0.4.0's data and environment.

A NeMo-RL config trains on a task from its own `task:` section, the same section a TRL
config has, where the task is one `tasks.trains_from_section` accepts: a TRL section,
`prompts` and `quality`, and no NeMo-RL objects of its own (`Task.nemo_rl`). The section's
`kind` picks the registry entry, shipped (`task.kind: reward_funcs`, a user's reward
functions over `task.data_path`) or a plugin's (`darling.plugins`); it is the rows'
`task_name` and the key of task_to_env. Nothing here names a task: a new one needs no edit
of this module, the schema or the adapter.

Rows: the task's `nemo_rl_rows` where it has them (reward_funcs: every row of data_path as
written), else the training rows of its TRL `prompts`, called with a `PromptsRun` (the
section as `.task`, grpo.seed as `.seed`) in place of a TRL run config: a task whose prompts
read more of one is refused naming task.kind. No validation rows (as on the TRL engine).

One generic environment, `UserRewardEnvironment` (NeMo-RL's EnvironmentInterface, a Ray
actor), calls the task's quality (`Task.quality(section)`) on each batch NeMo-RL's
`calculate_rewards` hands it. For reward_funcs that is darling_nemo/user_rewards.py's
UserQuality: the same worker pool, per-call timeout and error lines as the TRL engine. The
actor is another process: it imports the run's `darling.plugins` (from `plugin_path`, made
absolute in the driver's working directory) before it looks the task up.

The row's other columns travel in NeMo-RL's datum `extra_env_info` (with the prompt as the
task gives it and the row's label) and reach the quality as keyword arguments, as TRL
passes dataset columns. NeMo-RL v0.4.0 never asks an environment for its metrics during
training, so the environment keeps `darling/quality_seconds`, `darling/reward_timeouts`
(and `darling/reward_pool_start_seconds` where a pool started) until `DarlingLogger`
collects them at the step's `train` log (`metrics_of`); validation's calls count into the
next step's figures.

A task's final answers by a function (`Task.answers`: reward_funcs' `task.answer_func`, for
the methods with answer classes, outcome) run in the same actor (and pool): the driver's
reward transform asks it for the rows' final answers (`answers_of`) with the rollout's
message logs and `extra_env_info` (NeMo-RL's rollout drops the `answers` an environment
returns).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from darling_nemo import methods, tasks
from darling_nemo.registries import DEFAULT_PLUGIN_PATH, import_plugins
from darling_nemo.schema import ConfigError
from darling_nemo.schema.base import validate_section
from darling_nemo.tasks.base import Task
from darling_nemo.user_rewards import prompt_key

ENVIRONMENT = "darling_nemo.nemo_rl.user_env.UserRewardEnvironment"
POOL_START_KEY = "reward_pool_start_seconds"  # user_rewards.POOL_START_METRIC, unprefixed


@dataclass(frozen=True)
class PromptsRun:
    """What a task's `prompts` is given on NeMo-RL in place of a validated TRL run config:
    the run's validated `task:` section (`.task`) and its seed (`.seed`, grpo.seed). A TRL
    config's other sections (policy, trainer) have no counterpart in a NeMo-RL config."""

    task: Any
    seed: int


def section_entry(kind: object) -> Task:
    """The task a NeMo-RL `task:` section's `kind` names, where NeMo-RL trains it from the
    section; else one ConfigError naming task.kind."""
    names = ", ".join(tasks.section_task_names())
    try:
        entry = tasks.task(str(kind))
    except KeyError:
        raise ConfigError(
            f"task.kind: {kind!r} is not a task NeMo-RL trains from a task: section (one of "
            f"{names}; a task of your own registers through darling.plugins)"
        ) from None
    if not tasks.trains_from_section(entry):
        why = (
            "trains on NeMo-RL from the data: and env: sections, not a task: section"
            if entry.nemo_rl is not None
            else "has no TRL section, prompts and quality to train from on NeMo-RL"
        )
        raise ConfigError(f"task.kind: the {entry.name} task {why} (one of {names})")
    return entry


def task_section(cfg: Mapping[str, Any]) -> Any:
    """A NeMo-RL config's `task:` section, validated as its task's TRL section (ConfigError
    naming each bad key), or None where the config has none (a shipped task's config).
    The run's `darling.plugins` are imported by then (the `darling:` section's validation)."""
    section = cfg.get("task")
    if section is None:
        return None
    if not isinstance(section, dict):
        names = " | ".join(tasks.section_task_names())
        raise ConfigError(f"task: expected a mapping (kind: {names}, ...), got {section!r}")
    entry = section_entry(section.get("kind"))
    assert entry.config is not None  # trains_from_section
    return validate_section(entry.config, section, "task")


def dataset_rows(task: Any, seed: int = 0) -> list[dict[str, Any]]:
    """The rows of a validated `task:` section as NeMo-RL's dataset entries: the prompt, the
    other columns, the row's label for run-time errors and the task's name (`task_name`).
    `seed`: the run's (grpo.seed), for a task whose prompts draw with it."""
    entry = tasks.task_of(task)
    rows = entry.nemo_rl_rows(task) if entry.nemo_rl_rows else prompt_rows(entry, task, seed)
    return [{**row, "task_name": entry.name} for row in rows]


def prompt_rows(entry: Task, task: Any, seed: int) -> list[dict[str, Any]]:
    """The training rows of the task's TRL `prompts` as {"prompt", "columns", "row"}; a row
    is labelled as `Prompts.row_labels` labels it, else by its position."""
    assert entry.prompts is not None  # trains_from_section
    run = PromptsRun(task, seed)
    try:
        made = entry.prompts(run)
    except AttributeError as err:
        if err.obj is not run:  # the task's own bug: as it is
            raise
        raise ConfigError(
            f"task.kind: the {entry.name} task's prompts read {err.name!r} of a TRL run "
            "config; on NeMo-RL they are given the task: section (.task) and grpo.seed "
            "(.seed) only"
        ) from None
    if not made.train:
        raise ConfigError(f"task.kind: the {entry.name} task gave no training prompts")
    rows = []
    for number, row in enumerate(made.train, 1):
        prompt = row["prompt"]
        label = made.row_labels.get(prompt_key(prompt)) or f"{entry.name} prompt {number}"
        columns = {k: v for k, v in row.items() if k != "prompt"}
        rows.append({"prompt": prompt, "columns": columns, "row": label})
    return rows


def rendered_and_cut(
    tokenizer: Any, messages: list[dict[str, Any]], max_seq_length: int | None
) -> tuple[str, Any, int, float]:
    """(text, token ids, length, loss multiplier) of a prompt's messages rendered with the
    policy's chat template and a generation prompt; past `max_seq_length` tokens the ids are
    cut to a few and the loss multiplier is 0, as NeMo-RL's own processors do."""
    text = tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, add_special_tokens=False
    )
    token_ids = tokenizer(text, return_tensors="pt", add_special_tokens=False)["input_ids"][0]
    loss_multiplier = 1.0
    length = len(token_ids)
    if max_seq_length is not None and length > max_seq_length:
        token_ids = token_ids[: min(4, max_seq_length)]
        loss_multiplier = 0.0
    return text, token_ids, length, loss_multiplier


def section_rows_processor(
    datum_dict: dict[str, Any],
    task_data_spec: Any,
    tokenizer: Any,
    max_seq_length: int | None,
    idx: int,
) -> dict[str, Any]:
    """A NeMo-RL task data processor for `dataset_rows` entries: the prompt (a string, or a
    conversation of {role, content} turns) rendered with the policy's chat template and a
    generation prompt; the raw prompt, the columns and the label go to `extra_env_info`.
    Too-long prompts are cut to a few tokens with loss_multiplier 0, as NeMo-RL does."""
    prompt = datum_dict["prompt"]
    messages = list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    if task_data_spec.system_prompt and messages[0].get("role") != "system":
        messages.insert(0, {"role": "system", "content": task_data_spec.system_prompt})
    text, token_ids, length, loss_multiplier = rendered_and_cut(tokenizer, messages, max_seq_length)
    return {
        "message_log": [{"role": "user", "content": text, "token_ids": token_ids}],
        "length": length,
        "extra_env_info": {
            "prompt": prompt,
            "columns": datum_dict["columns"],
            "row": datum_dict["row"],
        },
        "loss_multiplier": loss_multiplier,
        "idx": idx,
        "task_name": datum_dict["task_name"],
    }


def environment_config(task: Any) -> dict[str, Any]:
    """The section as the environment actor gets it: a `python_path` (the folders a user's
    functions are imported from, reward_funcs') made absolute here, in the driver's working
    directory (a Ray worker's may differ)."""
    section = task.model_dump()
    if isinstance(section.get("python_path"), list):
        section["python_path"] = [str(Path(folder).resolve()) for folder in section["python_path"]]
    return section


def plugins_config(cfg: Mapping[str, Any]) -> dict[str, list[str]]:
    """The run's `darling.plugins` and `plugin_path` (made absolute here, as `python_path`)
    for the environment actor, which imports them before it looks its task up ({}: none)."""
    darling = cfg.get("darling") or {}
    if not darling.get("plugins"):
        return {}
    folders = darling.get("plugin_path", list(DEFAULT_PLUGIN_PATH))  # as the driver's
    return {
        "plugins": list(darling["plugins"]),
        "plugin_path": [str(Path(folder).resolve()) for folder in folders],
    }


class UserRewards:
    """The environment's work, without NeMo-RL: a batch of message logs and their
    `extra_env_info` -> one quality per row, by the section's task's quality function."""

    def __init__(
        self,
        section: Mapping[str, Any],
        tokenizer: str | None = None,
        plugins: Mapping[str, Any] | None = None,
    ) -> None:
        # The actor is another process: the run's plugins register their tasks here too
        # before the section's kind is looked up (a no-op where they are imported already).
        import_plugins(dict(plugins or {}))
        entry = tasks.task(str(section["kind"]))
        assert entry.config is not None and entry.quality is not None  # trains_from_section
        # NeMo-RL's calculate_rewards hands an environment each message's role and content
        # only, so completion_ids are the policy tokenizer's ids of the completion's text
        # (loaded on first use from `tokenizer`, the name or folder the policy's names).
        self.tokenizer_name = tokenizer
        self._tokenizer: Any = None

        self.name = entry.name
        self.quality = entry.quality(entry.config.model_validate(dict(section)))
        # reward_funcs: task.answer_func in the functions' pool; None where it names none
        self.answer_fn = entry.answers(self.quality) if entry.answers is not None else None
        self.pending = {"quality_seconds": 0.0, "reward_timeouts": 0.0}
        if self.answer_fn is not None:
            self.pending["answer_timeouts"] = 0.0

    def score(
        self, message_log_batch: Sequence[Sequence[Mapping[str, Any]]], metadata: Sequence[Any]
    ) -> list[float]:
        """Each row's quality; a row left without one stops the run (DARLING needs a quality
        for every response), naming the row (reward_funcs: UserQuality raises
        RewardFunctionError naming the functions and the row)."""
        prompts, completions, keywords = self.keywords(message_log_batch, metadata)
        started = time.perf_counter()
        scores = self.quality(prompts, completions, **keywords)
        # UserQuality reports its own figures (pool start-up, stopped calls); a plain quality
        # function only its wall time, measured here
        reported = getattr(self.quality, "last_metrics", None)
        if reported is None:
            reported = {"darling/quality_seconds": time.perf_counter() - started}
        for name, value in reported.items():
            key = name.removeprefix("darling/")  # POOL_START_KEY only where a pool started
            self.pending[key] = self.pending.get(key, 0.0) + value
        for score, info in zip(scores, metadata, strict=True):
            if score is None:
                raise ValueError(f"the {self.name} task's quality gave no score for {info['row']}")
        return [float(score) for score in scores]  # type: ignore[arg-type]

    def answers(
        self, message_log_batch: Sequence[Sequence[Mapping[str, Any]]], metadata: Sequence[Any]
    ) -> list[str | None]:
        """Each row's final answer by the task's function (reward_funcs: task.answer_func,
        in the same pool; None: no answer)."""
        if self.answer_fn is None:
            raise ValueError(f"the {self.name} task gives no final answers by a function")
        prompts, completions, keywords = self.keywords(message_log_batch, metadata)
        found = self.answer_fn(prompts, completions, **keywords)
        reported = getattr(self.quality, "last_metrics", {})
        self.pending["answer_timeouts"] += reported.get("darling/answer_timeouts", 0.0)
        return list(found)

    def keywords(
        self, message_log_batch: Sequence[Sequence[Mapping[str, Any]]], metadata: Sequence[Any]
    ) -> tuple[list[Any], list[Any], dict[str, Any]]:
        """(prompts, completions, keywords) as TRL calls reward functions: the completions
        as the prompts are written (text or a conversation), completion_ids, the columns;
        the rows' labels go to the pool's error lines."""
        prompts = [info["prompt"] for info in metadata]
        completions: list[Any] = []
        completion_ids: list[list[int]] = []
        for prompt, log in zip(prompts, message_log_batch, strict=True):
            answer = [m for m in log if m["role"] == "assistant"]
            text = "".join(str(m["content"]) for m in answer)
            conversational = isinstance(prompt, list)
            completions.append([{"role": "assistant", "content": text}] if conversational else text)
            completion_ids.append(self.completion_ids(answer, text))
        columns: dict[str, list[Any]] = {}
        for row, info in enumerate(metadata):
            for name, value in info["columns"].items():
                columns.setdefault(name, [None] * len(metadata))[row] = value
        row_labels = getattr(self.quality, "row_labels", None)  # UserQuality's error lines
        if row_labels is not None:
            for prompt, info in zip(prompts, metadata, strict=True):
                row_labels[prompt_key(prompt)] = info["row"]
        return prompts, completions, {"completion_ids": completion_ids, **columns}

    def completion_ids(self, answer: Sequence[Mapping[str, Any]], text: str) -> list[int]:
        """The completion's token ids: the messages' own where each has them (the driver's
        message logs), else the policy tokenizer's ids of its text (calculate_rewards')."""
        if all("token_ids" in m for m in answer):
            return [int(t) for m in answer for t in m["token_ids"]]
        if self._tokenizer is None:
            if self.tokenizer_name is None:
                raise ValueError("completion_ids: no tokenizer given to the environment")
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.tokenizer_name)
        return list(self._tokenizer(text, add_special_tokens=False)["input_ids"])

    def pop_metrics(self) -> dict[str, float]:
        """The figures since the last call (summed over the calls in between); the pool's
        start-up only where one started."""
        metrics = self.pending
        self.pending = {k: 0.0 for k in metrics if k != POOL_START_KEY}
        return metrics

    def shutdown(self) -> None:
        close = getattr(self.quality, "close", None)  # UserQuality's worker pool
        if callable(close):
            close()


def _environment_class() -> Any:
    import ray
    import torch
    from nemo_rl.environments.interfaces import EnvironmentInterface, EnvironmentReturn

    class UserRewardEnvironment(UserRewards, EnvironmentInterface):  # type: ignore[misc]
        """NeMo-RL's environment contract around `UserRewards`: single-turn, every row done."""

        def step(self, message_log_batch: Any, metadata: Any) -> Any:
            rewards = self.score(message_log_batch, metadata)
            return EnvironmentReturn(
                observations=[
                    {"role": "environment", "content": f"Environment: reward {r:.4g}"}
                    for r in rewards
                ],
                metadata=list(metadata),
                next_stop_strings=[None] * len(rewards),
                rewards=torch.tensor(rewards, dtype=torch.float32),
                terminateds=torch.ones(len(rewards)),
                answers=None,
            )

        def global_post_process_and_metrics(self, batch: Any) -> tuple[Any, dict]:
            return batch, {"reward_mean": float(batch["rewards"].float().mean())}

    UserRewardEnvironment.__qualname__ = "UserRewardEnvironment"
    UserRewardEnvironment.__module__ = __name__
    return ray.remote(UserRewardEnvironment)


def __getattr__(name: str) -> Any:
    # Built on first use (it subclasses NeMo-RL's interface): importing this module needs no
    # NeMo-RL; Ray's workers import the class by this path.
    if name == "UserRewardEnvironment":
        environment = _environment_class()
        globals()[name] = environment
        return environment
    raise AttributeError(name)


def start_environment(
    task: Any,
    env_vars: Mapping[str, str],
    tokenizer: str | None,
    plugins: Mapping[str, Any] | None = None,
) -> Any:
    """The environment actor (on the driver's Python, as NeMo-RL's own environments);
    `tokenizer`: the policy tokenizer's name or folder, for completion_ids; `plugins`: the
    run's `plugins_config`, imported by the actor before it looks its task up."""
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    actor = __getattr__("UserRewardEnvironment")
    return actor.options(
        runtime_env={"py_executable": PY_EXECUTABLES.SYSTEM, "env_vars": dict(env_vars)}
    ).remote(environment_config(task), tokenizer, dict(plugins or {}))


def section_environment(task_to_env: Mapping[str, Any], task: str) -> Any:
    """The generic environment of a run of task `task` (the registry's name), None where the
    task trains from NeMo-RL's data: and env: sections instead (its own environment)."""
    entry = tasks.task(task)
    return task_to_env.get(entry.name) if tasks.trains_from_section(entry) else None


def metrics_of(task_to_env: Mapping[str, Any], task: str) -> Callable[[], dict[str, float]] | None:
    """What `DarlingLogger` adds to each step's `darling/*` scalars: the generic
    environment's pending figures; None where the run of `task` has no generic environment."""
    environment = section_environment(task_to_env, task)
    if environment is None:
        return None

    def collect() -> dict[str, float]:
        import ray

        return ray.get(environment.pop_metrics.remote())

    return collect


def answers_of(
    task_to_env: Mapping[str, Any], method: str, task: str
) -> Callable[[Sequence[Any], Sequence[Any]], list[str | None]] | None:
    """What the reward transform reads the rows' final answers from: (message logs, their
    extra_env_info) -> the generic environment's `answers`, for a method with answer classes
    and a task that gives its answers by a function (`Task.answers`); None otherwise (a
    task's judge of answers then compares the responses, `tasks.judge.run_judge`)."""
    environment = section_environment(task_to_env, task)
    answers = tasks.task(task).answers
    if environment is None or answers is None or not methods.method(method).answer_classes:
        return None

    def collect(message_logs: Sequence[Any], metadata: Sequence[Any]) -> list[str | None]:
        import ray

        replies = [assistant_messages(log) for log in message_logs]
        return ray.get(environment.answers.remote(replies, list(metadata)))

    return collect


def assistant_messages(log: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What `keywords` reads of a row's message log: its assistant messages' role, content and
    token ids. The driver's logs also hold the prompt's messages and per-token log-probs,
    which this keeps off the Ray call that runs on the step's critical path."""
    kept = ("role", "content", "token_ids")
    return [{k: m[k] for k in kept if k in m} for m in log if m["role"] == "assistant"]


def setup_user_data(
    tokenizer: Any, cfg: dict[str, Any], env_vars: Mapping[str, str]
) -> tuple[Any, None, dict[str, Any], dict[str, Any]]:
    """(train dataset, None, task_to_env, val_task_to_env) for a `task:` section, keyed by
    its task's name: every row trains (no validation set, as on the TRL engine)."""
    from nemo_rl.data.datasets import AllTaskProcessedDataset
    from nemo_rl.data.interfaces import TaskDataSpec

    task = task_section(cfg)
    if task is None:
        names = " | ".join(tasks.section_task_names())
        raise ConfigError(f"task: missing: this run trains from its task: section (kind: {names})")
    name = tasks.task_of(task).name
    data_cfg = cfg["data"]
    spec = TaskDataSpec(task_name=name, system_prompt_file=data_cfg["system_prompt_file"])
    dataset = AllTaskProcessedDataset(
        dataset_rows(task, cfg["grpo"]["seed"]),
        tokenizer,
        spec,
        {name: (spec, section_rows_processor)},
        max_seq_length=data_cfg["max_input_seq_length"],
    )
    tokenizer_name = getattr(tokenizer, "name_or_path", None) or None
    environment = start_environment(task, env_vars, tokenizer_name, plugins_config(cfg))
    task_to_env = {name: environment}
    return dataset, None, task_to_env, task_to_env
