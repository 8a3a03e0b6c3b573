"""DARLING's judge off the training critical path (`darling.overlap: true`).

Synchronously, the judge runs inside `scale_rewards`, between the rollout and the
advantages, and the whole step waits for it. Yet nothing needs the DARLING reward until
`policy.train`: in between, grpo_train (v0.4.0, nemo_rl/algorithms/grpo.py) builds the
training data and computes the previous and reference log-probabilities, which read the
tokens only. So:

1. In the `scale_rewards` hook, `OverlappedDarling.start` reads the batch (as the
   synchronous transform does), starts the judge and the core (`transform.compute`) in a
   background thread, and writes a provisional `total_reward`: each row's group number
   (0, 1, 2, ... per distinct prompt). NeMo-RL's group baseline of a constant is that
   constant, so every provisional advantage is exactly 0.
2. grpo_train computes the baseline, the (zero) advantages, train_data and the
   log-probabilities while the judge works.
3. `policy.train` is wrapped (`overlapped_train`): before the real train,
   `OverlappedDarling.finish` waits for the judge, writes the DARLING reward with the
   transform's own `write`, recomputes baseline, std and advantages with NeMo-RL's own
   `calculate_baseline_and_std_per_prompt` and `normalize_advantages_with_epsilon`, and
   writes the advantage of each sample over its whole row of `train_data["advantages"]`
   (grpo_train broadcasts it over every token of every message, padding stays 0).

Why the result is bit for bit the synchronous one:
- Same reward: the same `read`/`compute`/`write` code on the same inputs.
- Same grouping: NeMo-RL groups rows by equal prompt token ids; the group numbers are
  assigned by equal prompt token ids. NeMo-RL's baseline of the provisional reward equals
  the provisional reward in every row exactly when every NeMo-RL group lies within one of
  ours (a merged group would average two different numbers); `finish` checks that before
  writing anything and fails naming darling.overlap otherwise. The per-group arithmetic
  of calculate_baseline_and_std_per_prompt depends only on which rows form a group (in
  ascending order), not on the key, so the recomputed baseline and std are the ones the
  synchronous step computes.
- Same everything grpo_train reads afterwards: the DARLING reward is copied into the
  provisional tensor itself, the object grpo_train holds as `rewards` (train/reward, the
  logged `rewards`, "Avg Reward"); `repeated_batch["baseline"]`/`["std"]` are fixed in
  place; `train_data["advantages"]` is the tensor `flat_messages["advantages"]` that the
  advantages/* metrics read after training (train_data.to("cpu") keeps CPU tensors).
Not fixed up: the per-message `advantages` views inside `repeated_batch["message_log"]`
(zeros), which grpo_train does not read after building train_data.

What would read the reward earlier is refused by `checks.py` (reward shaping with
overlap, dynamic sampling altogether). Tests: tests/nemo_rl_engine/test_nemo_rl_overlap.py.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from darling_nemo.judge_stream import JudgeStream
from darling_nemo.nemo_rl.judging_plan import JudgingPlan
from darling_nemo.nemo_rl.prefix_worker import InboxPoller, TaggedGeneration
from darling_nemo.nemo_rl.touch_points import replaced
from darling_nemo.nemo_rl.transform import (
    DarlingOutcome,
    DarlingRewardTransform,
    RolloutRows,
    prompt_and_response,
)

TimerContext = Callable[[], AbstractContextManager[Any]]


def group_numbers(prompts: list[tuple[int, ...]]) -> list[int]:
    """0, 1, 2, ... per distinct prompt, in order of first appearance."""
    numbers: dict[tuple[int, ...], int] = {}
    return [numbers.setdefault(prompt, len(numbers)) for prompt in prompts]


@dataclass
class _Pending:
    batch: Any  # grpo_train's repeated_batch
    rows: RolloutRows
    groups: torch.Tensor  # [B, 1] group numbers: the prompt key for NeMo-RL's baseline
    provisional: torch.Tensor  # the tensor written as total_reward (grpo_train's `rewards`)
    provisional_values: torch.Tensor  # a copy of what was written
    outcome: Future[DarlingOutcome]


class OverlappedDarling:
    """The transform with its judge in a background thread (see the module docstring).

    leave_one_out / normalize: grpo.use_leave_one_out_baseline / grpo.normalize_rewards,
    as grpo_train passes them to NeMo-RL's baseline and advantage functions.
    timer: a context manager per use, timing DARLING's part of the critical path (the
    hook's read, then the wait for the judge and the write).
    """

    def __init__(
        self,
        transform: DarlingRewardTransform,
        *,
        leave_one_out: bool,
        normalize: bool,
        timer: TimerContext,
    ) -> None:
        self.transform = transform
        self.leave_one_out = leave_one_out
        self.normalize = normalize
        self.timer = timer
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="darling-judge")
        self._pending: _Pending | None = None

    def start(self, batch: Any) -> None:
        """In the scale_rewards hook: judge in the background, provisional total_reward."""
        if self._pending is not None:
            raise RuntimeError(
                "darling.overlap: the previous rollout's DARLING rewards were never used by "
                "policy.train (grpo_train drew a second batch before training: dynamic "
                "sampling?); set darling.overlap=false"
            )
        with self.timer():
            rows = self.transform.read(batch)
            rewards = rows.rewards
            groups = torch.tensor(group_numbers(rows.prompts), dtype=torch.int64)
            provisional = groups.to(rewards.dtype).to(rewards.device)
            batch["total_reward"] = provisional
            self._pending = _Pending(
                batch=batch,
                rows=rows,
                groups=groups.unsqueeze(-1),
                provisional=provisional,
                provisional_values=provisional.clone(),
                outcome=self._executor.submit(self.transform.compute, rows),
            )

    def finish(self, train_data: Any) -> None:
        """Before policy.train: wait for the judge, write rewards, baseline, std, advantages."""
        pending, self._pending = self._pending, None
        if pending is None:
            return  # no rollout since the last train (nothing of DARLING to write)
        with self.timer():
            outcome = pending.outcome.result()  # the judge's error, if any, raises here
            self._check_provisional(pending, train_data)
            self.transform.write(pending.batch, pending.rows, outcome)
            rewards = pending.provisional
            rewards.copy_(pending.batch["total_reward"])
            pending.batch["total_reward"] = rewards
            advantages = self._advantages(pending)
            lengths = train_data["input_lengths"].to(torch.int64)
            flat = train_data["advantages"]
            positions = torch.arange(flat.shape[1]).unsqueeze(0)
            inside = positions < lengths.unsqueeze(-1)
            flat.copy_(torch.where(inside, advantages.to(flat.dtype), flat))

    def _advantages(self, pending: _Pending) -> torch.Tensor:
        """[B, 1]: grpo_train's advantages of the DARLING reward, by NeMo-RL's functions."""
        from nemo_rl.algorithms.grpo import normalize_advantages_with_epsilon
        from nemo_rl.algorithms.utils import calculate_baseline_and_std_per_prompt

        rewards = pending.provisional
        baseline, std = calculate_baseline_and_std_per_prompt(
            pending.groups.to(rewards.device),
            rewards,
            torch.ones_like(rewards),
            leave_one_out_baseline=self.leave_one_out,
        )
        for key, value in (("baseline", baseline), ("std", std)):
            if isinstance(pending.batch.get(key), torch.Tensor):
                pending.batch[key].copy_(value)
        advantages = (rewards - baseline).unsqueeze(-1)
        if self.normalize:
            advantages = normalize_advantages_with_epsilon(advantages=advantages, std=std)
        return advantages

    def _check_provisional(self, pending: _Pending, train_data: Any) -> None:
        """NeMo-RL grouped as we did and trains on the zero advantages of the placeholder."""
        size = pending.provisional.numel()
        baseline = pending.batch.get("baseline")
        same_groups = (
            isinstance(baseline, torch.Tensor)
            and baseline.shape == pending.provisional_values.shape
            and torch.equal(
                baseline.to(pending.provisional_values.device), pending.provisional_values
            )
        )
        if not same_groups:
            raise RuntimeError(
                "darling.overlap: NeMo-RL's baseline grouped the prompts differently from "
                "DARLING's groups (identical prompt token ids; a prompt ending in the pad "
                "token?), so the overlapped advantages would differ; set darling.overlap=false"
            )
        flat = train_data["advantages"]
        if flat.shape[0] != size or bool(flat.any()):
            raise RuntimeError(
                f"darling.overlap: policy.train got advantages of shape {tuple(flat.shape)} "
                f"that are not the placeholder's zeros for {size} samples; set "
                "darling.overlap=false"
            )

    def close(self) -> None:
        """Stop the thread; a judge call still running is abandoned (its step failed)."""
        self._pending = None
        self._executor.shutdown(wait=False, cancel_futures=True)


@contextmanager
def overlapped_train(policy: Any, overlapped: OverlappedDarling) -> Iterator[None]:
    """`policy.train` (the Policy object grpo_train trains) finishes DARLING's step first."""
    had_own = "train" in vars(policy)
    original = policy.train

    def train_after_darling(data: Any, *args: Any, **kwargs: Any) -> Any:
        overlapped.finish(data)
        return original(data, *args, **kwargs)

    policy.train = train_after_darling
    try:
        yield
    finally:
        if had_own:
            policy.train = original
        else:
            del policy.train
        overlapped.close()


def _settled_words_poller(stream: JudgeStream, prompts: dict[int, tuple[int, ...]]) -> Any:
    """The driver thread that hands the workers' settled words of each row to the stream."""
    if stream.prefix_words is None:  # the judge's registry entry and the judge disagree
        raise ValueError(
            "the judging plan takes settled words, but the judge reads whole responses "
            "(it has no prefix_words)"
        )
    return InboxPoller(
        f"darling-prefixes-{os.getpid()}-{id(stream)}",
        lambda row, settled: stream.add_settled(row, prompts[row], settled),
    )


@contextmanager
def judge_during_generation(
    transform: DarlingRewardTransform, plan: JudgingPlan
) -> Iterator[JudgeStream]:
    """Each training rollout's responses go to a `JudgeStream` as they finish.

    vLLM's async engine makes NeMo-RL v0.4.0 roll each sample out on its own
    (nemo_rl/experience/rollouts.py: run_async_multi_turn_rollout awaits
    `run_sample_multi_turn_rollout(sample_idx=i, ...)` per row i of the batch, looked up in
    the module at call time); that function is wrapped to hand the finished sample's prompt
    and response to the stream. The first sample of a rollout opens the stream; the
    transform closes it when the rollout reaches the DARLING hook. `grpo.validate` is
    wrapped so that validation rollouts are not judged.

    Where the run's plan takes responses on their settled words (`plan.prefix`,
    darling.prefix_judging): each sample's generation calls carry a tag, the workers
    (prefix_worker.py, built in setup()) send its settled words to an inbox, and a driver
    thread hands them to the stream, so a response joins before it finishes.
    """
    from nemo_rl.algorithms import grpo
    from nemo_rl.experience import rollouts

    if transform.judge is None:
        raise ValueError("judge_during_generation needs a pair judge")
    stream = JudgeStream(transform.judge, transform.settings.threshold)
    original_sample, original_validate = rollouts.run_sample_multi_turn_rollout, grpo.validate
    sample_signature = inspect.signature(original_sample)
    validating = False
    prompts: dict[int, tuple[int, ...]] = {}  # this rollout's rows -> their group key
    poller = _settled_words_poller(stream, prompts) if plan.prefix.on else None

    async def sample_then_stream(*args: Any, **kwargs: Any) -> Any:
        if validating:
            return await original_sample(*args, **kwargs)
        call = sample_signature.bind(*args, **kwargs)
        row = int(call.arguments["sample_idx"])
        if not stream.is_open:
            stream.open()
        if poller is not None:
            state = call.arguments["initial_sample_state"]
            prompts[row] = prompt_and_response(state["message_log"])[0]
            tag = [poller.name, row, stream.prefix_words]
            call.arguments["policy_generation"] = TaggedGeneration(
                call.arguments["policy_generation"], tag
            )
        final_state, metrics = await original_sample(*call.args, **call.kwargs)
        prompt, response = prompt_and_response(final_state["message_log"])
        stream.add(row, prompt, response)
        return final_state, metrics

    def validate_unstreamed(*args: Any, **kwargs: Any) -> Any:
        nonlocal validating
        validating = True
        try:
            return original_validate(*args, **kwargs)
        finally:
            validating = False

    transform.stream = stream
    transform.prefix_reporting = poller is not None
    try:
        with (
            replaced(rollouts, run_sample_multi_turn_rollout=sample_then_stream),
            replaced(grpo, validate=validate_unstreamed),
        ):
            yield stream
    finally:
        transform.stream = None
        transform.prefix_reporting = False
        stream.close()
        if poller is not None:
            poller.close()
