"""darling.overlap: the judge in the background gives the synchronous result, bit for bit.

Both paths run through NeMo-RL v0.4.0's own functions (skipped without nemo_rl): the hook,
calculate_baseline_and_std_per_prompt, dynamic_sampling (disabled, as configs must have it),
normalize_advantages_with_epsilon, batched_message_log_to_flat_message and BatchedDataDict.
`grpo_middle` replays grpo_train's lines from scale_rewards to policy.train on a batch (the
loop itself is too heavy for hundreds of examples); the same comparison through the real
grpo_train is in test_nemo_rl_integration.py (test_grpo_train_overlap_equals_synchronous).
"""

from __future__ import annotations

import copy
import os
import threading
import zlib

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest

pytest.importorskip("nemo_rl")
pytestmark = pytest.mark.nemo_rl

import torch  # noqa: E402
from helpers import scale_rewards_and_baseline  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from darling_nemo import judges  # noqa: E402
from darling_nemo.nemo_rl.adapter import (  # noqa: E402
    DIVERSITY_KEY,
    QUALITY_KEY,
    darling_rewards,
)
from darling_nemo.nemo_rl.overlap import group_numbers  # noqa: E402

TIMING_METRICS = {"seconds", "judge_seconds"}  # wall time: differs between any two runs
WORDS = ["a", "b", "c", "d"]
response = st.one_of(  # short answers (lexical rules) and long ones (the judge)
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=3).map(" ".join),
    st.lists(st.sampled_from(WORDS), min_size=6, max_size=8).map(" ".join),
)


def crc32_judge(seed: int):
    """Deterministic, arbitrary (non-transitive, order-sensitive), as in test_core_properties."""

    def judge(pairs):
        return [zlib.crc32(f"{seed}|{a}|{b}".encode()) % 1000 / 1000 for a, b in pairs]

    return judge


class RecordingPolicy:
    """policy.train's argument is what the step trains on; nothing else is needed here."""

    def __init__(self):
        self.trained = []

    def train(self, data, loss_fn):
        self.trained.append(data)
        return {"loss": torch.tensor(0.0)}


def nemo_config(darling: dict, **grpo) -> dict:
    return {
        "grpo": {
            "normalize_rewards": False,
            "use_leave_one_out_baseline": False,
            "num_generations_per_prompt": 2,
            "num_prompts_per_step": 1,
            "use_dynamic_sampling": False,
            "async_grpo": {"enabled": False},
            "reward_shaping": {"enabled": False},
            "reward_scaling": {"enabled": False},
            **grpo,
        },
        "loss_fn": {"token_level_loss": True},
        "policy": {"make_sequence_length_divisible_by": 4},
        "darling": {"judge": {"kind": "lexical"}, **darling},
    }


def rollout(prompts: list[tuple[int, ...]], responses: list[str], quality, multiplier):
    """NeMo-RL's repeated_batch after a rollout, and the prompt-only input_ids (pad 0)."""
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    logs = [
        [
            {"role": "user", "content": "p", "token_ids": torch.tensor(prompt)},
            {
                "role": "assistant",
                "content": text,
                "token_ids": torch.tensor([ord(c) for c in text] or [1]),
            },
        ]
        for prompt, text in zip(prompts, responses, strict=True)
    ]
    prompt_only, _ = batched_message_log_to_flat_message(
        [log[:1] for log in logs], pad_value_dict={"token_ids": 0}
    )
    batch = BatchedDataDict(
        {
            "message_log": logs,
            "total_reward": torch.tensor(quality, dtype=torch.float32),
            "loss_multiplier": torch.tensor(multiplier, dtype=torch.float32),
            "length": torch.tensor([len(p) for p in prompts]),
        }
    )
    return batch, prompt_only["token_ids"]


def grpo_middle(cfg: dict, batch, input_ids, policy):
    """grpo_train v0.4.0 (grpo.py ~1003-1132 and the metrics after training), in order."""
    from nemo_rl.algorithms import grpo
    from nemo_rl.data.llm_message_utils import batched_message_log_to_flat_message
    from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    from nemo_rl.utils.timer import Timer

    batch, baseline, std = scale_rewards_and_baseline(cfg, batch, input_ids)
    batch, complete, _, _ = grpo.dynamic_sampling(batch, std, baseline, 1, cfg, Timer(), None)
    assert complete
    rewards, baseline, std = batch["total_reward"], batch["baseline"], batch["std"]
    advantages = (rewards - baseline).unsqueeze(-1)
    if cfg["grpo"]["normalize_rewards"]:
        advantages = grpo.normalize_advantages_with_epsilon(advantages=advantages, std=std)
    for i, log in enumerate(batch["message_log"]):
        for message in log:
            mask = torch.ones_like if message["role"] == "assistant" else torch.zeros_like
            message["token_loss_mask"] = mask(message["token_ids"])
            message["generation_logprobs"] = torch.zeros_like(
                message["token_ids"], dtype=torch.float32
            )
            message["advantages"] = advantages[i].expand(message["token_ids"].shape)
    flat, lengths = batched_message_log_to_flat_message(
        batch["message_log"],
        pad_value_dict={"token_ids": 0},
        make_sequence_length_divisible_by=cfg["policy"]["make_sequence_length_divisible_by"],
    )
    train_data = BatchedDataDict(
        {
            "input_ids": flat["token_ids"],
            "input_lengths": lengths,
            "advantages": flat["advantages"],
            "generation_logprobs": flat["generation_logprobs"],
            "token_mask": flat["token_loss_mask"],
            "sample_mask": batch["loss_multiplier"],
        }
    )
    train_data.to("cpu")
    policy.train(train_data, None)
    response_advantages = torch.masked_select(flat["advantages"], flat["token_loss_mask"].bool())
    logged = {
        "reward": rewards.tolist(),
        "advantages/mean": torch.mean(response_advantages).item(),
        "advantages/max": torch.max(response_advantages).item(),
        "advantages/min": torch.min(response_advantages).item(),
    }
    return batch, train_data, logged


def run_step(cfg: dict, judge, prompts, responses, quality, multiplier, monkeypatch):
    """One step's data and metrics; overlapped when cfg's darling.overlap is true."""
    monkeypatch.setattr(judges, "make_judge", lambda config: judge)
    batch, input_ids = rollout(prompts, responses, quality, multiplier)
    policy = RecordingPolicy()
    with darling_rewards(cfg, policy, task="math") as transform:
        batch, train_data, logged = grpo_middle(cfg, batch, input_ids, policy)
        metrics = transform.pop_metrics()
    assert policy.trained == [train_data]
    return batch, train_data, logged, metrics


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape, what
    # Bits, not values: -0.0 vs 0.0 or two NaNs would pass torch.equal's comparisons.
    assert torch.equal(a.view(torch.int32), b.view(torch.int32)), what


# (darling settings, grpo keys) that validate together
MODES = [
    ({}, {}),
    ({"baseline": "leave_one_out"}, {"use_leave_one_out_baseline": True}),
    ({"normalize_std": True}, {"normalize_rewards": True}),
    ({"enabled": False, "normalize_std": True}, {"normalize_rewards": True}),
    ({"partition_scope": "correct", "floor": 0.0}, {}),
    ({"fusion": "additive", "judge_rounds": "one"}, {}),
]


@st.composite
def step_batches(draw):
    """Groups of 2-6 responses; two groups may share a prompt (NeMo-RL merges them)."""
    sizes = draw(st.lists(st.integers(2, 6), min_size=1, max_size=4))
    prompt_ids = draw(st.lists(st.integers(0, 2), min_size=len(sizes), max_size=len(sizes)))
    prompts, responses, quality, multiplier = [], [], [], []
    for size, pid in zip(sizes, prompt_ids, strict=True):
        cut = draw(st.booleans()) and draw(st.booleans())  # an over-long prompt, 1 in 4
        for _ in range(size):
            prompts.append((7, 8, pid + 1) if not cut else (9,))
            responses.append(draw(response))
            quality.append(draw(st.sampled_from([0.0, 1.0, 0.25, -1.5])))
            multiplier.append(0.0 if cut else 1.0)
    return prompts, responses, quality, multiplier


@settings(
    max_examples=200,
    suppress_health_check=[*settings().suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(
    batch=step_batches(),
    mode=st.sampled_from(MODES),
    seed=st.integers(0, 2**16),
    threshold=st.floats(0.05, 0.95),
)
def test_overlapped_equals_synchronous_bit_for_bit(batch, mode, seed, threshold, monkeypatch):
    darling, grpo_keys = mode
    darling = {**darling, "judge": {"kind": "lexical", "threshold": threshold}}
    results = {}
    for overlap in (False, True):
        cfg = nemo_config({**darling, "overlap": overlap}, **grpo_keys)
        results[overlap] = run_step(cfg, crc32_judge(seed), *copy.deepcopy(batch), monkeypatch)
    (s_batch, s_train, s_logged, s_metrics), (o_batch, o_train, o_logged, o_metrics) = (
        results[False],
        results[True],
    )
    for key in ("total_reward", QUALITY_KEY, DIVERSITY_KEY, "baseline", "std"):
        assert_bitwise_equal(s_batch[key], o_batch[key], key)
    for key in ("advantages", "input_ids", "token_mask", "sample_mask"):
        assert_bitwise_equal(s_train[key], o_train[key], key)
    assert s_logged == o_logged
    assert {k: v for k, v in s_metrics.items() if k not in TIMING_METRICS} == {
        k: v for k, v in o_metrics.items() if k not in TIMING_METRICS
    }


def test_hand_checked_step_overlapped(monkeypatch):
    # One prompt, 4 responses, quality [1, 1, 1, 0]; lexical classes {a, a}, {b}, {c}:
    # d = [2/3, 2/3, 1, 1], r = q * d = [2/3, 2/3, 1, 0], mean 7/12 ->
    # A = [1/12, 1/12, 5/12, -7/12] over every token of each row, 0 on the padding.
    prompts = [(5, 6)] * 4
    responses = ["a", "a", "b", "c"]
    cfg = nemo_config({"overlap": True})
    batch, train, logged, metrics = run_step(
        cfg, crc32_judge(0), prompts, responses, [1.0, 1, 1, 0], [1.0] * 4, monkeypatch
    )
    expected = torch.tensor([1 / 12, 1 / 12, 5 / 12, -7 / 12])
    torch.testing.assert_close(batch["total_reward"], torch.tensor([2 / 3, 2 / 3, 1.0, 0.0]))
    for i in range(4):
        n = int(train["input_lengths"][i])  # 2 prompt tokens + 1 response token
        assert n == 3 and train["advantages"].shape[1] == 4  # padded to a multiple of 4
        torch.testing.assert_close(train["advantages"][i, :n], expected[i].expand(n))
        assert train["advantages"][i, n:].eq(0).all()
    assert logged["reward"] == pytest.approx([2 / 3, 2 / 3, 1, 0])
    assert metrics["classes_per_group"] == 3.0


def test_the_judge_runs_in_another_thread_and_its_error_reaches_train(monkeypatch):
    threads = []

    def failing_judge(pairs):
        threads.append(threading.current_thread().name)
        raise ConnectionError("classifier down")

    cfg = nemo_config({"overlap": True})
    long = ["a b c d a b", "b c d a b c"]  # > 5 words: goes to the judge
    with pytest.raises(ConnectionError, match="classifier down"):
        run_step(cfg, failing_judge, [(1,)] * 2, long, [1.0, 1.0], [1.0, 1.0], monkeypatch)
    assert threads and threads[0].startswith("darling-judge")


def test_a_grouping_nemo_rl_does_not_share_is_refused_naming_the_key(monkeypatch):
    # Prompts (3,) and (3, 0): two DARLING groups, but NeMo-RL pads prompt ids with the
    # pad token (0 here) and sees one group of 4; the overlapped advantages would differ.
    cfg = nemo_config({"overlap": True})
    prompts = [(3,), (3,), (3, 0), (3, 0)]
    with pytest.raises(RuntimeError, match=r"grouped the prompts differently.*darling\.overlap"):
        run_step(
            cfg, crc32_judge(0), prompts, ["a", "b", "a", "b"], [1.0] * 4, [1.0] * 4, monkeypatch
        )


def test_without_a_policy_or_with_overlap_false_the_hook_judges_synchronously(monkeypatch):
    from nemo_rl.algorithms import grpo

    for cfg, policy in (
        (nemo_config({"overlap": True}), None),
        (nemo_config({"overlap": False}), RecordingPolicy()),
    ):
        monkeypatch.setattr(judges, "make_judge", lambda config: crc32_judge(0))
        batch, _ = rollout([(1,)] * 2, ["a", "b"], [1.0, 0.0], [1.0, 1.0])
        with darling_rewards(cfg, policy, task="math"):
            batch = grpo.scale_rewards(batch, cfg["grpo"]["reward_scaling"])
            # written in the hook: a DARLING reward (d = 1 each), not a group number
            assert batch["total_reward"].tolist() == [1.0, 0.0]
            if policy is not None:
                assert "train" not in vars(policy)


def test_reward_shaping_falls_back_to_synchronous_judging(monkeypatch, capsys):
    from nemo_rl.algorithms import grpo

    cfg = nemo_config({"enabled": False, "overlap": True}, reward_shaping={"enabled": True})
    monkeypatch.setattr(judges, "make_judge", lambda config: crc32_judge(0))
    policy = RecordingPolicy()
    batch, _ = rollout([(1,)] * 2, ["a", "b"], [1.0, 0.0], [1.0, 1.0])
    with darling_rewards(cfg, policy, task="math"):
        assert "train" not in vars(policy)
        batch = grpo.scale_rewards(batch, cfg["grpo"]["reward_scaling"])
        assert batch["total_reward"].tolist() == [1.0, 0.0]
    assert (
        "judging synchronously because grpo.reward_shaping.enabled=true" in capsys.readouterr().out
    )


def test_overlap_wraps_train_only_inside_the_block(monkeypatch):
    monkeypatch.setattr(judges, "make_judge", lambda config: crc32_judge(0))
    policy = RecordingPolicy()
    with darling_rewards(nemo_config({"overlap": True}), policy, task="math"):
        assert "train" in vars(policy)
    assert "train" not in vars(policy) and policy.train.__func__ is RecordingPolicy.train


def test_group_numbers_follow_first_appearance():
    assert group_numbers([(1, 2), (3,), (1, 2), (4,), (3,)]) == [0, 1, 0, 2, 1]


# The rehearsal of every NeMo-RL config runs overlapped (the default) and checks it:
# tests/nemo_rl_engine/test_rehearsal.py::test_rehearsal_passes.
