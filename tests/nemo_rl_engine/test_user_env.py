"""A user's reward functions as NeMo-RL's environment (darling_nemo/nemo_rl/user_env.py).

The user's module is written into a temporary folder (not importable from the package). The
pure part (`UserRewards.score`) runs everywhere; the actor test, marked `nemo_rl`, builds
NeMo-RL's dataset from the JSONL with the real processor and scores a batch through the
environment actor on a real local Ray.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import textwrap

import pytest
from helpers import start_local_ray

from darling_nemo.nemo_rl.user_env import (
    UserRewards,
    assistant_messages,
    dataset_rows,
    environment_config,
    task_section,
)
from darling_nemo.user_rewards import RewardFunctionError

TASK_NAME = "reward_funcs"  # the section's kind: the rows' task_name and task_to_env's key

REWARDS = '''
def matches(prompts, completions, target, completion_ids, **kwargs):
    """1.0 where the completion is the row's target; None for the row marked 'skip'."""
    return [None if t == "skip" else float(c == t) for c, t in zip(completions, target)]

def length(prompts, completions, **kwargs):
    """The completion's length, None for 'skip' (the row every function leaves None)."""
    return [None if c == "skip" else float(len(c)) for c in completions]

def ids_count(prompts, completions, completion_ids, **kwargs):
    return [float(len(ids)) for ids in completion_ids]

def last_word(prompts, completions, target, **kwargs):
    """A final answer: the completion's last word, None for no words (the columns come too)."""
    assert all(isinstance(t, str) for t in target)
    return [c.split()[-1] if c.split() else None for c in completions]
'''
ROWS = [
    {"id": "a", "prompt": "say yes", "target": "yes"},
    {"id": "b", "prompt": "say no", "target": "no"},
    {"id": "c", "prompt": "say nothing", "target": "skip"},
]


@pytest.fixture
def user_task(tmp_path, monkeypatch):
    """A config's validated task: section over a JSONL and a reward module in tmp_path."""
    (tmp_path / "my_rewards.py").write_text(textwrap.dedent(REWARDS))
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    monkeypatch.chdir(tmp_path)  # python_path is relative to the working directory

    def section(funcs, weights=None, answer_func=None):
        cfg = {"task": {"kind": TASK_NAME, "data_path": str(data), "python_path": ["."]}}
        cfg["task"].update(reward_funcs=funcs, reward_weights=weights, reward_timeout_s=120)
        cfg["task"].update(answer_func=answer_func)
        return task_section(cfg)

    return section


def batch(rows, responses):
    """NeMo-RL's (message_log_batch, metadata) for single-turn rollouts of `rows`."""
    logs = [
        [
            {"role": "user", "content": row["prompt"], "token_ids": [1, 2]},
            {"role": "assistant", "content": text, "token_ids": list(range(len(text)))},
        ]
        for row, text in zip(rows, responses, strict=True)
    ]
    metadata = [{"prompt": r["prompt"], "columns": r["columns"], "row": r["row"]} for r in rows]
    return logs, metadata


def test_the_weighted_sum_with_columns_and_completion_ids(user_task):
    task = user_task(["my_rewards:matches", "my_rewards:length"], [2.0, 0.5])
    rows = dataset_rows(task)
    assert [r["row"].rsplit("/", 1)[-1] for r in rows] == [
        "prompts.jsonl:1 (id a)",
        "prompts.jsonl:2 (id b)",
        "prompts.jsonl:3 (id c)",
    ]
    rewards = UserRewards({**environment_config(task), "reward_workers": 1})
    try:
        # matches: 1, 0 (x2.0); length: 3, 3 (x0.5) -> 2 + 1.5, 0 + 1.5
        assert rewards.score(*batch(rows[:2], ["yes", "yes"])) == [3.5, 1.5]
        # "skip" left None by `matches` only: the length alone counts (TRL's nansum)
        assert rewards.score(*batch(rows[2:], ["ab"])) == [1.0]
        metrics = rewards.pop_metrics()
        assert metrics["quality_seconds"] > 0 and metrics["reward_timeouts"] == 0
        assert metrics["reward_pool_start_seconds"] > 0  # the first call started the pool
        assert rewards.pop_metrics() == {"quality_seconds": 0.0, "reward_timeouts": 0.0}
        with pytest.raises(RewardFunctionError, match=r"prompts.jsonl:3 \(id c\)"):
            rewards.score(*batch(rows[2:], ["skip"]))  # every function None: named, stopped
    finally:
        rewards.shutdown()


def test_outcome_partitions_the_answers_the_environment_gives(user_task):
    """The reward transform asks the environment for each row's final answer and partitions
    those, hand-computed: "yes" and "I say yes" are one answer, two empty completions (no
    answer) two classes; outcome's reward is quality - 0.5 * (others, same answer) / 4."""
    import torch

    from darling_nemo.nemo_rl.transform import DarlingRewardTransform
    from darling_nemo.schema import DarlingConfig

    task = user_task(["my_rewards:matches"], answer_func="my_rewards:last_word")
    rows = dataset_rows(task)
    rewards = UserRewards({**environment_config(task), "reward_workers": 1})
    responses = ["yes", "I say yes", "no", "", "", "", "no", "it is no"]
    grouped = [rows[0]] * 4 + [rows[1]] * 4
    logs, metadata = batch(grouped, responses)
    for log, row in zip(logs, grouped, strict=True):
        log[0]["token_ids"] = [ord(row["prompt"][-1])]  # the group key: the prompt's ids
    transform = DarlingRewardTransform(DarlingConfig(method="outcome"), judge=None)
    transform.answers = rewards.answers
    rollout = {
        "message_log": logs,
        "total_reward": torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]),
        "extra_env_info": metadata,
    }
    try:
        assert rewards.answers(logs[:4], metadata[:4]) == ["yes", "yes", "no", None]
        result = transform.apply(rollout)
        assert rewards.pop_metrics()["answer_timeouts"] == 0.0
    finally:
        rewards.shutdown()
    assert result.class_ids.tolist() == [0, 0, 1, 2, 0, 1, 2, 2]
    assert rollout["total_reward"].tolist() == [0.875, 0.875, 0, 0, 0, 0, 0.875, 0.875]


@pytest.mark.nemo_rl
def test_the_environment_actor_scores_a_batch_on_ray(user_task, char_tokenizer_dir):
    pytest.importorskip("nemo_rl")
    import ray
    from transformers import AutoTokenizer

    from darling_nemo.nemo_rl.adapter import setup_data

    os.environ.setdefault("NEMO_RL_PY_EXECUTABLES_SYSTEM", "1")  # actors use this interpreter
    from darling_nemo.nemo_rl.user_env import answers_of

    funcs = ["my_rewards:matches", "my_rewards:ids_count"]
    task = user_task(funcs, [1.0, 0.25], answer_func="my_rewards:last_word")
    cfg = {
        "task": task.model_dump(),
        "data": {"system_prompt_file": None, "max_input_seq_length": 512},
        "grpo": {"seed": 1},
    }
    tokenizer = AutoTokenizer.from_pretrained(char_tokenizer_dir)
    temp_dir = tempfile.mkdtemp(prefix="dn_ray_", dir="/tmp")
    start_local_ray(num_cpus=2, include_dashboard=False, _temp_dir=temp_dir)
    try:
        dataset, val_dataset, task_to_env, _ = setup_data(tokenizer, cfg, TASK_NAME)
        assert val_dataset is None and len(dataset) == 3
        datum = dataset[1]
        assert datum["task_name"] == TASK_NAME
        assert datum["message_log"][0]["content"] == "<user>say no\n<assistant>"
        info = datum["extra_env_info"]
        assert info["columns"] == {"id": "b", "target": "no"}
        # what NeMo-RL's calculate_rewards hands an environment: each message's role and
        # content, no token ids (rollouts.py's get_keys_from_message_log)
        logs = [
            [
                *({"role": m["role"], "content": m["content"]} for m in dataset[i]["message_log"]),
                {"role": "assistant", "content": text},
            ]
            for i, text in ((0, "yes"), (1, "no!"))
        ]
        metadata = [dataset[0]["extra_env_info"], info]
        env = task_to_env[TASK_NAME]
        result = ray.get(env.step.remote(logs, metadata))
        # completion_ids: the policy tokenizer's ids of each completion's text
        ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("yes", "no!")]
        assert [len(i) for i in ids] == [3, 3]  # the character tokenizer: one id a character
        # matches 1, 0; ids_count 3, 3 (x0.25)
        assert result.rewards.tolist() == [1.75, 0.75]
        assert result.terminateds.tolist() == [1.0, 1.0]
        # the driver's reward transform reads the rows' final answers from the actor
        assert answers_of(task_to_env, "darling", TASK_NAME) is None  # its method compares none
        assert answers_of(task_to_env, "outcome", TASK_NAME)(logs, metadata) == ["yes", "no!"]
        metrics = ray.get(env.pop_metrics.remote())
        assert metrics["quality_seconds"] > 0 and metrics["reward_timeouts"] == 0
        assert metrics["answer_timeouts"] == 0
        # a function that raises (here: the row lacks its `target` column) stops the step,
        # naming the function and the row, as grpo_train's ray.get then sees it
        broken = [{**metadata[0], "columns": {"id": "a"}}]
        with pytest.raises(
            ray.exceptions.RayTaskError,
            match=r"my_rewards:matches raised on \S*prompts.jsonl:1 \(id a\): TypeError",
        ):
            ray.get(env.step.remote(logs[:1], broken))
        ray.get(env.shutdown.remote())
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_only_the_assistant_messages_travel_to_the_answer_function():
    """The driver's message logs hold the prompt's messages and per-token log-probs too; the
    Ray call on the step's critical path carries each row's assistant messages' role,
    content and token ids, and nothing else."""
    log = [
        {"role": "system", "content": "be brief", "token_ids": [1, 2]},
        {"role": "user", "content": "say no", "token_ids": [3, 4, 5]},
        {"role": "assistant", "content": "no", "token_ids": [6], "generation_logprobs": [-0.5]},
        {"role": "assistant", "content": "!"},
    ]
    assert assistant_messages(log) == [
        {"role": "assistant", "content": "no", "token_ids": [6]},
        {"role": "assistant", "content": "!"},
    ]
    assert assistant_messages(log[:2]) == []
