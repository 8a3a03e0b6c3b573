"""A user's TRL-style reward functions as NeMo-RL v0.4.0's environment (`task.kind: reward_funcs`).

A NeMo-RL config trains on a user's task with a `task:` section, the same section a TRL
config has (`schema.RewardFuncsTaskConfig`): prompts from `task.data_path` (JSONL), quality
the weighted sum of `task.reward_funcs`. One generic environment, `UserRewardEnvironment`
(NeMo-RL's EnvironmentInterface, a Ray actor), calls the functions on each batch NeMo-RL's
`calculate_rewards` hands it, through darling_nemo/user_rewards.py: the same worker pool,
per-call timeout and error lines as the TRL engine.

The row's other columns travel in NeMo-RL's datum `extra_env_info` (with the prompt as the
file writes it and the row's `file:line` label) and reach the functions as keyword
arguments, as TRL passes dataset columns. NeMo-RL v0.4.0 never asks an environment for its
metrics during training, so the environment keeps `darling/quality_seconds`,
`darling/reward_timeouts` (and `darling/reward_pool_start_seconds` where a pool started)
until `DarlingLogger` collects them at the step's `train` log (`metrics_of`); validation's
calls count into the next step's figures.

`task.answer_func` (for the methods with answer classes, outcome) runs in the same actor and
pool: the driver's reward transform asks it for the rows' final answers (`answers_of`) with
the rollout's message logs and `extra_env_info` (NeMo-RL's rollout drops the `answers` an
environment returns).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, get_args

from darling_nemo import methods
from darling_nemo.schema import ConfigError, RewardFuncsTaskConfig
from darling_nemo.schema.base import validate_section
from darling_nemo.tasks.rows import nonempty_task_rows
from darling_nemo.user_rewards import UserQuality, prompt_key

# NeMo-RL's task_name of the rows and the key of task_to_env: the section's kind, which is
# its task's name in the registry.
(TASK_NAME,) = get_args(RewardFuncsTaskConfig.model_fields["kind"].annotation)
ENVIRONMENT = "darling_nemo.nemo_rl.user_env.UserRewardEnvironment"
POOL_START_KEY = "reward_pool_start_seconds"  # user_rewards.POOL_START_METRIC, unprefixed


def task_section(cfg: Mapping[str, Any]) -> RewardFuncsTaskConfig | None:
    """A NeMo-RL config's `task:` section, validated (ConfigError naming each bad key), or
    None where the config has none (a shipped task's config)."""
    section = cfg.get("task")
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ConfigError(f"task: expected a mapping (kind: {TASK_NAME}, ...), got {section!r}")
    return validate_section(RewardFuncsTaskConfig, section, "task")


def dataset_rows(task: RewardFuncsTaskConfig) -> list[dict[str, Any]]:
    """The rows of task.data_path as NeMo-RL's dataset entries: the prompt, the other
    columns and the row's label ("data.jsonl:7 (id x)") for run-time errors."""

    raw, lines = nonempty_task_rows(task)
    rows = []
    for row, line in zip(raw, lines, strict=True):
        if task.prompt_key not in row:
            raise ConfigError(
                f"task.prompt_key: {task.data_path}:{line} has no {task.prompt_key!r}"
            )
        label = f"{task.data_path}:{line}" + (f" (id {row['id']})" if "id" in row else "")
        columns = {k: v for k, v in row.items() if k != task.prompt_key}
        prompt = row[task.prompt_key]
        rows.append({"prompt": prompt, "columns": columns, "row": label, "task_name": TASK_NAME})
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


def reward_funcs_processor(
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
        "task_name": TASK_NAME,
    }


def environment_config(task: RewardFuncsTaskConfig) -> dict[str, Any]:
    """The section as the environment actor gets it: python_path made absolute here, in the
    driver's working directory (a Ray worker's may differ)."""
    section = task.model_dump()
    section["python_path"] = [str(Path(folder).resolve()) for folder in task.python_path]
    return section


class UserRewards:
    """The environment's work, without NeMo-RL: a batch of message logs and their
    `extra_env_info` -> one quality per row, the weighted sum of the user's functions."""

    def __init__(self, section: Mapping[str, Any], tokenizer: str | None = None) -> None:
        # NeMo-RL's calculate_rewards hands an environment each message's role and content
        # only, so completion_ids are the policy tokenizer's ids of the completion's text
        # (loaded on first use from `tokenizer`, the name or folder the policy's names).
        self.tokenizer_name = tokenizer
        self._tokenizer: Any = None

        task = RewardFuncsTaskConfig.model_validate(dict(section))
        self.quality = UserQuality(
            task.reward_funcs,
            task.reward_weights,
            task.python_path,
            task.reward_workers,
            task.reward_timeout_s,
            {},
            section.get("answer_func"),
        )
        self.pending = {"quality_seconds": 0.0, "reward_timeouts": 0.0}
        if self.quality.answer_spec is not None:
            self.pending["answer_timeouts"] = 0.0

    def score(
        self, message_log_batch: Sequence[Sequence[Mapping[str, Any]]], metadata: Sequence[Any]
    ) -> list[float]:
        """Each row's quality; a row every function left None stops the run (DARLING needs
        a quality for every response), naming the functions and the row (UserQuality raises
        RewardFunctionError)."""
        prompts, completions, keywords = self.keywords(message_log_batch, metadata)
        scores = self.quality(prompts, completions, **keywords)
        for name, value in self.quality.last_metrics.items():
            key = name.removeprefix("darling/")  # POOL_START_KEY only where a pool started
            self.pending[key] = self.pending.get(key, 0.0) + value
        return [float(score) for score in scores]  # type: ignore[arg-type]

    def answers(
        self, message_log_batch: Sequence[Sequence[Mapping[str, Any]]], metadata: Sequence[Any]
    ) -> list[str | None]:
        """Each row's final answer by task.answer_func (None: no answer), in the same pool."""
        prompts, completions, keywords = self.keywords(message_log_batch, metadata)
        found = self.quality.answers(prompts, completions, **keywords)
        self.pending["answer_timeouts"] += self.quality.last_metrics["darling/answer_timeouts"]
        return found

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
        for prompt, info in zip(prompts, metadata, strict=True):
            self.quality.row_labels[prompt_key(prompt)] = info["row"]
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
        self.quality.close()


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
    task: RewardFuncsTaskConfig, env_vars: Mapping[str, str], tokenizer: str | None
) -> Any:
    """The environment actor (on the driver's Python, as NeMo-RL's own environments);
    `tokenizer`: the policy tokenizer's name or folder, for completion_ids."""
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    actor = __getattr__("UserRewardEnvironment")
    return actor.options(
        runtime_env={"py_executable": PY_EXECUTABLES.SYSTEM, "env_vars": dict(env_vars)}
    ).remote(environment_config(task), tokenizer)


def metrics_of(task_to_env: Mapping[str, Any]) -> Callable[[], dict[str, float]] | None:
    """What `DarlingLogger` adds to each step's `darling/*` scalars: the user environment's
    pending figures; None where the run has no user environment."""
    environment = task_to_env.get(TASK_NAME)
    if environment is None:
        return None

    def collect() -> dict[str, float]:
        import ray

        return ray.get(environment.pop_metrics.remote())

    return collect


def answers_of(
    task_to_env: Mapping[str, Any], method: str
) -> Callable[[Sequence[Any], Sequence[Any]], list[str | None]] | None:
    """What the reward transform reads the rows' final answers from: (message logs, their
    extra_env_info) -> the user environment's `answers`, for a method with answer classes;
    None where the run has no user environment or its method compares no answers."""
    environment = task_to_env.get(TASK_NAME)
    if environment is None or not methods.method(method).answer_classes:
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
    """(train dataset, None, task_to_env, val_task_to_env) for a `task:` section: every row
    trains (no validation set, as on the TRL engine)."""
    from nemo_rl.data.datasets import AllTaskProcessedDataset
    from nemo_rl.data.interfaces import TaskDataSpec

    task = task_section(cfg)
    if task is None:
        raise ConfigError(f"task: missing: a {TASK_NAME} run needs its task: section")
    data_cfg = cfg["data"]
    spec = TaskDataSpec(task_name=TASK_NAME, system_prompt_file=data_cfg["system_prompt_file"])
    dataset = AllTaskProcessedDataset(
        dataset_rows(task),
        tokenizer,
        spec,
        {TASK_NAME: (spec, reward_funcs_processor)},
        max_seq_length=data_cfg["max_input_seq_length"],
    )
    tokenizer_name = getattr(tokenizer, "name_or_path", None) or None
    task_to_env = {TASK_NAME: start_environment(task, env_vars, tokenizer_name)}
    return dataset, None, task_to_env, task_to_env
