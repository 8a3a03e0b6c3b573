"""The layout: what the estimate reads from a resolved NeMo-RL v0.4.0 config.

Every key is read as it is in the config and a missing one is an error naming it, except the
keys of `ABSENT_KEY_DEFAULTS`: those a config may leave out (NeMo-RL's own example configs,
and the minimal configs tests/cluster/test_plan.py plans, lack some of them), where the table holds
what NeMo-RL v0.4.0 itself does without them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from darling_nemo.schema import ConfigError, DarlingConfig, validate_darling

# What stands for a key that a config may lack or set to null: NeMo-RL v0.4.0's own default
# (the file that says so in each comment). The only defaults darling-plan has for a config.
ABSENT_KEY_DEFAULTS: dict[str, Any] = {
    # NotRequired in PolicyConfig; megatron_policy_worker.py reads .get(..., None): no chunks.
    "policy.logprob_chunk_size": None,
    # NotRequired in MegatronConfig; megatron_policy_worker.py reads .get(..., False).
    "policy.megatron_cfg.defer_fp32_logits": False,
    # null in examples/configs/grpo_math_1B.yaml: Megatron spreads the layers evenly.
    "policy.megatron_cfg.num_layers_in_first_pipeline_stage": None,
    "policy.megatron_cfg.num_layers_in_last_pipeline_stage": None,
    # false in grpo_math_1B.yaml (the base of every v0.4.0 GRPO example).
    "policy.megatron_cfg.optimizer.optimizer_cpu_offload": False,
    # NotRequired in GenerationConfig (generation/interfaces.py); true in grpo_math_1B.yaml.
    "policy.generation.colocated.enabled": True,
    # null in grpo_math_1B.yaml; grpo.setup() makes it 1 on a single policy node.
    "policy.generation.colocated.resources.num_nodes": 1,
    # 1 in grpo_math_1B.yaml: no vLLM pipeline parallelism.
    "policy.generation.vllm_cfg.pipeline_parallel_size": 1,
    # NotRequired in VllmSpecificArgs (vllm/config.py); false in grpo_math_1B.yaml.
    "policy.generation.vllm_cfg.enforce_eager": False,
    # grpo.setup(): `"reward_model" in env and ...["enabled"]`, so no section, no reward model.
    "env.reward_model.enabled": False,
    # darling-nemo's own section, which a plain NeMo-RL config lacks: validate_darling(None)
    # is the schema's defaults (darling_nemo/schema/ holds them).
    "darling": None,
}

MEGATRON = "policy.megatron_cfg"
GENERATION = "policy.generation"
REWARD_MODEL = "env.reward_model"


def required(cfg: dict[str, Any], dotted: str) -> Any:
    """The value at `dotted`; a ConfigError naming the key when it is missing."""
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"{dotted}: missing from the config (darling-plan needs it)")
        node = node[part]
    return node


def size(
    cfg: dict[str, Any],
    dotted: str,
    *,
    minimum: int = 1,
    lookup: Callable[[dict[str, Any], str], Any] = required,
) -> int:
    """The whole number at `dotted` (>= minimum); a ConfigError naming the key otherwise, so
    `tensor_model_parallel_size=three` or a batch of -4 never reaches the arithmetic."""
    value = lookup(cfg, dotted)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{dotted}: expected a whole number >= {minimum}, got {value!r}")
    return value


def fraction(cfg: dict[str, Any], dotted: str) -> float:
    """The number in (0, 1] at `dotted`; a ConfigError naming the key otherwise."""
    value = required(cfg, dotted)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigError(f"{dotted}: expected a number in (0, 1], got {value!r}")
    return float(value)


def optional(cfg: dict[str, Any], dotted: str) -> Any:
    """The value at `dotted`, or `ABSENT_KEY_DEFAULTS[dotted]` when it is missing or null."""
    absent = ABSENT_KEY_DEFAULTS[dotted]
    try:
        value = required(cfg, dotted)
    except ConfigError:
        return absent
    return absent if value is None else value


@dataclass(frozen=True)
class Layout:
    """Everything the estimate reads from the config, with the key it came from."""

    model: str
    precision: str
    num_nodes: int
    gpus_per_node: int
    tp: int
    pp: int
    cp: int
    sequence_parallel: bool
    activation_checkpointing: bool
    first_stage_layers: int | None
    last_stage_layers: int | None
    optimizer: str
    distributed_optimizer: bool
    optimizer_cpu_offload: bool
    grad_reduce_in_fp32: bool
    train_mb_tokens: int
    logprob_mb_tokens: int
    train_global_batch_size: int
    train_micro_batch_size: int
    colocated: bool
    generation_backend: str
    defer_fp32_logits: bool
    logprob_chunk_size: int | None
    vllm_tp: int
    vllm_pp: int
    vllm_gpu_memory_utilization: float
    vllm_max_model_len: int
    vllm_enforce_eager: bool
    policy_nodes: int  # what NeMo-RL's grpo.setup() gives the policy, after the reward
    policy_gpus_per_node: int  # model's and (non-colocated) the generation GPUs
    reward_model: str | None  # env.reward_model.model_name when enabled
    reward_model_tokens: int  # env.reward_model.batch_size x max_model_len
    darling: DarlingConfig  # validated darling: section (schema defaults when absent)

    @property
    def world_size(self) -> int:
        """GPUs of the Megatron policy."""
        return self.policy_nodes * self.policy_gpus_per_node

    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.pp * self.cp)


def _micro_batch_tokens(cfg: dict[str, Any]) -> tuple[int, int]:
    """Tokens of one training and one logprob micro-batch."""
    seq = size(cfg, "policy.max_total_sequence_length")
    micro = size(cfg, "policy.train_micro_batch_size")
    logprob_batch = size(cfg, "policy.logprob_batch_size")
    packing = required(cfg, "policy.sequence_packing.enabled")
    dynamic = required(cfg, "policy.dynamic_batching.enabled")
    if not (packing or dynamic):
        return micro * seq, logprob_batch * seq
    section = "policy.sequence_packing" if packing else "policy.dynamic_batching"
    return (
        size(cfg, f"{section}.train_mb_tokens"),
        size(cfg, f"{section}.logprob_mb_tokens"),
    )


def _policy_share(
    cfg: dict[str, Any], num_nodes: int, gpus_per_node: int, colocated: bool, rm_enabled: bool
) -> tuple[int, int]:
    """(nodes, GPUs per node) of the policy, as NeMo-RL v0.4.0's grpo.setup() assigns them."""
    rm_nodes = size(cfg, f"{REWARD_MODEL}.resources.num_nodes") if rm_enabled else 0
    rm_gpus = size(cfg, f"{REWARD_MODEL}.resources.gpus_per_node") if rm_enabled else 0
    # On one node the reward model takes GPUs, else nodes.
    policy_nodes = 1 if num_nodes == 1 else num_nodes - rm_nodes
    policy_gpus = gpus_per_node - rm_gpus if num_nodes == 1 else gpus_per_node
    if not colocated:  # the generation GPUs come out of the policy's share
        gen_nodes = size(
            cfg, f"{GENERATION}.colocated.resources.num_nodes", minimum=0, lookup=optional
        )
        gen_gpus = size(cfg, f"{GENERATION}.colocated.resources.gpus_per_node")
        if policy_nodes == 1:
            policy_gpus -= gen_gpus
        else:
            policy_nodes -= gen_nodes
    return policy_nodes, policy_gpus


def policy_world_size(cfg: dict[str, Any]) -> int:
    """The policy's GPUs (Megatron's world size), as NeMo-RL v0.4.0's grpo.setup() assigns them."""
    nodes, gpus = _policy_share(
        cfg,
        size(cfg, "cluster.num_nodes"),
        size(cfg, "cluster.gpus_per_node"),
        bool(optional(cfg, f"{GENERATION}.colocated.enabled")),
        bool(optional(cfg, f"{REWARD_MODEL}.enabled")),
    )
    return nodes * gpus


def read_layout(cfg: dict[str, Any]) -> Layout:
    """Pull the memory-relevant keys out of a resolved NeMo-RL MasterConfig."""
    if not required(cfg, f"{MEGATRON}.enabled"):
        raise ConfigError(
            "policy.megatron_cfg.enabled: false; darling-plan models the Megatron backend only"
        )
    train_tokens, logprob_tokens = _micro_batch_tokens(cfg)
    num_nodes = size(cfg, "cluster.num_nodes")
    gpus_per_node = size(cfg, "cluster.gpus_per_node")
    colocated = bool(optional(cfg, f"{GENERATION}.colocated.enabled"))
    rm_enabled = bool(optional(cfg, f"{REWARD_MODEL}.enabled"))
    policy_nodes, policy_gpus = _policy_share(cfg, num_nodes, gpus_per_node, colocated, rm_enabled)
    vllm = f"{GENERATION}.vllm_cfg"
    layout = Layout(
        model=str(required(cfg, "policy.model_name")),
        precision=str(required(cfg, "policy.precision")),
        num_nodes=num_nodes,
        gpus_per_node=gpus_per_node,
        tp=size(cfg, f"{MEGATRON}.tensor_model_parallel_size"),
        pp=size(cfg, f"{MEGATRON}.pipeline_model_parallel_size"),
        cp=size(cfg, f"{MEGATRON}.context_parallel_size"),
        sequence_parallel=bool(required(cfg, f"{MEGATRON}.sequence_parallel")),
        activation_checkpointing=bool(required(cfg, f"{MEGATRON}.activation_checkpointing")),
        first_stage_layers=optional(cfg, f"{MEGATRON}.num_layers_in_first_pipeline_stage"),
        last_stage_layers=optional(cfg, f"{MEGATRON}.num_layers_in_last_pipeline_stage"),
        optimizer=str(required(cfg, f"{MEGATRON}.optimizer.optimizer")),
        distributed_optimizer=bool(
            required(cfg, f"{MEGATRON}.optimizer.use_distributed_optimizer")
        ),
        optimizer_cpu_offload=bool(optional(cfg, f"{MEGATRON}.optimizer.optimizer_cpu_offload")),
        grad_reduce_in_fp32=bool(
            required(cfg, f"{MEGATRON}.distributed_data_parallel_config.grad_reduce_in_fp32")
        ),
        train_mb_tokens=train_tokens,
        logprob_mb_tokens=logprob_tokens,
        train_global_batch_size=size(cfg, "policy.train_global_batch_size"),
        train_micro_batch_size=size(cfg, "policy.train_micro_batch_size"),
        colocated=colocated,
        generation_backend=str(required(cfg, f"{GENERATION}.backend")),
        defer_fp32_logits=bool(optional(cfg, f"{MEGATRON}.defer_fp32_logits")),
        logprob_chunk_size=optional(cfg, "policy.logprob_chunk_size"),
        vllm_tp=size(cfg, f"{vllm}.tensor_parallel_size"),
        vllm_pp=size(cfg, f"{vllm}.pipeline_parallel_size", lookup=optional),
        vllm_gpu_memory_utilization=fraction(cfg, f"{vllm}.gpu_memory_utilization"),
        vllm_max_model_len=size(cfg, f"{vllm}.max_model_len"),
        vllm_enforce_eager=bool(optional(cfg, f"{vllm}.enforce_eager")),
        policy_nodes=policy_nodes,
        policy_gpus_per_node=policy_gpus,
        reward_model=str(required(cfg, f"{REWARD_MODEL}.model_name")) if rm_enabled else None,
        reward_model_tokens=(
            size(cfg, f"{REWARD_MODEL}.batch_size") * size(cfg, f"{REWARD_MODEL}.max_model_len")
            if rm_enabled
            else 0
        ),
        darling=validate_darling(optional(cfg, "darling")),
    )
    _check_layout(layout)
    return layout


def _check_layout(lay: Layout) -> None:
    problems = []
    model_parallel = lay.tp * lay.pp * lay.cp
    if lay.world_size <= 0:
        problems.append(
            f"cluster: no GPUs left for the policy ({lay.num_nodes} nodes x "
            f"{lay.gpus_per_node} GPUs minus reward model / generation resources)"
        )
    elif lay.world_size % model_parallel:
        problems.append(
            f"cluster: the policy's {lay.policy_nodes} nodes x {lay.policy_gpus_per_node} GPUs = "
            f"{lay.world_size} is not a multiple of TP {lay.tp} x PP {lay.pp} x CP {lay.cp} "
            f"= {model_parallel}"
        )
    vllm_gpus = lay.vllm_tp * lay.vllm_pp
    if lay.generation_backend == "vllm" and lay.world_size % vllm_gpus:
        problems.append(
            f"policy.generation.vllm_cfg: TP {lay.vllm_tp} x PP {lay.vllm_pp} does not divide "
            f"the {lay.world_size} GPUs"
        )
    if not 0 < lay.vllm_gpu_memory_utilization <= 1:
        problems.append("policy.generation.vllm_cfg.gpu_memory_utilization must be in (0, 1]")
    if lay.precision not in ("bfloat16", "float16", "float32"):
        problems.append(f"policy.precision: unknown precision {lay.precision!r}")
    if problems:
        raise ConfigError("invalid layout:\n  " + "\n  ".join(problems))
