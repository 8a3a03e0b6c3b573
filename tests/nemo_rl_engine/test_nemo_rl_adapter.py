"""The NeMo-RL adapter's transform on batches shaped like NeMo-RL v0.4.0's rollout batch.

No nemo_rl needed: the batch is a plain dict with the keys and types grpo_train's
`repeated_batch` has after `run_multi_turn_rollout` / `run_async_multi_turn_rollout`
(message_log of {role, content, token_ids} dicts, total_reward float32 [B], idx, length,
loss_multiplier, task_name, extra_env_info, truncated). tests/nemo_rl_engine/test_nemo_rl_integration.py
runs the same transform inside NeMo-RL's real functions.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import nemo_config

from darling_nemo.nemo_rl.adapter import (
    DIVERSITY_KEY,
    QUALITY_KEY,
    DarlingLogger,
    DarlingRewardTransform,
    chat_prompt_processor,
    check_data_paths,
    prompt_and_response,
)
from darling_nemo.nemo_rl.checks import unknown_config_keys, validate_nemo_rl_config
from darling_nemo.schema import ConfigError, validate_darling


def ids(text: str) -> torch.Tensor:
    return torch.tensor([ord(c) for c in text], dtype=torch.int64)


def sample(prompt: str, response: str, reward: float) -> list[dict]:
    """One sample's message_log after a single-turn rollout with a math environment."""
    verdict = "correct" if reward > 0 else "incorrect"
    return [
        {"role": "user", "content": f"<user>{prompt}<assistant>", "token_ids": ids(prompt)},
        {
            "role": "assistant",
            "content": response,
            "token_ids": ids(response),
            "generation_logprobs": torch.zeros(len(response)),
        },
        {"role": "environment", "content": f"Environment: {verdict}", "token_ids": ids(verdict)},
    ]


def rollout_batch(rows: list[tuple[str, str, float]]) -> dict:
    """(prompt, response, environment reward) rows -> a NeMo-RL-shaped repeated_batch.

    `idx` holds the row position, as run_async_multi_turn_rollout leaves it."""
    return {
        "message_log": [sample(p, r, q) for p, r, q in rows],
        "total_reward": torch.tensor([q for _, _, q in rows], dtype=torch.float32),
        "idx": list(range(len(rows))),
        "length": torch.tensor([len(p) for p, _, _ in rows]),
        "loss_multiplier": torch.ones(len(rows)),
        "task_name": ["math"] * len(rows),
        "extra_env_info": [{"ground_truth": "4"} for _ in rows],
        "truncated": torch.zeros(len(rows), dtype=torch.bool),
    }


PROMPT_A, PROMPT_B = "What is 2+2?", "What is 3*4?"
LONG = "I think it is \\boxed{4} for sure today"  # 8 words: the lexical rules cannot decide
# Two prompts x four responses, interleaved (groups need not be contiguous).
TWO_BY_FOUR = [
    (PROMPT_A, "\\boxed{4}", 1.0),  # a1
    (PROMPT_B, "\\boxed{12}", 1.0),  # b1
    (PROMPT_A, "\\boxed{4}", 1.0),  # a2 = a1
    (PROMPT_B, "\\boxed{12}", 1.0),  # b2
    (PROMPT_A, LONG, 1.0),  # a3
    (PROMPT_B, "\\boxed{12}", 1.0),  # b3
    (PROMPT_A, "\\boxed{5}", 0.0),  # a4 (wrong)
    (PROMPT_B, "\\boxed{12}", 1.0),  # b4
]


def transform(**darling) -> DarlingRewardTransform:
    # judge=None: the lexical rules only (exact duplicates, short-answer rule).
    return DarlingRewardTransform(validate_darling({"judge": {"kind": "lexical"}, **darling}), None)


def test_prompt_and_response_reads_prompt_ids_and_assistant_text():
    log = [
        {"role": "system", "content": "sys", "token_ids": torch.tensor([1, 2])},
        {"role": "user", "content": "q", "token_ids": torch.tensor([3])},
        {"role": "assistant", "content": "first ", "token_ids": torch.tensor([4])},
        {"role": "environment", "content": "obs", "token_ids": torch.tensor([5])},
        {"role": "assistant", "content": "second", "token_ids": torch.tensor([6])},
    ]
    # prompt = every message before the first assistant turn; response = assistant text
    # joined without separator (as NeMo-RL's MathEnvironment reads it), no observations.
    assert prompt_and_response(log) == ((1, 2, 3), "first second")


def test_hand_checked_two_prompts_by_four_responses():
    batch = rollout_batch(TWO_BY_FOUR)
    result = transform().apply(batch)

    # Prompt A: classes {a1, a2}, {a3}, {a4}. a1 vs a4: one word each, no shared word,
    # 2*0 < 1 -> distinct; a3 has 8 words -> undecided -> distinct without a judge.
    # Diversity (n - |class|) / (n - 1): a1 = a2 = (4-2)/3 = 2/3, a3 = a4 = 3/3 = 1.
    # Prompt B: one class of 4 -> (4-4)/3 = 0, floored to 0.1 each.
    # DARLING reward q * d: A = [2/3, 2/3, 1, 0 (q=0)], B = [0.1] * 4.
    expected_reward = {0: 2 / 3, 2: 2 / 3, 4: 1.0, 6: 0.0, 1: 0.1, 3: 0.1, 5: 0.1, 7: 0.1}
    # Advantage = reward - group mean. A: mean = (2/3 + 2/3 + 1 + 0) / 4 = 7/12, so
    # a1 = a2 = 2/3 - 7/12 = 1/12, a3 = 1 - 7/12 = 5/12, a4 = -7/12. B: all 0.
    expected_adv = {0: 1 / 12, 2: 1 / 12, 4: 5 / 12, 6: -7 / 12, 1: 0, 3: 0, 5: 0, 7: 0}
    rows = range(8)
    np.testing.assert_allclose(result.reward, [expected_reward[i] for i in rows], atol=1e-12)
    np.testing.assert_allclose(result.advantage, [expected_adv[i] for i in rows], atol=1e-12)

    # Written back into the batch: total_reward (same dtype) and the kept quality.
    assert batch["total_reward"].dtype == torch.float32
    torch.testing.assert_close(
        batch["total_reward"], torch.tensor([expected_reward[i] for i in rows], dtype=torch.float32)
    )
    torch.testing.assert_close(batch[QUALITY_KEY], torch.tensor([q for _, _, q in TWO_BY_FOUR]))
    torch.testing.assert_close(
        batch[DIVERSITY_KEY],
        torch.tensor([2 / 3, 0.1, 2 / 3, 0.1, 1.0, 0.1, 1.0, 0.1], dtype=torch.float32),
    )
    # The rest of the batch is untouched.
    assert batch["idx"] == list(range(8)) and len(batch["message_log"][0]) == 3


def test_metrics_of_the_hand_checked_batch_then_reset():
    t = transform()
    t.apply(rollout_batch(TWO_BY_FOUR))
    m = t.pop_metrics()
    assert m["quality_mean"] == pytest.approx(7 / 8)  # 7 of 8 correct
    assert m["correct_fraction"] == pytest.approx(7 / 8)
    # diversity: (2/3 + 2/3 + 1 + 1 + 4 * 0.1) / 8 = (10/3 + 0.4) / 8
    assert m["diversity_mean"] == pytest.approx((10 / 3 + 0.4) / 8)
    assert m["reward_mean"] == pytest.approx((2 / 3 + 2 / 3 + 1 + 0 + 0.4) / 8)
    # |advantages|: (1/12 + 1/12 + 5/12 + 7/12) / 8 = (14/12) / 8
    assert m["advantage_abs_mean"] == pytest.approx(14 / 12 / 8)
    assert m["classes_per_group"] == pytest.approx(2.0)  # A: 3 classes, B: 1
    assert m["classes_per_group_hist/1"] == pytest.approx(0.5)
    assert m["classes_per_group_hist/2"] == 0.0
    assert m["classes_per_group_hist/3"] == pytest.approx(0.5)
    assert m["classes_per_group_hist/4"] == 0.0
    assert m["collapsed_group_share"] == pytest.approx(0.5)  # B collapsed
    assert m["distinct_correct_per_group"] == pytest.approx(1.5)  # A: {a1,a2},{a3}; B: 1
    assert m["num_groups"] == 2.0
    assert m["pairs_total"] == 12.0 and m["pairs_judged"] == 0.0  # 2 * C(4,2); no judge
    assert m["judge_calls"] == 0.0 and m["judge_errors"] == 0.0
    assert t.pop_metrics() == {}


def test_grpo_baseline_mode_keeps_quality_but_still_measures_diversity():
    batch = rollout_batch(TWO_BY_FOUR)
    t = transform(enabled=False, normalize_std=True)
    result = t.apply(batch)
    torch.testing.assert_close(batch["total_reward"], batch[QUALITY_KEY])
    # std-normalised GRPO advantage for A: q = [1, 1, 1, 0], mean 3/4, sample std
    # sqrt(((1/4)^2 * 3 + (3/4)^2) / 3) = sqrt(0.75 / 3) = 0.5 -> [0.5, 0.5, 0.5, -1.5].
    np.testing.assert_allclose(result.advantage[[0, 2, 4, 6]], [0.5, 0.5, 0.5, -1.5], atol=1e-5)
    assert t.pop_metrics()["classes_per_group"] == pytest.approx(2.0)


def test_metrics_accumulate_over_several_batches_of_one_step():
    # Dynamic sampling calls scale_rewards once per generated batch before one log call.
    t = transform()
    t.apply(rollout_batch(TWO_BY_FOUR))
    t.apply(rollout_batch([(PROMPT_A, "\\boxed{4}", 1.0), (PROMPT_A, "\\boxed{4}", 1.0)]))
    m = t.pop_metrics()
    assert m["num_groups"] == 3.0
    assert m["classes_per_group"] == pytest.approx((3 + 1 + 1) / 3)
    assert m["quality_mean"] == pytest.approx(9 / 10)
    assert m["collapsed_group_share"] == pytest.approx(2 / 3)


def test_identical_prompts_form_one_group_like_nemo_rl_baseline():
    # NeMo-RL groups rows by identical prompt token ids; so does the transform: two dataset
    # rows with the same prompt become one group of 4 (idx differs, prompts do not).
    rows = [(PROMPT_A, "\\boxed{4}", 1.0)] * 2 + [(PROMPT_A, "\\boxed{5}", 1.0)] * 2
    result = transform().apply(rollout_batch(rows))
    assert result.group_sizes == [4]
    np.testing.assert_allclose(result.diversity, [2 / 3] * 4)  # two classes of two


class PairsJudge:
    """A deterministic judge: P(similar) = 0.9 when the first words agree, else 0.1."""

    def __call__(self, pairs):
        return [0.9 if a.split()[0] == b.split()[0] else 0.1 for a, b in pairs]


def test_judge_calls_and_latency_are_counted():
    darling = validate_darling({"judge": {"kind": "lexical", "threshold": 0.5}})
    t = DarlingRewardTransform(darling, PairsJudge())
    long_a = "alpha " + " ".join(["w"] * 8)
    long_b = "beta " + " ".join(["w"] * 8)
    rows = [(PROMPT_A, long_a, 1.0), (PROMPT_A, long_a + " x", 1.0), (PROMPT_A, long_b, 1.0)]
    result = t.apply(rollout_batch(rows))
    # pairs (0,1) similar, (0,2) and (1,2) not: classes {0,1}, {2}; d = [1/2, 1/2, 1].
    np.testing.assert_allclose(result.diversity, [0.5, 0.5, 1.0])
    m = t.pop_metrics()
    assert m["judge_calls"] >= 1 and m["pairs_judged"] == 3.0 and m["judge_errors"] == 0.0
    assert m["judge_seconds"] >= 0.0


class JudgeWithStats(PairsJudge):
    """Like ServedJudge, keeps its own counters (e.g. requests retried on another server)."""

    def __init__(self):
        self.stats = {"requests": 0, "failed_requests": 0}

    def __call__(self, pairs):
        self.stats["requests"] += 1
        self.stats["failed_requests"] += 2  # pretend two attempts failed before success
        return super().__call__(pairs)


def test_a_judges_own_stats_are_logged_per_step():
    judge = JudgeWithStats()
    t = DarlingRewardTransform(validate_darling({"judge": {"kind": "lexical"}}), judge)
    rows = [(PROMPT_A, "alpha " + "w " * 8, 1.0), (PROMPT_A, "beta " + "w " * 8, 1.0)]
    t.apply(rollout_batch(rows))  # one undecided pair -> one judge call
    m = t.pop_metrics()
    assert (m["judge_requests"], m["judge_failed_requests"]) == (1.0, 2.0)
    t.apply(rollout_batch(rows))
    m = t.pop_metrics()  # deltas since the previous step, not totals
    assert (m["judge_requests"], m["judge_failed_requests"]) == (1.0, 2.0)
    assert judge.stats == {"requests": 2, "failed_requests": 4}


def test_judge_errors_are_counted_and_raised():
    def broken(pairs):
        raise ConnectionError("classifier server down")

    t = DarlingRewardTransform(validate_darling({"judge": {"kind": "lexical"}}), broken)
    long_rows = [(PROMPT_A, "one two three four five six", 1.0), (PROMPT_A, "a b c d e f", 1.0)]
    with pytest.raises(ConnectionError, match="server down"):
        t.apply(rollout_batch(long_rows))
    assert t.judge is not None and t.judge.errors == 1


def test_bad_batches_are_refused_with_a_clear_message():
    batch = rollout_batch(TWO_BY_FOUR)
    batch["total_reward"] = batch["total_reward"][:3]
    with pytest.raises(ValueError, match="8 message logs but 3 rewards"):
        transform().apply(batch)
    batch = rollout_batch(TWO_BY_FOUR)
    batch["total_reward"][2] = float("nan")
    with pytest.raises(ValueError, match=r"quality\[2\] is nan"):
        transform().apply(batch)


class RecordingLogger:
    """Stands in for NeMo-RL's Logger (which needs nemo_rl); records log_metrics calls."""

    def __init__(self):
        self.calls = []
        self.base_log_dir = "logs/x"

    def log_metrics(self, metrics, step, prefix="", step_metric=None):
        self.calls.append((dict(metrics), step, prefix))


def test_darling_logger_writes_pending_metrics_at_the_train_step():
    t = transform()
    inner = RecordingLogger()
    logger = DarlingLogger(inner, t)
    logger.log_metrics({"acc": 1.0}, 0, prefix="validation")  # nothing pending, not train
    t.apply(rollout_batch(TWO_BY_FOUR))
    logger.log_metrics({"loss": 0.5}, 3, prefix="train")
    logger.log_metrics({"loss": 0.4}, 4, prefix="train")  # nothing new since step 3
    assert [(c[1], c[2]) for c in inner.calls] == [
        (0, "validation"),
        (3, "darling"),
        (3, "train"),
        (4, "train"),
    ]
    assert inner.calls[1][0]["classes_per_group"] == pytest.approx(2.0)
    assert logger.base_log_dir == "logs/x"  # everything else is delegated


def test_darling_logger_adds_the_user_environments_figures_at_the_train_step():
    # user_env.metrics_of: the reward functions' wall time and stopped calls since last step
    t, inner = transform(), RecordingLogger()
    pending = [{"quality_seconds": 1.5, "reward_timeouts": 2.0}]
    logger = DarlingLogger(inner, t, lambda: pending.pop() if pending else {})
    logger.log_metrics({"acc": 1.0}, 0, prefix="validation")  # not asked outside train
    t.apply(rollout_batch(TWO_BY_FOUR))
    logger.log_metrics({"loss": 0.5}, 3, prefix="train")
    darling = inner.calls[1][0]
    assert inner.calls[1][1:] == (3, "darling")
    assert darling["quality_seconds"] == 1.5 and darling["reward_timeouts"] == 2.0
    assert darling["classes_per_group"] == pytest.approx(2.0)  # beside the transform's


# ---------------------------------------------------------------------------------------------
# Config consistency (nemo_rl.checks.validate_nemo_rl_config)
# ---------------------------------------------------------------------------------------------


def test_consistent_config_passes():
    assert validate_nemo_rl_config(nemo_config()).normalize_std is False


def test_every_contradiction_is_reported_at_once_with_key_paths():
    cfg = nemo_config(
        normalize_rewards=True,
        use_leave_one_out_baseline=True,
        num_generations_per_prompt=1,
        async_grpo={"enabled": True},
    )
    cfg["loss_fn"]["token_level_loss"] = False
    with pytest.raises(ConfigError) as err:
        validate_nemo_rl_config(cfg)
    message = str(err.value)
    for path in (
        "grpo.normalize_rewards=true contradicts darling.normalize_std=false",
        "grpo.use_leave_one_out_baseline=true contradicts darling.baseline=mean",
        "loss_fn.token_level_loss=false",
        "grpo.async_grpo.enabled=true is not supported",
        "grpo.num_generations_per_prompt=1",
    ):
        assert path in message


def test_std_ablation_switch_allows_normalize_rewards():
    cfg = nemo_config(normalize_rewards=True)
    cfg["darling"]["normalize_std"] = True  # the paper's "partition with std" ablation
    assert validate_nemo_rl_config(cfg).normalize_std is True
    cfg = nemo_config(use_leave_one_out_baseline=True)
    cfg["darling"]["baseline"] = "leave_one_out"
    assert validate_nemo_rl_config(cfg).baseline.value == "leave_one_out"


def test_missing_sections_and_misspelled_darling_keys_fail():
    with pytest.raises(ConfigError, match="darling: missing"):
        validate_nemo_rl_config({"grpo": {}, "loss_fn": {}})
    cfg = nemo_config()
    del cfg["grpo"]["normalize_rewards"]
    with pytest.raises(ConfigError, match=r"grpo.normalize_rewards: missing"):
        validate_nemo_rl_config(cfg)
    cfg = nemo_config()
    cfg["darling"]["flor"] = 0.1
    with pytest.raises(ConfigError, match=r"darling.flor"):
        validate_nemo_rl_config(cfg)


def test_unknown_keys_against_a_reference_tree():
    reference = {"grpo": {"normalize_rewards": False}, "policy": {"vllm_kwargs": {}, "x": None}}
    cfg = {
        "grpo": {"normalise_rewards": False},  # misspelled
        "policy": {"vllm_kwargs": {"anything": 1}, "x": {"free": 1}, "y": 2},
        "darling": {"whatever": 1},  # validated by its own schema
    }
    assert unknown_config_keys(cfg, reference) == ["grpo.normalise_rewards", "policy.y"]


# ---------------------------------------------------------------------------------------------
# Chat prompts for the reward-model environment
# ---------------------------------------------------------------------------------------------


class Spec:
    """The two attributes of NeMo-RL's TaskDataSpec that data processors read."""

    def __init__(self, prompt=None, system_prompt=None):
        self.prompt, self.system_prompt = prompt, system_prompt


@pytest.fixture(scope="module")
def char_tokenizer(char_tokenizer_dir):
    """conftest's character-level chat tokenizer, loaded back as a user loads it."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(char_tokenizer_dir)


def test_chat_prompt_processor_keeps_raw_content_and_templated_ids(char_tokenizer):
    datum = {"messages": [{"role": "user", "content": "Write a poem"}], "task_name": "wildchat"}
    out = chat_prompt_processor(datum, Spec(system_prompt="Be kind."), char_tokenizer, 512, 7)
    (user,) = out["message_log"]
    rendered = "<system>Be kind.\n<user>Write a poem\n<assistant>"
    assert user["content"] == "Write a poem"  # what the reward model formats itself
    assert char_tokenizer.decode(user["token_ids"]) == rendered  # what the policy sees
    assert out["length"] == len(rendered) and out["loss_multiplier"] == 1.0
    assert out["idx"] == 7 and out["task_name"] == "wildchat"

    too_long = chat_prompt_processor(datum, Spec(), char_tokenizer, 10, 0)
    # "<user>Write a poem\n<assistant>" is 30 characters > 10: cut to 4 tokens, masked out.
    assert too_long["length"] == 30 and too_long["loss_multiplier"] == 0.0
    assert len(too_long["message_log"][0]["token_ids"]) == 4


class RecordingJudge(PairsJudge):
    def __init__(self):
        self.seen: list[tuple[str, str]] = []

    def __call__(self, pairs):
        self.seen += list(pairs)
        return super().__call__(pairs)


def test_prompts_cut_for_length_stay_out_of_the_partition():
    # NeMo-RL's processors cut over-long prompts to 4 tokens with loss_multiplier 0, so two
    # different long prompts arrive as one "prompt" (here "cut"). Rows 0-2 are a real group
    # (long_a, long_a + x, long_b: classes {0,1}, {2} -> d = [1/2, 1/2, 1]); rows 3-5 are cut
    # prompts: never judged, diversity 1, reward = quality.
    long_a = "alpha " + " ".join(["w"] * 8)
    long_b = "beta " + " ".join(["w"] * 8)
    rows = [
        (PROMPT_A, long_a, 1.0),
        (PROMPT_A, long_a + " x", 1.0),
        (PROMPT_A, long_b, 1.0),
        ("cut", "gamma " + " ".join(["v"] * 8), 1.0),
        ("cut", "delta " + " ".join(["v"] * 8), 0.0),
        ("cut", "gamma " + " ".join(["v"] * 8) + " y", 1.0),
    ]
    batch = rollout_batch(rows)
    batch["loss_multiplier"] = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    judge = RecordingJudge()
    darling = validate_darling({"judge": {"kind": "lexical", "threshold": 0.5}})
    t = DarlingRewardTransform(darling, judge)
    result = t.apply(batch)
    assert all("v" not in a.split() and "v" not in b.split() for a, b in judge.seen)
    np.testing.assert_allclose(result.diversity, [0.5, 0.5, 1.0])
    np.testing.assert_allclose(batch[DIVERSITY_KEY].numpy(), [0.5, 0.5, 1.0, 1.0, 1.0, 1.0])
    # kept rows: q x d = [0.5, 0.5, 1]; cut rows: their quality
    np.testing.assert_allclose(batch["total_reward"].numpy(), [0.5, 0.5, 1.0, 1.0, 0.0, 1.0])
    assert t.pop_metrics()["pairs_judged"] == 3.0  # the 3 pairs of the real group only


def test_a_missing_data_file_names_its_key_and_each_tasks_prep_command(tmp_path):
    # the hint lists the registry's NeMo-RL tasks' prep commands: a new task's too
    from darling_nemo import tasks

    present = tmp_path / "val.jsonl"
    present.write_text("{}\n")
    data = {"prompt_file": None, "system_prompt_file": None, "val_data_path": str(present)}
    cfg = {"data": {**data, "train_data_path": str(tmp_path / "none.jsonl")}}
    with pytest.raises(ConfigError) as err:
        check_data_paths(cfg)
    message = str(err.value)
    assert "data.train_data_path: file not found" in message and "val_data_path" not in message
    assert message.endswith("prepare data with darling-prep-math / darling-prep-wildchat")
    toy = replace(tasks.task("math").nemo_rl, prep_command="toy-prep")
    with (
        tasks.registered_task(tasks.Task("toy_nemo", "a toy", nemo_rl=toy)),
        pytest.raises(ConfigError, match="darling-prep-math / darling-prep-wildchat / toy-prep"),
    ):
        check_data_paths(cfg)
