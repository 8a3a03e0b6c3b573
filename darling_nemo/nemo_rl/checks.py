"""Whether a NeMo-RL config asks NeMo-RL for what its `darling:` section says.

Pure (plain dicts; no NeMo-RL import): NeMo-RL computes the advantage itself from the
reward the adapter writes back, so its own keys must agree with the darling: section, and
some NeMo-RL features cannot work with the DARLING hook. Every problem names its key path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from darling_nemo import methods
from darling_nemo.core import Baseline, Diversity, JudgeRounds, PartitionScope
from darling_nemo.judges.registry import judge_kind
from darling_nemo.schema import (
    ConfigError,
    DarlingConfig,
    config_problems,
    group_size_problem,
    inputs_problem,
    validate_darling,
)


def _lookup(cfg: dict[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = cfg
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def unknown_config_keys(
    cfg: dict[str, Any], reference: dict[str, Any], skip: tuple[str, ...] = ("darling",)
) -> list[str]:
    """Key paths of `cfg` that `reference` (e.g. conf/base/common.yaml) does not have.

    NeMo-RL ignores keys it does not read, so a misspelled key in a YAML silently trains
    with the base's value. A reference value that is null or {} is free-form (anything
    below it is accepted); top-level sections in `skip` are validated elsewhere.
    """
    unknown: list[str] = []

    def walk(node: dict[str, Any], ref: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            path = f"{prefix}{key}"
            if not prefix and key in skip:
                continue
            if key not in ref:
                unknown.append(path)
            elif isinstance(value, dict) and isinstance(ref[key], dict) and ref[key]:
                walk(value, ref[key], path + ".")

    walk(cfg, reference, "")
    return unknown


# Whole numbers NeMo-RL v0.4.0 divides by or sizes arrays with (its TypedDicts in
# nemo_rl/models/policy/__init__.py, algorithms/grpo.py, distributed/virtual_cluster.py type
# them int): a value below 1 fails on the cluster, in the middle of setup().
POSITIVE_NAMES = frozenset(
    {
        "num_prompts_per_step",
        "num_generations_per_prompt",
        "num_nodes",
        "gpus_per_node",
        "max_total_sequence_length",
        "max_new_tokens",
        "max_model_len",
        "max_num_steps",
        "max_num_epochs",
        "max_rollout_turns",
    }
)


def _expected_kind(name: str, reference_value: Any) -> tuple[str, Callable[[Any], bool]] | None:
    """(what the value must be, its test) for a key whose reference value has a plain type."""
    if isinstance(reference_value, bool):
        return "true or false", lambda v: isinstance(v, bool)
    if isinstance(reference_value, int):
        if name.endswith("_size") or name in POSITIVE_NAMES:
            return "a whole number >= 1", lambda v: _is_int(v) and v >= 1
        return "a whole number", _is_int
    if isinstance(reference_value, float):
        if name == "gpu_memory_utilization":
            return "a number in (0, 1]", lambda v: _is_number(v) and 0 < v <= 1
        return "a number", _is_number
    return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def mistyped_values(cfg: dict[str, Any], reference: dict[str, Any]) -> list[str]:
    """`key: expected ..., got ...` for every NeMo-RL value whose type or range the reference
    config (conf/base/common.yaml, NeMo-RL v0.4.0's types) rules out: a string for a number
    (`cluster.gpus_per_node=abc`), a size below 1 (`train_global_batch_size=-4`). NeMo-RL
    itself validates nothing at run time (MasterConfig is a plain TypedDict), so these would
    first fail on the cluster. Null values and `${...}` interpolations are left to NeMo-RL."""
    problems: list[str] = []

    def walk(node: dict[str, Any], ref: dict[str, Any], prefix: str) -> None:
        for key, value in node.items():
            if key not in ref or value is None:
                continue
            path = f"{prefix}{key}"
            if isinstance(value, dict) and isinstance(ref[key], dict):
                walk(value, ref[key], path + ".")
                continue
            if isinstance(value, str) and value.startswith("${"):
                continue
            expected = _expected_kind(key, ref[key])
            if expected is not None and not expected[1](value):
                problems.append(f"{path}: expected {expected[0]}, got {value!r}")

    walk({k: v for k, v in cfg.items() if k != "darling"}, reference, "")
    return problems


def nemo_rl_contradictions(cfg: dict[str, Any], darling: DarlingConfig) -> list[str]:
    """Every way a NeMo-RL config disagrees with its validated `darling:` section.

    NeMo-RL computes the advantage itself from the reward the adapter writes back, so its own
    keys must ask for the same baseline as the darling: section, or the logged DARLING
    advantages and the trained ones differ. Pure: takes the resolved config as plain dicts.
    Returns one message per problem, each naming the key paths; empty when consistent.
    """
    problems: list[str] = []

    def need(path: str) -> Any:
        found, value = _lookup(cfg, path)
        if not found:
            problems.append(f"{path}: missing (NeMo-RL v0.4.0 reads it every step)")
        return value

    normalize = need("grpo.normalize_rewards")
    if normalize is not None and bool(normalize) != darling.normalize_std:
        problems.append(
            f"grpo.normalize_rewards={str(normalize).lower()} contradicts "
            f"darling.normalize_std={str(darling.normalize_std).lower()}: NeMo-RL divides "
            "advantages by the group std exactly when grpo.normalize_rewards is true. "
            "DARLING drops std normalisation (set both false); the 'partition with std' "
            "ablation and std-normalised GRPO baselines set both true."
        )
    leave_one_out = need("grpo.use_leave_one_out_baseline")
    wants_loo = darling.baseline is Baseline.LEAVE_ONE_OUT
    if leave_one_out is not None and bool(leave_one_out) != wants_loo:
        problems.append(
            f"grpo.use_leave_one_out_baseline={str(leave_one_out).lower()} contradicts "
            f"darling.baseline={darling.baseline.value}: set "
            f"grpo.use_leave_one_out_baseline={str(wants_loo).lower()} (the reference uses the "
            "group mean: baseline=mean, use_leave_one_out_baseline=false)."
        )
    if darling.normalize_std and wants_loo:
        problems.append(
            "darling.normalize_std=true with darling.baseline=leave_one_out is not supported "
            "by the NeMo-RL engine: NeMo-RL's leave-one-out std is computed per sample over "
            "the other responses, while the logged DARLING advantages divide by the group's "
            "std, so logged and trained advantages would differ. Use baseline=mean with "
            "normalize_std=true, or normalize_std=false."
        )
    token_level = need("loss_fn.token_level_loss")
    if token_level is not None and not token_level:
        problems.append(
            "loss_fn.token_level_loss=false: the reference (DARLING and its GRPO baseline) "
            "averages the loss over all response tokens of the batch; set it true."
        )
    generations = need("grpo.num_generations_per_prompt")
    if generations is not None and generations < 2:
        problems.append(
            f"grpo.num_generations_per_prompt={generations}: diversity and a group baseline "
            "need at least 2 responses per prompt."
        )
    return problems + method_problems(cfg, darling) + unsupported_features(cfg, darling)


def method_problems(cfg: dict[str, Any], darling: DarlingConfig) -> list[str]:
    """Where `darling.method` cannot work with this NeMo-RL config, naming the keys."""
    spec = methods.method(darling.method)
    problems = []
    method = f"darling.method={darling.method}"
    found, reward_model = _lookup(cfg, "env.reward_model.enabled")
    if spec.task_needs and found and reward_model:
        problems.append(
            f"{method} needs {spec.task_needs}; env.reward_model.enabled=true scores with a reward "
            "model (graded, no final answer): use darling.method=darling"
        )
    missing = inputs_problem(darling, "darling")  # no task here gives embeddings of its own
    if missing:
        problems.append(missing)
    found, scaling = _lookup(cfg, "grpo.reward_scaling.enabled")
    if spec.binary_rewards and found and scaling:
        problems.append(
            f"grpo.reward_scaling.enabled=true with {method}: {spec.title} counts the "
            "math verifier's 1 (correct) and 0; set grpo.reward_scaling.enabled=false"
        )
    found, generations = _lookup(cfg, "grpo.num_generations_per_prompt")
    too_big = found and group_size_problem(
        darling, "darling", "grpo.num_generations_per_prompt", generations
    )
    if too_big:
        problems.append(too_big)
    return problems


def unsupported_features(cfg: dict[str, Any], darling: DarlingConfig) -> list[str]:
    """NeMo-RL features the DARLING hook cannot work with, each refused naming its key."""
    problems: list[str] = []
    found, shaping_enabled = _lookup(cfg, "grpo.reward_shaping.enabled")
    if found and shaping_enabled and darling.enabled:
        problems.append(
            "grpo.reward_shaping.enabled=true is not supported with darling.enabled=true: "
            "NeMo-RL applies reward shaping (the DAPO overlong penalty) after the DARLING "
            "reward, adding it to quality x diversity. Set it false (GRPO baselines with "
            "darling.enabled=false may use it)."
        )
    found, async_enabled = _lookup(cfg, "grpo.async_grpo.enabled")
    if found and async_enabled:
        problems.append(
            "grpo.async_grpo.enabled=true is not supported: async_grpo_train never calls "
            "grpo.scale_rewards, where the DARLING reward is applied. Set it false; vLLM "
            "policy.generation.vllm_cfg.async_engine=true is supported."
        )
    found, dynamic = _lookup(cfg, "grpo.use_dynamic_sampling")
    if found and dynamic:
        problems.append(
            "grpo.use_dynamic_sampling=true is not supported: NeMo-RL's dynamic sampling "
            "filters groups by the std of the reward the DARLING hook wrote and draws more "
            "generation batches per step, so the darling/* metrics would count discarded "
            "groups and a judge call would be spent on every discarded batch. Set it false."
        )
    found, overlong = _lookup(cfg, "grpo.overlong_filtering")
    if found and overlong:
        problems.append(
            "grpo.overlong_filtering=true is not supported: NeMo-RL masks truncated "
            "responses out of the loss only after they were partitioned (making their "
            "siblings look less diverse) and counted in the group mean. Set it false; "
            "truncated math responses already score quality 0."
        )
    found, save_format = _lookup(cfg, "checkpointing.model_save_format")
    found_v2, v2 = _lookup(cfg, "policy.dtensor_cfg._v2")
    if found and save_format is not None and not (found_v2 and v2):
        problems.append(
            f"checkpointing.model_save_format={save_format}: NeMo-RL v0.4.0's "
            "Policy.save_checkpoint refuses a format unless policy.dtensor_cfg._v2=true, so "
            "the run would crash at its first checkpoint. Set it null (the Megatron worker "
            "writes its own format)."
        )
    return problems


def overlap_fallbacks(cfg: dict[str, Any]) -> list[str]:
    """Why darling.overlap=true must judge synchronously for this config, naming the keys;
    empty when the overlapped judge gives the synchronous result exactly.

    The overlapped hook leaves a placeholder reward where NeMo-RL expects the DARLING
    reward; anything that reads the reward before policy.train would read the placeholder.
    Dynamic sampling does, but it is refused altogether (`nemo_rl_contradictions`).
    """
    found, shaping_enabled = _lookup(cfg, "grpo.reward_shaping.enabled")
    if found and shaping_enabled:
        return [
            "grpo.reward_shaping.enabled=true: NeMo-RL shapes the reward right after the "
            "DARLING hook, before the judge would have answered"
        ]
    return []


def stream_fallbacks(cfg: dict[str, Any], darling: DarlingConfig) -> list[str]:
    """Why darling.judge_during_generation=true cannot judge during this config's rollouts,
    naming the keys; empty when it can."""
    reasons = []
    found, async_engine = _lookup(cfg, "policy.generation.vllm_cfg.async_engine")
    if not (found and async_engine):
        reasons.append(
            "policy.generation.vllm_cfg.async_engine is not true (the synchronous engine "
            "returns every response of the step at once)"
        )
    if methods.method(darling.method).answer_classes:
        reasons.append(
            f"darling.method={darling.method} judges final answers once the rollout is done"
        )
    elif darling.diversity is not Diversity.SEMANTIC or not judge_kind(darling.judge).pair_model:
        reasons.append("no pair model to call (darling.diversity / darling.judge.kind)")
    if darling.partition_scope is not PartitionScope.ALL:
        reasons.append(
            "darling.partition_scope=correct needs the scaled quality of the whole group first"
        )
    if darling.judge_rounds is not JudgeRounds.WAVES:
        reasons.append("darling.judge_rounds=one judges every pair in one call by definition")
    return reasons


def validate_nemo_rl_config(
    cfg: dict[str, Any], reference: dict[str, Any] | None = None
) -> DarlingConfig:
    """Validate the darling: section, then its consistency with NeMo-RL's keys; all at once.

    The section is required here: a NeMo-RL recipe without one would silently train with
    the defaults. With `reference` (the recipes pass conf/base/common.yaml), keys outside
    it are reported too, so a misspelled NeMo-RL key fails instead of being ignored.
    """
    if not isinstance(cfg.get("darling"), dict):
        raise ConfigError("darling: missing (a mapping is required)")
    darling = validate_darling(cfg["darling"])
    if reference is not None:  # before the rules below do arithmetic with these values
        mistyped = mistyped_values(cfg, reference)
        if mistyped:
            raise ConfigError(config_problems(mistyped))
    problems = nemo_rl_contradictions(cfg, darling)
    if reference is not None:
        problems += [
            f"{path}: unknown key (not in the reference config; check the spelling, or add "
            "it to conf/base/common.yaml if NeMo-RL v0.4.0 reads it)"
            for path in unknown_config_keys(cfg, reference)
        ]
    if problems:
        raise ConfigError(config_problems(problems))
    return darling
