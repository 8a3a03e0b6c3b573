"""The rival methods on the NeMo-RL path (conf/math_qwen3_4b_{passk,outcome,gdpo}.yaml, and
the darling config with darling.method=unlikeliness or pkpo).

The transform writes each method's reward into `total_reward` the way it writes DARLING's;
NeMo-RL's own group baseline then gives the core's advantage (the `nemo_rl` test runs the
hook and NeMo-RL's real functions). The checks refuse, by key, NeMo-RL settings a method
cannot work with.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import REPO, nemo_config, scale_rewards_and_baseline

from darling_nemo.config import load_config
from darling_nemo.judges.answers import MathAnswerJudge
from darling_nemo.nemo_rl.adapter import DarlingRewardTransform, reward_judge
from darling_nemo.nemo_rl.checks import stream_fallbacks, validate_nemo_rl_config
from darling_nemo.schema import ConfigError, validate_darling

CONF = REPO / "conf"
LEXICAL = "darling.judge={kind: lexical}"
PROMPT_A, PROMPT_B = "What is 2+2?", "What is 3*4?"
LONG = "I think it is \\boxed{4} for sure today"  # 8 words: distinct under the lexical rules
RESPONSES = ["\\boxed{4}", "\\boxed{4}", LONG, "\\boxed{5}", *["\\boxed{12}"] * 4]
QUALITY = [1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]

# Hand values, prompt A then prompt B (q = [1, 1, 1, 0] and [1, 1, 1, 1]):
EXPECTED = {
    # k = 1 is GRPO with the population std: A mean 3/4, std sqrt(3/16) = 0.4330:
    # correct (1/4)/0.4330 = 1/sqrt(3), incorrect (-3/4)/0.4330 = -sqrt(3); B degenerate: 0.
    "math_qwen3_4b_passk": [1 / 3**0.5] * 3 + [-(3**0.5)] + [0.0] * 4,
    # math-verify: answers A 4, 4, 4 (LONG boxes 4 too), 5 -> 2 repeats each for the first
    # three: -0.5 * 2/4 = -0.25 -> rewards .75, .75, .75, 0, mean .5625 -> .1875 x3, -.5625.
    # B: one answer of 4: -0.5 * 3/4 each, constant -> advantage 0.
    "math_qwen3_4b_outcome": [0.1875] * 3 + [-0.5625] + [0.0] * 4,
    # unlikeliness (mean generation log-probs -1, -3, -2, -0.5 | -1, -2, -3, -4; rank 0 =
    # least likely; r = q (1 - rank/16)): A ranks 2, 0, 1, 3 -> .875, 1, .9375, 0 (wrong),
    # mean .703125; B is all correct: dropped, as the authors' advantage_threshold drops it
    # (unlikeliness_drop_uniform, default true) -> advantage 0 x4.
    "unlikeliness": [0.171875, 0.296875, 0.234375, -0.703125, 0.0, 0.0, 0.0, 0.0],
    # PKPO, k = 2, loo_minus_one: a correct response C(n-c, 1)/C(4, 2), a wrong one 0.
    # A (c = 3): 1/6 x3, 0, mean 1/8 -> 1/24 x3, -1/8. B (c = 4): C(0, 1) = 0 for all -> 0.
    "pkpo": [1 / 24] * 3 + [-1 / 8] + [0.0] * 4,
}


# vLLM's per-token sampling log-probabilities, as NeMo-RL's rollout keeps them on each
# assistant message (generation_logprobs); their means are -1, -3, -2, -0.5 | -1, -2, -3, -4.
TOKEN_LOGPROBS = [[-1, -1], [-4, -2], [-2], [-0.5, -0.5], [-1], [-2, -2], [-3], [-4, -4, -4]]


def rollout(responses=RESPONSES, quality=QUALITY, logprobs=TOKEN_LOGPROBS) -> dict:
    ids = {PROMPT_A: torch.tensor([1, 2]), PROMPT_B: torch.tensor([3, 4])}
    prompts = [PROMPT_A] * 4 + [PROMPT_B] * 4
    assistant = [
        {"role": "assistant", "content": r, "token_ids": torch.tensor([0] * len(lp))}
        | ({"generation_logprobs": torch.tensor(lp, dtype=torch.float32)} if logprobs else {})
        for r, lp in zip(responses, logprobs or [[0.0]] * len(responses), strict=True)
    ]
    return {
        "message_log": [
            [{"role": "user", "content": p, "token_ids": ids[p]}, message]
            for p, message in zip(prompts, assistant, strict=True)
        ],
        "total_reward": torch.tensor(quality, dtype=torch.float32),
        "loss_multiplier": torch.ones(len(responses)),
    }


def gdpo_expected() -> list[float]:
    # A: z(q) = [.5, .5, .5, -1.5] (mean 3/4, sample std 1/2); d = [2/3, 2/3, 1, 1] (lexical
    # classes {a1, a2}, {a3}, {a4}), z(d) = [-h, -h, h, h], h = sqrt(3)/2 (mean 5/6, sample
    # std 1/sqrt(27)). B: q and d constant -> 0. Then the 8 values over their sample std.
    # (The stds get NeMo-RL's epsilon 1e-6 in the code: agreement to 1e-5 relative.)
    h = 3**0.5 / 2
    raw = np.array([0.5 - h, 0.5 - h, 0.5 + h, -1.5 + h, 0, 0, 0, 0])
    return list(raw / raw.std(ddof=1))


def method_of(config: str, overrides: list[str]) -> str:
    """The key of EXPECTED: the method an override sets, else the config's name."""
    named = [o.split("=")[1] for o in overrides if o.startswith("darling.method=")]
    return named[0] if named else config


# Each rival's shipped config (or DARLING's with the method named), with the overrides that
# give it the hand-computed rewards of EXPECTED.
RIVAL_CONFIGS = [
    ("math_qwen3_4b_passk", ["darling.k=1"]),
    ("math_qwen3_4b_outcome", []),
    ("math_qwen3_4b_gdpo", []),
    ("math_qwen3_4b_darling", ["darling.method=unlikeliness"]),
    ("math_qwen3_4b_darling", ["darling.method=pkpo", "darling.pkpo_k=2"]),
]


def transform_for(config: str, *overrides: str) -> tuple[dict, DarlingRewardTransform]:
    cfg = load_config(CONF / f"{config}.yaml", [LEXICAL, *overrides])
    darling = validate_nemo_rl_config(cfg)
    return cfg, DarlingRewardTransform(darling, reward_judge(darling, "math"))


@pytest.mark.parametrize(("config", "overrides"), RIVAL_CONFIGS)
def test_the_transform_writes_each_methods_reward_by_hand(config, overrides):
    _, transform = transform_for(config, *overrides)
    batch = rollout()
    result = transform.apply(batch)
    expected = (
        gdpo_expected() if config.endswith("gdpo") else EXPECTED[method_of(config, overrides)]
    )
    np.testing.assert_allclose(result.advantage, expected, rtol=1e-5, atol=1e-6)
    # written as the DARLING reward is: total_reward (its dtype), quality kept beside it;
    # NeMo-RL's group mean of it is 0 for passk and gdpo, so its advantage is the reward
    assert batch["total_reward"].dtype == torch.float32
    reward = batch["total_reward"].double().numpy()
    centred = reward - reward.reshape(2, 4).mean(1).repeat(4)
    np.testing.assert_allclose(centred, expected, rtol=1e-5, atol=1e-6)
    assert transform.pop_metrics()["num_groups"] == 2.0


def test_unlikeliness_without_generation_logprobs_is_refused_by_key():
    _, transform = transform_for("math_qwen3_4b_darling", "darling.method=unlikeliness")
    with pytest.raises(ValueError, match="an assistant message has no generation_logprobs"):
        transform.apply(rollout(logprobs=None))


def test_outcome_uses_math_verify_and_the_others_the_configured_judge():
    assert isinstance(
        reward_judge(validate_darling({"method": "outcome"}), "math"), MathAnswerJudge
    )
    assert reward_judge(validate_darling({"method": "pass_at_k"}), "math") is None  # lexical judge


def test_pass_at_k_refuses_scaled_rewards_at_the_step():
    _, transform = transform_for("math_qwen3_4b_passk")
    with pytest.raises(ValueError, match=r"quality\[0\] is 2.0: darling.method=pass_at_k"):
        transform.apply(rollout(quality=[2.0, 0, 0, 0, 0, 0, 0, 0]))


@pytest.mark.parametrize(
    ("darling", "grpo", "named"),
    [
        ({"method": "pass_at_k", "k": 16}, {}, "darling.k=16 is more than grpo.num_generations"),
        (
            {"method": "pass_at_k"},
            {"reward_scaling": {"enabled": True}},
            "grpo.reward_scaling.enabled=true with darling.method=pass_at_k",
        ),
        ({"fusion": "gdpo"}, {"normalize_rewards": True}, "normalize_std"),
        ({"method": "pkpo", "pkpo_k": 16}, {}, "darling.pkpo_k=16 is more than grpo.num_gen"),
        ({"method": "dqo"}, {}, "darling.method=dqo needs response embeddings: set darling.judge"),
    ],
)
def test_nemo_rl_settings_a_method_cannot_work_with_are_refused_by_key(darling, grpo, named):
    with pytest.raises(ConfigError, match=named):
        validate_nemo_rl_config(nemo_config(darling, **grpo))


def test_a_reward_model_cannot_serve_pass_at_k_or_outcome():
    for method in ("pass_at_k", "outcome"):
        cfg = nemo_config({"method": method})
        cfg["env"] = {"reward_model": {"enabled": True}}
        with pytest.raises(ConfigError, match=f"darling.method={method} needs"):
            validate_nemo_rl_config(cfg)


def test_outcome_does_not_stream_judgements_during_generation():
    cfg = nemo_config({"method": "outcome"})
    cfg["policy"] = {"generation": {"vllm_cfg": {"async_engine": True}}}
    reasons = stream_fallbacks(cfg, validate_darling({"method": "outcome"}))
    assert reasons == ["darling.method=outcome judges final answers once the rollout is done"]


@pytest.mark.nemo_rl
@pytest.mark.parametrize(("config", "overrides"), RIVAL_CONFIGS)
def test_the_hook_then_nemo_rls_own_baseline_trains_the_core_advantage(config, overrides):
    """grpo_train's lines from scale_rewards (the hook) to the advantage, with NeMo-RL's
    real functions and batch class: the trained advantage is the hand-computed one."""
    pytest.importorskip("nemo_rl")
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    from darling_nemo.nemo_rl.adapter import darling_rewards

    cfg = load_config(CONF / f"{config}.yaml", [LEXICAL, *overrides])
    batch = BatchedDataDict(rollout())
    input_ids = torch.tensor([[1, 2]] * 4 + [[3, 4]] * 4)
    with darling_rewards(cfg, task="math"):
        batch, baseline, _ = scale_rewards_and_baseline(cfg, batch, input_ids)
    assert not cfg["grpo"]["normalize_rewards"]  # grpo_train: advantage = reward - baseline
    expected = (
        gdpo_expected() if config.endswith("gdpo") else EXPECTED[method_of(config, overrides)]
    )
    trained = (batch["total_reward"] - baseline).numpy()
    np.testing.assert_allclose(trained, expected, rtol=1e-5, atol=1e-6)
