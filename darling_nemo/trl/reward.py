"""The TRL reward adapter: DARLING enters TRL here and nowhere else.

TRL sums its reward functions (with `reward_weights`) and turns the sum into advantages
itself: A = r - mean_group(r), divided by the group std unless `scale_rewards="none"`.
`DarlingReward` is the one reward function TRL sees. It calls the user's quality reward
function(s) the way TRL would (same keyword arguments, weighted sum, None skipped), groups
the batch by prompt, runs `core.darling_batch` and returns the core's ADVANTAGE. Each
group's advantages already have mean 0 (under either baseline, with or without std
normalisation), so with `scale_rewards="none"` TRL's own baseline subtraction leaves them
unchanged: the advantage the policy sees is exactly the core's, for every `darling:`
setting, and the DARLING math lives only in core.py. (Handing TRL the fused reward
q * Norm(d) instead gives the same result only for the default mean baseline without std
normalisation.) Consequently TRL's own `reward` log column is ~0; the real quantities are
logged as `darling/*` (`metrics.darling_step_metrics`, the names NeMo-RL runs log too).

Loss: `loss_type: bnpo` averages the per-token loss over all tokens of a micro-batch and
divides by the gradient-accumulation steps, which is verl's "token-mean" as the reference
runs it; `dapo` normalises by the tokens of the whole rollout batch (identical when one
micro-batch is the whole batch). TRL's "grpo" (mean per sequence, then over sequences)
and "dr_grpo" are not token-mean and are refused (`DarlingReward.check_trainer_args`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from darling_nemo.console import say
from darling_nemo.core import DarlingBatch, PairJudge, darling_batch
from darling_nemo.metrics import (
    TimedJudge,
    darling_step_metrics,
    judge_usage,
    usage_since,
)
from darling_nemo.schema import DarlingConfig
from darling_nemo.tasks.rows import completion_text
from darling_nemo.trl.logprobs import LOGPROBS_FIELD
from darling_nemo.user_rewards import answer_keys

TOKEN_LEVEL_LOSSES = ("bnpo", "dapo")


def conversational(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose "prompt" is one user message, so TRL renders the policy's chat template."""
    return [{**row, "prompt": [{"role": "user", "content": row["prompt"]}]} for row in rows]


class DarlingReward:
    """A TRL reward function `(prompts, completions, **kwargs) -> list[float]` for DARLING.

    quality_funcs: TRL reward functions measuring quality alone (e.g. a verifier); they
    receive every keyword argument TRL passes (dataset columns, completion_ids, ...).
    darling: the validated `darling:` section. group_size: TRL's `num_generations`.
    judge: the pair judge, usually `judges.make_judge(darling.judge)` (None: lexical rules
    only). weights: like TRL's `reward_weights`; quality = sum_k w_k * q_k over the
    functions that did not return None. answers: for a method with answer classes, a
    TRL-style function giving each completion's final answer (None: no answer); the
    partition then compares the answers exactly (`user_rewards.answer_keys`), not the texts.

    Rows come from TRL as `group_size` consecutive completions of one prompt; the adapter
    checks that every block has one prompt and uses the block index as the group id (so two
    groups of the same prompt text in one batch stay two groups, as TRL's baseline treats
    them).

        judge = make_judge(darling_cfg.judge)
        reward = DarlingReward(my_verifier, darling_cfg, group_size=8, judge=judge)
        trainer = GRPOTrainer(model, reward_funcs=[reward], args=GRPOConfig(
            num_generations=8, scale_rewards="none", loss_type="bnpo", ...), ...)
        reward.check_trainer_args(trainer.args, trainer.reward_funcs)
    """

    __name__ = "darling"  # TRL logs reward functions by name

    def __init__(
        self,
        quality_funcs: Callable[..., Sequence[float | None]]
        | Sequence[Callable[..., Sequence[float | None]]],
        darling: DarlingConfig,
        group_size: int,
        *,
        judge: PairJudge | None,
        weights: Sequence[float] | None = None,
        answers: Callable[..., Sequence[str | None]] | None = None,
    ) -> None:
        self.quality_funcs = (
            list(quality_funcs) if isinstance(quality_funcs, Sequence) else [quality_funcs]
        )
        if not self.quality_funcs:
            raise ValueError("DarlingReward needs at least one quality reward function")
        self.weights = [1.0] * len(self.quality_funcs) if weights is None else list(weights)
        if len(self.weights) != len(self.quality_funcs):
            raise ValueError(
                f"{len(self.weights)} weights for {len(self.quality_funcs)} quality functions"
            )
        if group_size < 2:
            raise ValueError(f"group_size must be >= 2, got {group_size}")
        self.darling = darling
        self.settings = darling.settings()
        self.answers = answers
        self.group_size = group_size
        self.judge = TimedJudge(judge) if judge is not None else None
        self.last_batch: DarlingBatch | None = None
        self.last_metrics: dict[str, float] = {}
        self.last_logprobs: Sequence[float] | None = None  # what darling_batch was given
        self._warned_no_log_metric = False

    def quality(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> np.ndarray:
        """Weighted sum of the quality functions, None skipped (TRL's nansum)."""
        total = np.zeros(len(completions))
        scored = np.zeros(len(completions), dtype=bool)
        for func, weight in zip(self.quality_funcs, self.weights, strict=True):
            values = list(func(prompts=prompts, completions=completions, **kwargs))
            name = getattr(func, "__name__", type(func).__name__)
            if len(values) != len(completions):
                raise ValueError(
                    f"quality function {name} returned {len(values)} values for "
                    f"{len(completions)} completions"
                )
            for i, value in enumerate(values):
                if value is None:
                    continue
                if not math.isfinite(float(value)):
                    raise ValueError(f"quality function {name} returned {value} for completion {i}")
                total[i] += weight * float(value)
                scored[i] = True
        if not scored.all():
            row = int(np.flatnonzero(~scored)[0])
            raise ValueError(
                f"every quality function returned None for completion {row}: DARLING needs a "
                "quality for every response of a group"
            )
        return total

    def group_ids(self, prompts: Sequence[Any]) -> list[Hashable]:
        """Block index of each row; every block of `group_size` rows must share its prompt."""
        if len(prompts) % self.group_size:
            raise ValueError(
                f"{len(prompts)} completions is not a multiple of group_size={self.group_size}: "
                "each process must see whole groups (run the TRL engine on one process)"
            )
        for start in range(0, len(prompts), self.group_size):
            block = prompts[start : start + self.group_size]
            if any(p != block[0] for p in block):
                raise ValueError(
                    f"rows {start}..{start + self.group_size - 1} mix prompts: TRL must lay out "
                    f"num_generations={self.group_size} consecutive completions per prompt"
                )
        return [row // self.group_size for row in range(len(prompts))]

    def __call__(
        self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any
    ) -> list[float]:
        quality = self.quality(prompts, completions, **kwargs)
        started = time.perf_counter()
        judge_before = judge_usage(self.judge)
        if self.answers is not None:
            found = self.answers(prompts=prompts, completions=completions, **kwargs)
            texts = answer_keys(found)
        else:
            texts = [completion_text(c) for c in completions]
        group_ids = self.group_ids(prompts)
        logprobs = kwargs.get(LOGPROBS_FIELD)  # with_sequence_logprobs adds it where needed
        batch = darling_batch(
            texts, quality, group_ids, self.judge, self.settings, logprobs=logprobs
        )
        step_metrics = darling_step_metrics(
            [(batch, group_ids)],
            semantic=self.settings.partitions,
            seconds=time.perf_counter() - started,
            judge=usage_since(judge_before, judge_usage(self.judge)),
        )
        metrics = {f"darling/{name}": value for name, value in step_metrics.items()}
        self.last_batch, self.last_metrics, self.last_logprobs = batch, metrics, logprobs
        log_metric = kwargs.get("log_metric")  # recent TRL (1.16 does) passes it
        if log_metric is not None:
            for name, value in metrics.items():
                log_metric(name, value)
        elif "trainer_state" in kwargs and not self._warned_no_log_metric:
            self._warned_no_log_metric = True
            say(  # in training: below the progress bar, not on its line
                "warning: this TRL does not pass `log_metric` to reward functions: the "
                "darling/* metrics are not logged (they stay in DarlingReward.last_metrics); "
                "TRL 1.16 passes it"
            )
        return batch.advantage.tolist()

    def check_trainer_args(self, args: Any, reward_funcs: Sequence[Any] | None = None) -> None:
        """Refuse TRL settings that would change DARLING's advantage; name the keys.

        `args` is a trl.GRPOConfig; `reward_funcs` the list the GRPOTrainer was given.
        """
        problems = []
        if str(args.scale_rewards).lower() not in ("none", "false"):
            problems.append(
                f"GRPOConfig.scale_rewards={args.scale_rewards!r} would divide the advantages "
                "by a std again; set scale_rewards='none' (std normalisation is "
                f"darling.normalize_std, now {self.darling.normalize_std})"
            )
        if args.multi_objective_aggregation != "sum_then_normalize":
            problems.append(
                f"GRPOConfig.multi_objective_aggregation={args.multi_objective_aggregation!r} "
                "re-normalises the rewards; use 'sum_then_normalize'"
            )
        if args.loss_type not in TOKEN_LEVEL_LOSSES:
            problems.append(
                f"GRPOConfig.loss_type={args.loss_type!r} is not token-level; use one of "
                f"{TOKEN_LEVEL_LOSSES} (the reference aggregates by token-mean)"
            )
        if args.num_generations != self.group_size:
            problems.append(
                f"GRPOConfig.num_generations={args.num_generations} but the DARLING adapter "
                f"groups by group_size={self.group_size}"
            )
        if args.world_size != 1:
            problems.append(
                f"world_size={args.world_size}: TRL scores each process's rows separately, so a "
                "group may be split; run the TRL engine on one process (NeMo-RL for more)"
            )
        if reward_funcs is not None and (len(reward_funcs) != 1 or reward_funcs[0] is not self):
            problems.append(
                "reward_funcs must be [this DarlingReward] alone: other reward functions would "
                "be added to DARLING's advantage; pass them to DarlingReward as quality_funcs"
            )
        weights = getattr(args, "reward_weights", None)
        if weights is not None and list(weights) != [1.0]:
            problems.append(
                f"GRPOConfig.reward_weights={weights}: weight the quality functions in "
                "DarlingReward(weights=...) instead"
            )
        if problems:
            raise ValueError("TRL settings contradict DARLING:\n  " + "\n  ".join(problems))
