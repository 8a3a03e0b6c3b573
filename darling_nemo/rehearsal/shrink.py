"""What a NeMo-RL config must change to run on one CPU machine, as `a.b=c` overrides.

Pure (no NeMo-RL, no torch): `shrink_overrides(cfg, ...)` reads the resolved config and
returns the overrides the rehearsal applies on top of the user's own, so every other
setting, interpolations included (`${policy.max_total_sequence_length}`), flows through the
same loader as the real run. Only sizes, paths and services change:
- models -> tiny local models of the same family; sequence lengths; prompts per step and
  the global batch (keeping the number of optimizer updates per rollout batch);
- the GPU layout -> TP x PP x CP x DP with the config's TP, PP and CP and the smallest DP
  (2 where the model-parallel group is at most 4 GPUs, so gradients cross ranks; else 1);
  PP halved (never below 2) while TP x PP x CP exceeds 8 fake GPUs (70B's TP4 x PP4),
  nodes of at most the config's GPUs per node, the reward model on 1 GPU of its own node;
- data -> the rehearsal's few prompts; checkpoints and logs -> the rehearsal folder, saved
  every step; validation every step when the config validates at all;
- the served judge -> the rehearsal's classifier server (the one-node configs' own server,
  darling.judge.launch: the tiny classifier on CPU, which the recipe starts); a pair
  judge's budget -> JUDGE_MAX_LENGTH tokens, the first 6 words of each response, so the
  16-word responses settle before they finish (darling.prefix_judging runs); online
  loggers off.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from darling_nemo.judges.registry import StandInWorld, judge_kind

MAX_NEW_TOKENS = 16
MAX_PROMPT_TOKENS = 96
PROMPTS_PER_STEP = 2
JUDGE_MAX_LENGTH = 15  # (15 - 3) // 2 = 6 words of each response (of MAX_NEW_TOKENS words)
MAX_MODEL_PARALLEL = 8  # fake GPUs in one model-parallel group (see pipeline_size)


def lookup(cfg: dict[str, Any], path: str) -> Any:
    """The value at a key path; None where the config lacks it (the shrink then adds it)."""
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def parallel_layout(cfg: dict[str, Any]) -> dict[str, int]:
    """Model-parallel sizes of the policy (Megatron or DTensor) and of vLLM."""
    policy = cfg["policy"]
    if policy["megatron_cfg"]["enabled"]:
        mc = policy["megatron_cfg"]
        tp, pp, cp = (
            mc[k]
            for k in (
                "tensor_model_parallel_size",
                "pipeline_model_parallel_size",
                "context_parallel_size",
            )
        )
    else:
        dc = policy["dtensor_cfg"]
        tp, pp, cp = dc["tensor_parallel_size"], 1, dc["context_parallel_size"]
    vllm = policy["generation"]["vllm_cfg"]
    return {
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "vllm": vllm["tensor_parallel_size"] * vllm["pipeline_parallel_size"],
    }


def pipeline_size(cfg: dict[str, Any]) -> int:
    """The pipeline-parallel size the rehearsal runs: the config's, halved while the
    model-parallel group exceeds MAX_MODEL_PARALLEL (each fake GPU costs two Python processes
    of ~0.4 GB; 70B's TP4 x PP4 = 32 processes exhaust a 24 GiB machine). It stays > 1 when
    the config's is, so pipeline sharding is still exercised."""
    layout = parallel_layout(cfg)
    pp = layout["pp"]
    while pp > 2 and layout["tp"] * pp * layout["cp"] > MAX_MODEL_PARALLEL:
        pp //= 2
    return pp


def shrunk_cluster(cfg: dict[str, Any]) -> dict[str, int]:
    """Policy world, GPUs per node and node counts for the fake-GPU Ray cluster."""
    layout = parallel_layout(cfg)
    model_parallel = layout["tp"] * pipeline_size(cfg) * layout["cp"]
    dp = 2 if model_parallel <= 4 else 1
    world = math.lcm(model_parallel * dp, layout["vllm"])
    per_node = min(cfg["cluster"]["gpus_per_node"], world)
    if world % per_node or per_node % layout["vllm"]:
        per_node = world  # one node: the layout cannot split evenly over the config's nodes
    rm = cfg["env"]["reward_model"]
    rm_nodes = 1 if rm["enabled"] else 0
    return {
        "policy_world": world,
        "gpus_per_node": per_node,
        "policy_nodes": world // per_node,
        "rm_nodes": rm_nodes,
        "rm_gpus": 1 if rm_nodes else 0,
        "dp": world // model_parallel,
    }


def shrink_overrides(
    cfg: dict[str, Any],
    *,
    policy_dir: str,
    reward_model_dir: str | None,
    train_data: str,
    val_data: str,
    workdir: str,
    judge_url: str | None,
    classifier_dir: str | None,
) -> list[tuple[str, Any]]:
    """(key path, new value) pairs; the caller prints them against the old values."""
    grpo, policy = cfg["grpo"], cfg["policy"]
    cluster = shrunk_cluster(cfg)
    generations = grpo["num_generations_per_prompt"]
    rollout = grpo["num_prompts_per_step"] * generations
    updates = max(1, rollout // policy["train_global_batch_size"])
    small_rollout = PROMPTS_PER_STEP * generations
    gbs = max(small_rollout // updates, cluster["dp"] * policy["train_micro_batch_size"])
    gbs -= gbs % (cluster["dp"] * policy["train_micro_batch_size"])
    prompt_tokens = min(cfg["data"]["max_input_seq_length"], MAX_PROMPT_TOKENS)
    out: list[tuple[str, Any]] = [
        ("policy.model_name", policy_dir),
        ("policy.max_total_sequence_length", prompt_tokens + MAX_NEW_TOKENS),
        ("policy.generation.max_new_tokens", MAX_NEW_TOKENS),
        ("data.max_input_seq_length", prompt_tokens),
        ("data.train_data_path", train_data),
        ("grpo.num_prompts_per_step", PROMPTS_PER_STEP),
        ("policy.train_global_batch_size", gbs),
        ("grpo.max_val_samples", PROMPTS_PER_STEP),
        ("grpo.val_batch_size", PROMPTS_PER_STEP),
        ("cluster.gpus_per_node", cluster["gpus_per_node"]),
        ("cluster.num_nodes", cluster["policy_nodes"] + cluster["rm_nodes"]),
        ("checkpointing.checkpoint_dir", f"{workdir}/checkpoints"),
        ("checkpointing.save_period", 1),
        ("logger.log_dir", f"{workdir}/logs"),
        ("logger.wandb_enabled", False),
        ("logger.mlflow_enabled", False),
        ("logger.swanlab_enabled", False),
        ("env.math.num_workers", 1),
    ]
    if policy["megatron_cfg"]["enabled"] and pipeline_size(cfg) != parallel_layout(cfg)["pp"]:
        out.append(("policy.megatron_cfg.pipeline_model_parallel_size", pipeline_size(cfg)))
    if cfg["data"]["val_data_path"] is not None:
        out.append(("data.val_data_path", val_data))
    if grpo["val_period"] > 0:
        out.append(("grpo.val_period", 1))
    if reward_model_dir is not None:
        out += [
            ("env.reward_model.model_name", reward_model_dir),
            ("env.reward_model.max_model_len", prompt_tokens + MAX_NEW_TOKENS + 64),
            ("env.reward_model.resources.gpus_per_node", cluster["rm_gpus"]),
            ("env.reward_model.resources.num_nodes", cluster["rm_nodes"]),
        ]
    judge = cfg["darling"]["judge"]
    world = StandInWorld(classifier_dir, judge_url, JUDGE_MAX_LENGTH, sys.executable)
    out += judge_kind(judge["kind"]).stand_in.overrides(judge, world)
    return [(key, value) for key, value in out if _changes(cfg, key, value)]


def _changes(cfg: dict[str, Any], key: str, value: Any) -> bool:
    return lookup(cfg, key) != value  # shrink values are never None
