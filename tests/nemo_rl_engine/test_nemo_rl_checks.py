"""NeMo-RL settings that would change DARLING's reward or advantage are refused.

nemo_rl.checks.nemo_rl_contradictions runs on plain dicts (no nemo_rl needed); the last test checks
the reason for the leave-one-out refusal against NeMo-RL's own function when importable.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from helpers import RECIPE_ENV, REPO, nemo_config, run_python

from darling_nemo.core import Baseline, advantages
from darling_nemo.nemo_rl.checks import validate_nemo_rl_config
from darling_nemo.schema import ConfigError


def test_the_consistent_config_passes():
    assert validate_nemo_rl_config(nemo_config()).enabled is True


def test_reward_shaping_is_refused_with_darling():
    cfg = nemo_config(reward_shaping={"enabled": True})
    with pytest.raises(ConfigError) as err:
        validate_nemo_rl_config(cfg)
    message = str(err.value)
    assert "grpo.reward_shaping.enabled=true is not supported" in message
    assert "darling.enabled=true" in message


def test_reward_shaping_is_allowed_for_the_plain_grpo_baseline():
    # darling.enabled=false trains on quality only: DAPO's overlong penalty is a legitimate
    # part of such a baseline, so it is not refused.
    cfg = nemo_config({"enabled": False}, reward_shaping={"enabled": True})
    assert validate_nemo_rl_config(cfg).enabled is False


def test_std_normalisation_with_leave_one_out_is_refused():
    cfg = nemo_config(
        {"baseline": "leave_one_out", "normalize_std": True},
        use_leave_one_out_baseline=True,
        normalize_rewards=True,
    )
    with pytest.raises(ConfigError) as err:
        validate_nemo_rl_config(cfg)
    message = str(err.value)
    assert "darling.normalize_std=true with darling.baseline=leave_one_out" in message
    # Only this problem (the grpo keys agree with the darling: section): one line.
    assert "\n" not in message


@pytest.mark.parametrize(
    ("baseline", "normalize_std"),
    [("leave_one_out", False), ("mean", True), ("mean", False)],
)
def test_the_other_baseline_and_std_combinations_pass(baseline, normalize_std):
    cfg = nemo_config(
        {"baseline": baseline, "normalize_std": normalize_std},
        use_leave_one_out_baseline=baseline == "leave_one_out",
        normalize_rewards=normalize_std,
    )
    darling = validate_nemo_rl_config(cfg)
    assert (darling.baseline.value, darling.normalize_std) == (baseline, normalize_std)


def test_both_refusals_are_reported_at_once():
    cfg = nemo_config(
        {"baseline": "leave_one_out", "normalize_std": True},
        use_leave_one_out_baseline=True,
        normalize_rewards=True,
        reward_shaping={"enabled": True},
    )
    with pytest.raises(ConfigError) as err:
        validate_nemo_rl_config(cfg)
    assert "grpo.reward_shaping.enabled" in str(err.value)
    assert "darling.baseline=leave_one_out" in str(err.value)


@pytest.mark.nemo_rl
def test_leave_one_out_std_differs_between_nemo_rl_and_the_core():
    # Why the combination is refused. Group rewards [1, 0, 0, 0], leave-one-out baseline:
    # response 0: baseline = mean(0, 0, 0) = 0, advantage 1.
    # The core divides by the group's sample std: mean 0.25, squared deviations
    # 0.5625 + 3 * 0.0625 = 0.75, / 3 = 0.25, std 0.5 -> 1 / 0.5 = 2 (minus epsilon).
    # NeMo-RL's std for response 0 is over the other responses (0, 0, 0): 0, so it leaves
    # the advantage at 1.
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("nemo_rl.algorithms.utils")
    rewards = [1.0, 0.0, 0.0, 0.0]
    core = advantages(
        rewards, [0] * 4, baseline=Baseline.LEAVE_ONE_OUT, normalize_std=True, std_epsilon=1e-6
    )
    assert core[0] == pytest.approx(2.0, rel=1e-5)
    prompts = torch.zeros((4, 3), dtype=torch.long)  # one prompt, four responses
    baseline, std = utils.calculate_baseline_and_std_per_prompt(
        prompts,
        torch.tensor(rewards),
        torch.ones(4),
        leave_one_out_baseline=True,
    )
    assert float(baseline[0]) == pytest.approx(0.0)
    assert float(std[0]) == pytest.approx(0.0)
    # Response 1: others (1, 0, 0): NeMo-RL std = sqrt(1/3) ~ 0.577, not the core's 0.5.
    assert float(std[1]) == pytest.approx(np.sqrt(1 / 3), rel=1e-5)


@pytest.mark.parametrize(
    ("grpo", "key"),
    [
        ({"use_dynamic_sampling": True}, "grpo.use_dynamic_sampling=true is not supported"),
        ({"overlong_filtering": True}, "grpo.overlong_filtering=true is not supported"),
    ],
)
def test_features_that_see_rewards_before_or_after_darling_are_refused_by_key(grpo, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_nemo_rl_config(nemo_config(**grpo))


def test_a_save_format_without_dtensor_v2_is_refused_naming_the_key():
    # NeMo-RL v0.4.0's Policy.save_checkpoint raises at the first save for any non-null
    # format unless policy.dtensor_cfg._v2 is true (the Megatron configs' old value).
    cfg = nemo_config()
    cfg["checkpointing"] = {"model_save_format": "safetensors"}
    cfg["policy"] = {"dtensor_cfg": {"enabled": False, "_v2": False}}
    with pytest.raises(ConfigError, match=r"checkpointing\.model_save_format=safetensors"):
        validate_nemo_rl_config(cfg)
    cfg["checkpointing"]["model_save_format"] = None  # what the configs ship now
    assert validate_nemo_rl_config(cfg).enabled is True
    cfg["checkpointing"]["model_save_format"] = "safetensors"
    cfg["policy"]["dtensor_cfg"]["_v2"] = True  # NeMo-RL's own DTensor-v2 examples
    assert validate_nemo_rl_config(cfg).enabled is True


# ---------------------------------------------------------------------------------------------
# Types and ranges of NeMo-RL's own keys, checked anywhere (--dry-run without NeMo-RL)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("cluster.gpus_per_node=abc", "cluster.gpus_per_node: expected a whole number >= 1, got 'abc'"),
        ("policy.train_global_batch_size=-4", "policy.train_global_batch_size: expected a whole number >= 1, got -4"),
        ("grpo.num_prompts_per_step=lots", "grpo.num_prompts_per_step: expected a whole number >= 1, got 'lots'"),
        ("policy.megatron_cfg.tensor_model_parallel_size=0", "tensor_model_parallel_size: expected a whole number >= 1, got 0"),
        ("grpo.seed=1.5", "grpo.seed: expected a whole number, got 1.5"),
        ("grpo.normalize_rewards=maybe", "grpo.normalize_rewards: expected true or false, got 'maybe'"),
        ("policy.generation.vllm_cfg.gpu_memory_utilization=1.5", "gpu_memory_utilization: expected a number in (0, 1], got 1.5"),
    ],
)  # fmt: skip
def test_a_nemo_rl_value_of_the_wrong_type_or_range_is_named(override, message):
    from darling_nemo.config import load_config
    from darling_nemo.recipe import REFERENCE_CONFIG

    cfg = load_config(REPO / "conf/math_qwen3_4b_darling.yaml", [override])
    with pytest.raises(ConfigError, match=re.escape(message)):
        validate_nemo_rl_config(cfg, reference=load_config(REFERENCE_CONFIG))


def test_every_shipped_nemo_rl_config_has_the_reference_types():
    from darling_nemo.config import load_config
    from darling_nemo.nemo_rl.checks import mistyped_values
    from darling_nemo.recipe import REFERENCE_CONFIG

    reference = load_config(REFERENCE_CONFIG)
    for path in sorted(REPO.glob("conf/*.yaml")):
        cfg = load_config(path)
        if cfg.get("engine") == "nemo_rl":
            assert mistyped_values(cfg, reference) == [], path.name


def test_the_dry_run_refuses_a_string_for_a_number_off_container():
    proc = run_python(
        "recipes/darling_math.py", "--config", "conf/math_qwen3_4b_darling.yaml", "--dry-run",
        "cluster.gpus_per_node=abc", env=RECIPE_ENV, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "cluster.gpus_per_node: expected a whole number >= 1, got 'abc'" in proc.stderr
