"""DARLING's reward transform over NeMo-RL's rollout batch: read, judge + core, write.

Pure with respect to NeMo-RL (torch and the core only): adapter.py calls it from the
scale_rewards hook, overlap.py runs its `compute` in the background.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from darling_nemo import methods
from darling_nemo.core import DarlingBatch, KnownVerdicts, PairJudge, darling_batch
from darling_nemo.judge_stream import (
    JudgeStream,
    StreamedVerdicts,
    prefix_words,
    usable_verdicts,
)
from darling_nemo.methods.base import LOGPROBS
from darling_nemo.metrics import TimedJudge, darling_step_metrics, judge_usage, usage_since
from darling_nemo.schema import DarlingConfig
from darling_nemo.user_rewards import answer_keys

QUALITY_KEY = "darling_quality"  # the environment reward, kept next to the DARLING reward
DIVERSITY_KEY = "darling_diversity"


# ---------------------------------------------------------------------------------------------
# Reading NeMo-RL's rollout batch
# ---------------------------------------------------------------------------------------------


def prompt_and_response(message_log: Sequence[dict[str, Any]]) -> tuple[tuple[int, ...], str]:
    """(prompt token ids, response text) of one sample of a rollout batch.

    The prompt is every message before the first assistant message (what the dataloader
    produced); the response is the assistant messages' content joined without separator,
    as NeMo-RL's MathEnvironment reads it. Environment observations are not response text.
    """
    first = next(
        (k for k, m in enumerate(message_log) if m["role"] == "assistant"), len(message_log)
    )
    prompt = message_log[:first]
    ids = torch.cat([torch.as_tensor(m["token_ids"]).reshape(-1) for m in prompt]) if prompt else []
    response = "".join(str(m["content"]) for m in message_log[first:] if m["role"] == "assistant")
    return tuple(int(t) for t in ids), response


def mean_generation_logprob(message_log: Sequence[dict[str, Any]]) -> float:
    """The mean over the response's tokens of vLLM's sampling log-probabilities (the
    assistant messages' `generation_logprobs`, which NeMo-RL's rollout keeps), 0.0 for a
    response of no tokens. A message without them is refused, naming the key."""
    values = []
    for message in message_log:
        if message["role"] != "assistant":
            continue
        if "generation_logprobs" not in message:
            raise ValueError(
                "an assistant message has no generation_logprobs: the unlikeliness reward "
                "reads them (NeMo-RL's vLLM rollout writes them)"
            )
        values.append(torch.as_tensor(message["generation_logprobs"]).reshape(-1).double())
    tokens = torch.cat(values) if values else torch.zeros(0, dtype=torch.float64)
    return float(tokens.mean()) if tokens.numel() else 0.0


def _usable_verdicts(
    rows: RolloutRows, streamed: StreamedVerdicts, words: int | None
) -> dict[tuple[int, int], float]:
    """Streamed verdicts whose judge input is the one the kept rows' final responses give
    (`judge_stream.usable_verdicts`), by batch row."""
    final = {row: rows.responses[row] for row in rows.kept}
    return usable_verdicts(streamed, final, words)


def _by_position(rows: RolloutRows, verdicts: dict[tuple[int, int], float]) -> KnownVerdicts:
    """Verdicts indexed by position among the kept rows, as `darling_batch` reads them (it
    drops pairs across groups itself)."""
    position = {row: k for k, row in enumerate(rows.kept)}
    return {(position[a], position[b]): p for (a, b), p in verdicts.items()}


# ---------------------------------------------------------------------------------------------
# The transform
# ---------------------------------------------------------------------------------------------


@dataclass
class RolloutRows:
    """The rollout batch as the transform reads it (copies: the batch may change after)."""

    prompts: list[tuple[int, ...]]  # prompt token ids per row: the group key
    responses: list[str]
    rewards: torch.Tensor  # total_reward as read (after NeMo-RL's reward scaling)
    kept: list[int]  # rows with loss_multiplier > 0: the partitioned rows
    # Mean generation log-probability per row, read only for a method that needs it.
    logprobs: list[float] | None = None
    # Each row's final answer as the partition compares it (`user_rewards.answer_keys`),
    # read only where the task gives answers by a function (task.answer_func).
    answers: list[str] | None = None


@dataclass
class DarlingOutcome:
    reward: np.ndarray  # float64 [B]: DARLING reward per row (quality where not kept)
    diversity: np.ndarray  # float64 [B]
    result: DarlingBatch | None  # the core's result over the kept rows


class DarlingRewardTransform:
    """Rewrites a rollout batch's `total_reward` in place and accumulates step metrics.

    `apply` may run several times per training step (dynamic sampling draws more batches);
    `pop_metrics` summarises everything since the last call.
    """

    def __init__(self, darling: DarlingConfig, judge: PairJudge | None) -> None:
        self.darling = darling
        self.settings = darling.settings()
        self.logprobs = LOGPROBS in methods.method(darling.method).inputs  # read them?
        self.judge = TimedJudge(judge) if judge is not None else None
        # Set by the adapter when the rollout feeds it (darling.judge_during_generation).
        self.stream: JudgeStream | None = None
        self.prefix_reporting = False  # set with it when workers report settled words
        # Set by the adapter where the task gives final answers by a function (user_env's
        # `answers_of`): (message logs, extra_env_info) -> each row's answer or None.
        self.answers: Callable[[list[Any], list[Any]], list[str | None]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._batches: list[tuple[DarlingBatch, list[tuple[int, ...]]]] = []
        self._seconds = 0.0
        self._streamed_pairs = 0
        self._settled_early = 0  # darling.prefix_judging: responses that joined early
        self._settled_pairs = 0  # ... and the kept verdicts that involve one of them
        self._judge_before = judge_usage(self.judge)

    def apply(self, batch: Any) -> DarlingBatch | None:
        """batch: NeMo-RL's BatchedDataDict (or any mapping) after rewards are computed.

        Reads `message_log` (list of message dicts with role, content, token_ids),
        `total_reward` (float tensor [B]) and `loss_multiplier` ([B], optional); writes
        `total_reward` (DARLING reward, same dtype), `darling_quality` (the reward it read) and
        `darling_diversity` (tensors [B]). Rows with loss_multiplier 0 (prompts NeMo-RL's
        processors cut for being too long: they all share one 4-token "prompt") are left
        out of the partition: no judge call, no effect on anyone's diversity; they count as
        singletons (diversity 1, reward = quality) and NeMo-RL masks them out of the loss.
        Returns the core's result over the partitioned rows (None when there are none).

        The three steps are public so that `overlap.OverlappedDarling` runs the same code
        with `compute` (the judge) in the background: read, compute, write.
        """
        rows = self.read(batch)
        outcome = self.compute(rows)
        self.write(batch, rows, outcome)
        return outcome.result

    def read(self, batch: Any) -> RolloutRows:
        """What the transform needs from the rollout batch, copied out of it."""
        start = time.perf_counter()
        rewards = batch["total_reward"]
        if not isinstance(rewards, torch.Tensor) or rewards.dim() != 1:
            raise ValueError("repeated_batch['total_reward'] must be a 1-D tensor")
        logs = batch["message_log"]
        if len(logs) != rewards.numel():
            raise ValueError(f"{len(logs)} message logs but {rewards.numel()} rewards")
        prompts, responses = zip(*(prompt_and_response(log) for log in logs), strict=True)
        multiplier = batch.get("loss_multiplier")
        rows = RolloutRows(
            prompts=list(prompts),
            responses=list(responses),
            rewards=rewards.detach().clone(),
            kept=[
                row for row in range(len(logs)) if multiplier is None or float(multiplier[row]) > 0
            ],
            logprobs=[mean_generation_logprob(log) for log in logs] if self.logprobs else None,
        )
        if self.answers is not None:
            found = self.answers(list(logs), list(batch["extra_env_info"]))
            if len(found) != len(logs):
                raise ValueError(f"{len(found)} answers for {len(logs)} rows")
            rows.answers = answer_keys(found)
        self._seconds += time.perf_counter() - start
        return rows

    def compute(self, rows: RolloutRows) -> DarlingOutcome:
        """The judge and the core over the kept rows (the only step that takes time). With a
        stream, its verdicts are closed over first and only the rest is judged here."""
        start = time.perf_counter()
        streamed = self.stream.close() if self.stream is not None else {}
        usable = _usable_verdicts(rows, streamed, prefix_words(self.judge))
        known = _by_position(rows, usable)
        self._streamed_pairs += len(known)
        if self.stream is not None:
            early = self.stream.early_rows
            self._settled_early += len(early)
            self._settled_pairs += sum(a in early or b in early for a, b in usable)
        quality = rows.rewards.to(torch.float64).cpu().numpy()
        reward, diversity = quality.copy(), np.ones_like(quality)
        result = None
        if rows.kept:
            kept_prompts = [rows.prompts[row] for row in rows.kept]
            texts = rows.answers if rows.answers is not None else rows.responses
            result = darling_batch(
                [texts[row] for row in rows.kept],
                quality[rows.kept],
                kept_prompts,
                self.judge,
                self.settings,
                known=known,
                logprobs=[rows.logprobs[row] for row in rows.kept] if rows.logprobs else None,
            )
            reward[rows.kept], diversity[rows.kept] = result.reward, result.diversity
            self._batches.append((result, kept_prompts))
        self._seconds += time.perf_counter() - start
        return DarlingOutcome(reward=reward, diversity=diversity, result=result)

    def write(self, batch: Any, rows: RolloutRows, outcome: DarlingOutcome) -> None:
        """The DARLING reward into `total_reward`, quality and diversity next to it."""
        rewards = rows.rewards
        batch[QUALITY_KEY] = rewards.clone()
        batch[DIVERSITY_KEY] = torch.as_tensor(outcome.diversity, dtype=rewards.dtype)
        batch["total_reward"] = torch.as_tensor(outcome.reward, dtype=rewards.dtype).to(
            rewards.device
        )

    def pop_metrics(self) -> dict[str, float]:
        """`metrics.darling_step_metrics` of the batches since the last call (the names the
        TRL engine logs too; advantage_abs_mean is DARLING's advantage, the one NeMo-RL
        trains on when the config is consistent), then reset; empty if apply never ran."""
        if not self._batches:
            return {}
        out = darling_step_metrics(
            self._batches,
            semantic=self.settings.partitions,
            seconds=self._seconds,
            judge=usage_since(self._judge_before, judge_usage(self.judge)),
        )
        if self.stream is not None:  # of pairs_judged, how many while the rollout still ran
            out["pairs_judged_during_generation"] = float(self._streamed_pairs)
        if self.prefix_reporting:  # ... of which on the settled words of unfinished ones
            out["pairs_judged_on_settled_words"] = float(self._settled_pairs)
            out["responses_settled_early"] = float(self._settled_early)
        self._reset()
        return out
