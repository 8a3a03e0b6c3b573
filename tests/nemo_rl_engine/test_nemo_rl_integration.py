"""The adapter inside NeMo-RL v0.4.0's real functions (skipped when nemo_rl is not importable).

Run on a CPU machine with NeMo-RL's source on PYTHONPATH and its CPU-installable pins:
    PYTHONPATH=/path/to/nemo-rl python -m pytest -m nemo_rl tests/nemo_rl_engine/test_nemo_rl_integration.py

What is real here: NeMo-RL's BatchedDataDict, calculate_baseline_and_std_per_prompt,
normalize_advantages_with_epsilon, config loader and Hydra overrides, MasterConfig,
ResponseDataset + AllTaskProcessedDataset + rl_collate_fn, MathEnvironment (a Ray actor
running math-verify), Logger (TensorBoard), CheckpointManager, and grpo_train's whole control
flow in both rollout modes (run_multi_turn_rollout and, for vLLM async_engine,
run_async_multi_turn_rollout). Not real: the policy, which needs GPUs (Megatron + vLLM);
`ScriptedPolicy` below returns fixed responses and records what grpo_train trains on.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("NEMO_RL_PY_EXECUTABLES_SYSTEM", "1")  # actors use this interpreter

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

import numpy as np  # noqa: E402
import torch  # noqa: E402
from helpers import REPO, scale_rewards_and_baseline, start_local_ray  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from darling_nemo.config import load_config, load_yaml_with_defaults  # noqa: E402
from darling_nemo.data_prep import main_math, main_wildchat  # noqa: E402
from darling_nemo.nemo_rl.adapter import (  # noqa: E402
    QUALITY_KEY,
    DarlingLogger,
    chat_prompt_processor,
    darling_rewards,
    setup_data,
)

if not OmegaConf.has_resolver("mul"):  # NeMo-RL's examples register it at import time
    OmegaConf.register_new_resolver("mul", lambda a, b: a * b)

CONF = REPO / "conf"
RECIPE_CONFIGS = sorted(
    p for p in CONF.glob("*.yaml") if p.name.startswith(("math_", "wildchat_", "code_tests_"))
)
LEXICAL = "darling.judge={kind: lexical}"

PROMPT_A, PROMPT_B = "What is 2+2?", "What is 3*4?"
LONG = "I think it is \\boxed{4} for sure today"  # 8 words: distinct under the lexical rules
SCRIPT = {  # the 4 responses per prompt, with their hand-computed DARLING advantage
    PROMPT_A: ["\\boxed{4}", "\\boxed{4}", LONG, "\\boxed{5}"],
    PROMPT_B: ["\\boxed{12}"] * 4,
}
# A: q = [1, 1, 1, 0]; classes {a1, a2}, {a3}, {a4}; d = [2/3, 2/3, 1, 1]; r = q * d =
# [2/3, 2/3, 1, 0], mean 7/12 -> A = [1/12, 1/12, 5/12, -7/12]. B: one class, d = 0.1
# (floor), r = 0.1 each -> A = 0.
EXPECTED_ADVANTAGE = {"\\boxed{4}": 1 / 12, LONG: 5 / 12, "\\boxed{5}": -7 / 12, "\\boxed{12}": 0.0}


def test_nemo_rl_is_v040():
    import nemo_rl

    assert nemo_rl.__version__ == "0.4.0"


# ---------------------------------------------------------------------------------------------
# The hook + NeMo-RL's own baseline and advantage
# ---------------------------------------------------------------------------------------------


def ids(text: str) -> torch.Tensor:
    return torch.tensor([ord(c) for c in text], dtype=torch.int64)


def rollout_batch():
    """The 2 x 4 batch as NeMo-RL's repeated_batch after a rollout (groups contiguous, as
    repeat_interleave makes them), plus the prompt-only input_ids grpo_train computed."""
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    rows = [(p, r) for p in (PROMPT_A, PROMPT_B) for r in SCRIPT[p]]
    quality = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    logs = [
        [
            {"role": "user", "content": p, "token_ids": ids(p)},
            {"role": "assistant", "content": r, "token_ids": ids(r)},
            {"role": "environment", "content": "Environment: ok", "token_ids": ids("ok")},
        ]
        for p, r in rows
    ]
    prompt_only, _ = batched_message_log_to_flat_message(
        [log[:1] for log in logs], pad_value_dict={"token_ids": 0}
    )
    batch = BatchedDataDict(
        {
            "message_log": logs,
            "total_reward": torch.tensor(quality),
            "idx": torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]),
            "length": torch.tensor([len(p) for p, _ in rows]),
            "loss_multiplier": torch.ones(8),
            "task_name": ["math"] * 8,
            "extra_env_info": [{}] * 8,
            "truncated": torch.zeros(8, dtype=torch.bool),
        }
    )
    return batch, prompt_only["token_ids"], [r for _, r in rows]


def nemo_rl_advantages(master_config, batch, input_ids):
    """grpo_train's lines from scale_rewards to the advantages, with NeMo-RL's functions."""
    from nemo_rl.algorithms import grpo

    batch, baseline, std = scale_rewards_and_baseline(master_config, batch, input_ids)
    advantages = (batch["total_reward"] - baseline).unsqueeze(-1)
    if master_config["grpo"]["normalize_rewards"]:
        advantages = grpo.normalize_advantages_with_epsilon(advantages=advantages, std=std)
    return batch, advantages.squeeze(-1)


def test_hook_then_nemo_rl_baseline_gives_the_hand_checked_darling_advantages():
    from nemo_rl.algorithms import grpo

    cfg = load_config(CONF / "math_qwen3_4b_darling.yaml", [LEXICAL])
    original = grpo.scale_rewards
    batch, input_ids, responses = rollout_batch()
    with darling_rewards(cfg, task="math") as transform:
        assert grpo.scale_rewards is not original
        batch, advantages = nemo_rl_advantages(cfg, batch, input_ids)
    assert grpo.scale_rewards is original  # restored

    expected = [EXPECTED_ADVANTAGE[r] for r in responses]
    np.testing.assert_allclose(advantages.numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(
        batch["total_reward"].numpy(), [2 / 3, 2 / 3, 1, 0, 0.1, 0.1, 0.1, 0.1], atol=1e-6
    )
    torch.testing.assert_close(batch[QUALITY_KEY], torch.tensor([1.0, 1, 1, 0, 1, 1, 1, 1]))
    assert transform.pop_metrics()["classes_per_group"] == 2.0


def test_grpo_baseline_config_matches_core_std_normalised_advantages():
    cfg = load_config(CONF / "math_qwen3_4b_grpo.yaml", [LEXICAL])
    batch, input_ids, _ = rollout_batch()
    with darling_rewards(cfg, task="math") as transform:
        original = {k: v for k, v in batch.items()}
        core = transform.apply(type(batch)(dict(original)))  # the core's view of the same batch
        batch, advantages = nemo_rl_advantages(cfg, batch, input_ids)
    # reward = quality; A: q = [1, 1, 1, 0], mean 3/4, sample std 0.5 -> [.5, .5, .5, -1.5]
    np.testing.assert_allclose(advantages.numpy()[:4], [0.5, 0.5, 0.5, -1.5], atol=1e-5)
    np.testing.assert_allclose(advantages.numpy(), core.advantage, atol=1e-5)


def test_reward_scaling_runs_before_darling():
    overrides = [LEXICAL, "grpo.reward_scaling.enabled=true", "grpo.reward_scaling.target_max=2.0"]
    cfg = load_config(CONF / "math_qwen3_4b_darling.yaml", overrides)
    batch, input_ids, responses = rollout_batch()
    with darling_rewards(cfg, task="math"):
        batch, advantages = nemo_rl_advantages(cfg, batch, input_ids)
    # quality [0, 1] -> [0, 2] first, then DARLING: every reward and advantage doubles
    torch.testing.assert_close(batch[QUALITY_KEY][:4], torch.tensor([2.0, 2, 2, 0]))
    np.testing.assert_allclose(
        advantages.numpy(), [2 * EXPECTED_ADVANTAGE[r] for r in responses], atol=1e-6
    )


def test_hook_refuses_async_grpo_and_double_install():
    from darling_nemo.schema import ConfigError

    cfg = load_config(CONF / "math_qwen3_4b_darling.yaml", [LEXICAL])
    cfg["grpo"]["async_grpo"]["enabled"] = True
    with (
        pytest.raises(ConfigError, match="async_grpo_train never calls"),
        darling_rewards(cfg, task="math"),
    ):
        pass
    cfg["grpo"]["async_grpo"]["enabled"] = False
    with (
        darling_rewards(cfg, task="math"),
        pytest.raises(RuntimeError, match="already installed"),
        darling_rewards(cfg, task="math"),
    ):
        pass


# ---------------------------------------------------------------------------------------------
# conf/: NeMo-RL's loader, Hydra overrides, MasterConfig, keys NeMo-RL knows
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", RECIPE_CONFIGS, ids=lambda p: p.name)
def test_nemo_rl_loader_and_overrides_agree_with_ours(path):
    from nemo_rl.utils.config import load_config as nemo_load
    from nemo_rl.utils.config import parse_hydra_overrides

    overrides = ["grpo.max_num_steps=3", "policy.megatron_cfg.optimizer.lr=2.0e-6"]
    theirs = parse_hydra_overrides(nemo_load(path), overrides)
    assert OmegaConf.to_container(theirs, resolve=True) == load_config(path, overrides)


def test_every_conf_file_validates_as_nemo_rl_master_config():
    # NeMo-RL's own check (tests/unit/test_config_validation.py): pydantic on the TypedDict.
    # On Python < 3.12 pydantic needs typing_extensions.TypedDict, patched in before nemo_rl
    # is imported, hence a fresh interpreter.
    script = textwrap.dedent(
        f"""
        import sys, typing, typing_extensions
        if sys.version_info < (3, 12):
            typing.TypedDict = typing_extensions.TypedDict
        from pydantic import TypeAdapter, ValidationError
        from nemo_rl.algorithms.grpo import MasterConfig
        from darling_nemo.config import load_config
        adapter = TypeAdapter(MasterConfig)
        for path in {[str(p) for p in RECIPE_CONFIGS]!r}:
            adapter.validate_python(load_config(path))
            print("valid", path)
        broken = load_config({str(RECIPE_CONFIGS[0])!r}, ["~grpo.normalize_rewards"])
        try:
            adapter.validate_python(broken)
        except ValidationError as err:
            print("missing", [e["loc"] for e in err.errors()])
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=os.environ
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("valid ") == len(RECIPE_CONFIGS)
    assert "missing [('grpo', 'normalize_rewards')]" in out.stdout


def typed_dict_paths(tp, prefix: str = "") -> set[str]:
    """Every key path a (nested, possibly Optional/Union/NotRequired) TypedDict declares."""
    import typing

    paths: set[str] = set()
    origin = typing.get_origin(tp)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) or str(
        origin
    ).endswith(("NotRequired", "Required")):
        for arg in typing.get_args(tp):
            paths |= typed_dict_paths(arg, prefix)
        return paths
    if typing.is_typeddict(tp):
        for key, sub in typing.get_type_hints(tp).items():
            path = f"{prefix}{key}"
            paths.add(path)
            paths |= typed_dict_paths(sub, path + ".")
    return paths


def key_paths(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, value in tree.items():
        out.add(f"{prefix}{key}")
        if isinstance(value, dict):
            out |= key_paths(value, f"{prefix}{key}.")
    return out


def test_every_nemo_rl_task_of_the_registry_names_what_setup_data_builds():
    # adapter.setup_data imports the task's environment by its path, starts it on the Python
    # NeMo-RL's actor registry names for it, with the config's env.<env_key> section
    import importlib

    from nemo_rl.distributed.ray_actor_environment_registry import get_actor_python_env
    from nemo_rl.environments.interfaces import EnvironmentInterface

    from darling_nemo import tasks

    env_keys = load_config(CONF / "base" / "common.yaml")["env"]
    on_nemo_rl = [tasks.task(name).nemo_rl for name in tasks.task_names()]
    on_nemo_rl = [entry for entry in on_nemo_rl if entry is not None]
    assert {entry.env_key for entry in on_nemo_rl} == {"math", "reward_model"}
    for entry in on_nemo_rl:
        module, _, name = entry.environment.rpartition(".")
        environment = getattr(importlib.import_module(module), name)
        assert issubclass(environment.__ray_metadata__.modified_class, EnvironmentInterface)
        assert get_actor_python_env(entry.environment)
        assert isinstance(env_keys[entry.env_key], dict)


def test_every_key_of_the_common_base_is_read_by_nemo_rl():
    # Known keys: NeMo-RL v0.4.0's MasterConfig TypedDicts, its example configs, and the
    # ResponseDataset arguments load_response_dataset passes through.
    import glob
    import inspect

    from nemo_rl.algorithms.grpo import MasterConfig
    from nemo_rl.data.datasets.response_datasets import ResponseDataset
    from nemo_rl.utils.config import load_config as nemo_load

    examples = Path(sys.modules["nemo_rl"].__file__).parent.parent / "examples" / "configs"
    known = typed_dict_paths(MasterConfig)
    for path in glob.glob(str(examples / "**" / "*.yaml"), recursive=True):
        known |= key_paths(OmegaConf.to_container(nemo_load(path), resolve=False))
    known |= {f"data.{p}" for p in inspect.signature(ResponseDataset).parameters}
    ours = key_paths(load_yaml_with_defaults(CONF / "base" / "common.yaml"))
    unknown = {
        p for p in ours if p not in known and p.split(".")[0] not in ("darling", "engine", "task")
    }
    assert unknown == set()


# ---------------------------------------------------------------------------------------------
# Data: darling-prep-* output through NeMo-RL's data pipeline
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def math_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("math_data")
    raw = root / "raw.jsonl"
    raw.write_text(
        json.dumps({"problem": PROMPT_A, "answer": "4"})
        + "\n"
        + json.dumps({"problem": PROMPT_B, "answer": "$12$"})
        + "\n"
    )
    assert main_math([str(raw), "--out", str(root / "train.jsonl")]) == 0
    return root


def test_prepared_wildchat_prompts_through_nemo_rl_datasets(tmp_path, char_tokenizer_dir):
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.data.datasets import AllTaskProcessedDataset, load_response_dataset
    from nemo_rl.data.interfaces import TaskDataSpec

    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({"prompt": f"Write poem {i}"}) + "\n" for i in range(3)))
    assert main_wildchat([str(raw), "--out", str(tmp_path / "wc.jsonl")]) == 0
    cfg = load_config(
        CONF / "wildchat_llama8b_darling.yaml", [f"data.train_data_path={tmp_path / 'wc.jsonl'}"]
    )
    data = load_response_dataset(cfg["data"], cfg["grpo"]["seed"])
    tokenizer = get_tokenizer({"name": char_tokenizer_dir})
    spec = TaskDataSpec(task_name="wildchat")
    dataset = AllTaskProcessedDataset(
        data.formatted_ds["train"],
        tokenizer,
        spec,
        {"wildchat": (spec, chat_prompt_processor)},
        max_seq_length=cfg["data"]["max_input_seq_length"],
    )
    batch = rl_collate_fn([dataset[i] for i in range(3)])
    assert batch["task_name"] == ["wildchat"] * 3
    assert [log[0]["content"] for log in batch["message_log"]] == [
        f"Write poem {i}" for i in range(3)
    ]
    assert tokenizer.decode(batch["message_log"][0][0]["token_ids"]) == (
        "<user>Write poem 0\n<assistant>"
    )


@pytest.mark.slow
def test_start_numbers_the_log_dir_attaches_to_ray_and_loads_the_tokenizer(
    tmp_path, char_tokenizer_dir, math_files, ray_cluster
):
    # adapter.start() as the recipes call it, in a fresh driver process that finds
    # the running cluster through RAY_ADDRESS, as on SLURM (ray.sub / slurm/*.sub start Ray
    # first); NeMo-RL's init_ray() attaches to it.
    overrides = [
        LEXICAL,
        f"policy.model_name={char_tokenizer_dir}",
        f"logger.log_dir={tmp_path / 'logs'}",
        f"data.train_data_path={math_files / 'train.jsonl'}",
        "data.val_data_path=null",
        f"data.prompt_file={CONF / 'base' / 'math_prompt.txt'}",
    ]
    script = textwrap.dedent(
        f"""
        import json, ray
        from darling_nemo.config import load_config
        from darling_nemo.nemo_rl.adapter import start
        cfg = load_config({str(CONF / "math_qwen3_4b_darling.yaml")!r}, {overrides!r})
        cfg, tokenizer = start(cfg)
        print("RESULT", json.dumps({{
            "log_dir": cfg["logger"]["log_dir"],
            "pad": cfg["policy"]["generation"]["_pad_token_id"],
            "ray": ray.is_initialized(),
        }}))
        ray.shutdown()
        """
    )
    env = {**os.environ, "RAY_ADDRESS": ray_cluster}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env
    )
    errors = [line for line in out.stderr.splitlines() if "Error" in line or "error" in line]
    assert out.returncode == 0, "\n".join(errors[-20:]) + out.stdout[-2000:]
    result = json.loads(out.stdout.split("RESULT ", 1)[1].splitlines()[0])
    assert result == {"log_dir": str(tmp_path / "logs" / "exp_001"), "pad": 0, "ray": True}


# ---------------------------------------------------------------------------------------------
# grpo_train end to end (real rollouts, MathEnvironment, Logger; scripted policy)
# ---------------------------------------------------------------------------------------------


class ScriptedPolicy:
    """Stands in for NeMo-RL's Megatron policy + vLLM (GPU only) in grpo_train.

    Generation returns SCRIPT's responses in turn for each prompt; training records the
    BatchedDataDict grpo_train hands to policy.train. Set `cfg` to look like vLLM with
    async_engine for run_async_multi_turn_rollout.
    """

    def __init__(self, tokenizer, async_engine: bool):
        self.tokenizer = tokenizer
        self.cfg = {"vllm_cfg": {"async_engine": async_engine}}
        self.turn = {PROMPT_A: 0, PROMPT_B: 0}
        self.trained = []

    def _response(self, prompt_text: str) -> str:
        prompt = PROMPT_A if "2+2" in prompt_text else PROMPT_B
        response = SCRIPT[prompt][self.turn[prompt] % 4]
        self.turn[prompt] += 1
        return response

    def generate(self, data, greedy=False):
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

        rows, lengths, gen_lengths = [], [], []
        for i in range(len(data["input_lengths"])):
            n = int(data["input_lengths"][i])
            prompt = data["input_ids"][i, :n]
            text = self.tokenizer.decode(prompt)
            response = self.tokenizer(self._response(text), add_special_tokens=False)
            reply = torch.tensor([*response["input_ids"], self.tokenizer.eos_token_id])
            rows.append(torch.cat([prompt, reply]))
            lengths.append(n + len(reply))
            gen_lengths.append(len(reply))
        width = max(lengths)
        output = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        for i, row in enumerate(rows):
            output[i, : len(row)] = row
        return BatchedDataDict(
            {
                "output_ids": output,
                "generation_lengths": torch.tensor(gen_lengths),
                "unpadded_sequence_lengths": torch.tensor(lengths),
                "logprobs": torch.zeros(output.shape),
            }
        )

    async def generate_async(self, data, greedy=False):
        for i in range(len(data["input_lengths"])):
            out = self.generate(data.slice(i, i + 1), greedy)
            out["gen_leader_worker_idx"] = [0]  # vLLM's async worker reports its engine
            yield i, out

    def get_logprobs(self, data):
        return {"logprobs": torch.zeros(data["input_ids"].shape)}

    def get_reference_policy_logprobs(self, data):
        return {"reference_logprobs": torch.zeros(data["input_ids"].shape)}

    def train(self, data, loss_fn):
        self.trained.append(data)
        return {
            "loss": torch.tensor(0.0),
            "grad_norm": torch.tensor(0.0),
            "all_mb_metrics": {
                "global_valid_toks": [int(data["token_mask"].sum())],
                "token_mult_prob_error": [1.0],
                "lr": [1e-6],
            },
        }

    def prepare_for_generation(self, *args, **kwargs):
        return True

    def finish_generation(self, *args, **kwargs):
        return True

    def offload_after_refit(self):
        pass

    def prepare_for_lp_inference(self):
        pass

    def prepare_for_training(self, *args, **kwargs):
        pass


@pytest.fixture(scope="module")
def ray_cluster():
    import ray

    if ray.is_initialized():
        pytest.skip("a Ray session is already running in this process")
    # Our own temp dir (short: Ray's socket paths are length-limited), our own cluster.
    temp_dir = tempfile.mkdtemp(prefix="dn_ray_", dir="/tmp")
    start_local_ray(
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=temp_dir,
        runtime_env={"env_vars": dict(os.environ)},
    )
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    shutil.rmtree(temp_dir, ignore_errors=True)


class RecordingLogger:
    """NeMo-RL's Logger, keeping every log_metrics call: (prefix, step, metrics)."""

    def __init__(self, logger):
        self._logger = logger
        self.logged = []

    def log_metrics(self, metrics, step, prefix="", step_metric=None):
        self.logged.append((prefix, step, dict(metrics)))
        self._logger.log_metrics(metrics, step, prefix, step_metric)

    def __getattr__(self, name):
        return getattr(self._logger, name)


def run_grpo_train(
    math_files, char_tokenizer_dir, tmp_path, overrides, async_engine=False, policy_class=None
):
    """NeMo-RL's grpo_train, 2 steps of 2 prompts x 4 responses (the real recipe config,
    shrunk), the DARLING hook installed; returns (policy, RecordingLogger)."""
    from nemo_rl.algorithms import grpo
    from nemo_rl.algorithms.grpo import _default_grpo_save_state, grpo_train
    from nemo_rl.algorithms.loss_functions import ClippedPGLossFn
    from nemo_rl.algorithms.utils import get_tokenizer
    from nemo_rl.data.collate_fn import rl_collate_fn
    from nemo_rl.utils.checkpoint import CheckpointManager
    from nemo_rl.utils.logger import Logger
    from torchdata.stateful_dataloader import StatefulDataLoader

    cfg = load_config(
        CONF / "math_qwen3_4b_darling.yaml",
        [
            LEXICAL,
            "grpo.num_prompts_per_step=2",
            "grpo.num_generations_per_prompt=4",
            "grpo.max_num_steps=2",
            "grpo.max_num_epochs=2",
            "grpo.val_period=0",
            "policy.max_total_sequence_length=512",
            "policy.generation.max_new_tokens=64",
            "data.max_input_seq_length=256",
            f"policy.generation.vllm_cfg.async_engine={str(async_engine).lower()}",
            "env.math.num_workers=1",
            f"data.train_data_path={math_files / 'train.jsonl'}",
            "data.val_data_path=null",
            f"data.prompt_file={CONF / 'base' / 'math_prompt.txt'}",
            "checkpointing.enabled=false",
            f"checkpointing.checkpoint_dir={tmp_path / 'ckpt'}",
            f"logger.log_dir={tmp_path / 'logs'}",
            *overrides,
        ],
    )
    tokenizer = get_tokenizer({"name": char_tokenizer_dir})
    dataset, val_dataset, task_to_env, val_task_to_env = setup_data(tokenizer, cfg, "math")
    assert val_dataset is None and len(dataset) == 2
    dataloader = StatefulDataLoader(  # as grpo.setup() builds it
        dataset, batch_size=2, shuffle=False, collate_fn=rl_collate_fn, drop_last=True
    )
    policy = (policy_class or ScriptedPolicy)(tokenizer, async_engine)
    logger = RecordingLogger(Logger(cfg["logger"]))
    try:
        with darling_rewards(cfg, policy, task="math") as transform:
            grpo_train(
                policy,
                None,  # policy_generation: the policy generates (no refit), like Megatron
                dataloader,
                None,
                tokenizer,
                ClippedPGLossFn(cfg["loss_fn"]),
                task_to_env,
                val_task_to_env,
                DarlingLogger(logger, transform),
                CheckpointManager(cfg["checkpointing"]),
                _default_grpo_save_state(),
                cfg,
            )
    finally:
        for env in task_to_env.values():
            env.shutdown.remote()
    assert grpo.scale_rewards.__name__ == "scale_rewards"  # hook removed
    assert "train" not in vars(policy)  # the overlap's wrapper too
    return policy, logger


@pytest.mark.slow
@pytest.mark.parametrize("async_engine", [False, True], ids=["sync_rollout", "async_engine"])
def test_grpo_train_trains_on_darling_advantages(
    async_engine, ray_cluster, math_files, char_tokenizer_dir, tmp_path
):
    from nemo_rl.algorithms.utils import get_tokenizer

    tokenizer = get_tokenizer({"name": char_tokenizer_dir})
    policy, _ = run_grpo_train(math_files, char_tokenizer_dir, tmp_path, [], async_engine)

    # What NeMo-RL trained on: per sample, the advantage on its response tokens.
    assert len(policy.trained) == 2
    for data in policy.trained:
        assert data["input_ids"].shape[0] == 8
        for i in range(8):
            mask = data["token_mask"][i].bool()
            response = tokenizer.decode(data["input_ids"][i][mask], skip_special_tokens=True)
            advantage = data["advantages"][i][mask]
            assert torch.allclose(
                advantage, torch.full_like(advantage, EXPECTED_ADVANTAGE[response]), atol=1e-6
            ), response

    # The DARLING metrics reached NeMo-RL's TensorBoard logger at the train steps.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "logs" / "tensorboard"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for tag in (
        "darling/quality_mean",
        "darling/diversity_mean",
        "darling/classes_per_group",
        "darling/classes_per_group_hist/1",
        "darling/collapsed_group_share",
        "darling/pairs_judged",
        "darling/judge_seconds",
        "darling/judge_errors",
        "train/reward",
    ):
        assert tag in tags, tag
    assert [e.step for e in events.Scalars("darling/classes_per_group")] == [1, 2]
    assert events.Scalars("darling/quality_mean")[0].value == pytest.approx(7 / 8)
    assert events.Scalars("darling/classes_per_group")[0].value == pytest.approx(2.0)
    # train/reward is the mean DARLING reward: (2/3 + 2/3 + 1 + 0 + 4 * 0.1) / 8
    assert events.Scalars("train/reward")[0].value == pytest.approx((7 / 3 + 0.4) / 8, abs=1e-6)


@pytest.mark.slow
def test_grpo_train_overlap_equals_synchronous(
    ray_cluster, math_files, char_tokenizer_dir, tmp_path
):
    """The real grpo_train, darling.overlap=false then true: the same training data and the
    same logged metrics, bit for bit (timings aside)."""
    runs = {
        overlap: run_grpo_train(
            math_files,
            char_tokenizer_dir,
            tmp_path / str(overlap),
            [f"darling.overlap={str(overlap).lower()}"],
        )
        for overlap in (False, True)
    }
    (sync_policy, sync_log), (overlap_policy, overlap_log) = runs[False], runs[True]
    assert len(sync_policy.trained) == len(overlap_policy.trained) == 2
    for sync_data, overlap_data in zip(sync_policy.trained, overlap_policy.trained, strict=True):
        assert sync_data.keys() == overlap_data.keys()
        for key in sync_data:
            a, b = sync_data[key], overlap_data[key]
            if isinstance(a, torch.Tensor):
                assert a.dtype == b.dtype and torch.equal(a, b), key
                if a.is_floating_point():  # bits: 0.0 and -0.0 compare equal
                    assert torch.equal(a.view(torch.int32), b.view(torch.int32)), key
    # Some advantage is non-zero, so the overlap did write DARLING's (not the placeholder's).
    assert any(data["advantages"].abs().sum() > 0 for data in overlap_policy.trained)

    def metrics(log, prefix):
        timing = {"seconds", "judge_seconds"}
        return [
            (step, {k: v for k, v in m.items() if k not in timing})
            for p, step, m in log.logged
            if p == prefix
        ]

    for prefix in ("train", "darling"):
        assert metrics(sync_log, prefix) == metrics(overlap_log, prefix), prefix
        assert len(metrics(sync_log, prefix)) == 2
    timings = [m for p, _, m in overlap_log.logged if p == "timing/train"]
    assert all("darling_judge" in m for m in timings)


@pytest.mark.slow
def test_grpo_train_judging_during_generation_equals_after(
    ray_cluster, math_files, char_tokenizer_dir, tmp_path
):
    """The real grpo_train with the async engine's per-sample rollouts and the shipped MiniLM
    judge, darling.judge_during_generation=false then true: the same training data bit for
    bit and the same DARLING metrics but for the judge's own cost counters (how many pairs
    were judged, when, in how many calls)."""
    runs = {
        stream: run_grpo_train(
            math_files,
            char_tokenizer_dir,
            tmp_path / str(stream),
            ["darling.judge={kind: embedding}", f"darling.judge_during_generation={stream}"],
            async_engine=True,
        )
        for stream in ("false", "true")
    }
    (after_policy, after_log), (during_policy, during_log) = runs["false"], runs["true"]
    assert len(after_policy.trained) == len(during_policy.trained) == 2
    for after, during in zip(after_policy.trained, during_policy.trained, strict=True):
        assert after.keys() == during.keys()
        for key in after:
            if isinstance(after[key], torch.Tensor):
                assert torch.equal(after[key], during[key]), key

    def metrics(log):
        cost = ("judge", "pairs_judged", "seconds")
        return [
            {k: v for k, v in m.items() if not k.startswith(cost)}
            for p, _, m in log.logged
            if p == "darling"
        ]

    assert metrics(after_log) == metrics(during_log) and len(metrics(after_log)) == 2
    streamed = [m for p, _, m in during_log.logged if p == "darling"]
    assert all("pairs_judged_during_generation" in m for m in streamed)
    assert all("pairs_judged_during_generation" not in m for p, _, m in after_log.logged)


class SettlingScriptedPolicy(ScriptedPolicy):
    """ScriptedPolicy whose async generation, like darling_nemo's vLLM worker, shows each
    response's text as it grows (a character at a time) to the production SettledReporter
    of the sample's tag, then waits for the driver's inbox poller before finishing."""

    async def generate_async(self, data, greedy=False):
        import asyncio

        from darling_nemo.nemo_rl.prefix_worker import (
            POLL_S,
            PREFIX_TAG,
            SettledReporter,
            send_to_inbox,
        )

        tags = data.get(PREFIX_TAG) or [None] * len(data["input_lengths"])
        async for i, out in super().generate_async(data, greedy):
            reporter = SettledReporter(tags[i], send_to_inbox) if tags[i] else None
            start = int(data["input_lengths"][i])
            length = int(out["generation_lengths"][0])
            ids = out["output_ids"][0, start : start + length]
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            for end in range(1, len(text) + 1):
                if reporter is not None:
                    reporter.see(text[:end], now=end == len(text))
            await asyncio.sleep(10 * POLL_S)  # the poller hands it to the stream meanwhile
            yield i, out


@pytest.mark.slow
def test_grpo_train_prefix_judging_equals_judging_after(
    ray_cluster, math_files, char_tokenizer_dir, tmp_path
):
    """The real grpo_train with per-sample rollouts whose texts are reported as they grow,
    and a cross-encoder judge (a tiny classifier) that reads the first 4 words of each
    response: the long response of each step joins its group before it finishes, its pairs
    are judged on its settled words, and the training data are those of judging after the
    rollout, bit for bit."""
    from darling_nemo.judges.tiny import save_tiny_classifier

    classifier = save_tiny_classifier(tmp_path / "classifier", "bert")
    # max_length 11: (11 - 3) // 2 = 4 words per response; LONG has 8
    judge = f"darling.judge={{kind: cross_encoder, model: {classifier}, max_length: 11}}"
    runs = {
        stream: run_grpo_train(
            math_files,
            char_tokenizer_dir,
            tmp_path / stream,
            [judge, f"darling.judge_during_generation={stream}"],
            async_engine=True,
            policy_class=SettlingScriptedPolicy,
        )
        for stream in ("false", "true")
    }
    (after_policy, _), (during_policy, during_log) = runs["false"], runs["true"]
    assert len(after_policy.trained) == len(during_policy.trained) == 2
    for after, during in zip(after_policy.trained, during_policy.trained, strict=True):
        for key in after:
            if isinstance(after[key], torch.Tensor):
                assert torch.equal(after[key], during[key]), key
    darling = [m for p, _, m in during_log.logged if p == "darling"]
    # each step: LONG (one of 8 responses) settled after 4 words and 3 verdicts with it
    # (its pairs with the other responses of prompt A) were kept
    assert [m["responses_settled_early"] for m in darling] == [1.0, 1.0]
    assert all(m["pairs_judged_on_settled_words"] >= 1 for m in darling), darling
