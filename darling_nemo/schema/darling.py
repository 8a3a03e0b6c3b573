"""The `darling:` section: how rewards become DARLING rewards and advantages.

Read by both engines (the TRL reward adapter, the NeMo-RL reward hook), `darling-score` and
the planners. Defaults reproduce the reference code (facebookresearch/darling).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, model_validator

from darling_nemo.core import (
    Baseline,
    DarlingSettings,
    Diversity,
    Fusion,
    JudgeRounds,
    Method,
    PartitionScope,
    QualityShift,
)
from darling_nemo.schema.base import ConfigError, Strict, format_validation_error
from darling_nemo.schema.judges import JudgeConfig, LexicalJudgeConfig


class DarlingConfig(Strict):
    """How rewards become DARLING rewards and advantages. See docs/fidelity.md."""

    enabled: bool = True  # false = plain GRPO rewards (quality only) through the same path
    # darling: fused quality and diversity. The rivals (docs/rivals.md): pass_at_k, the
    # analytic pass@k advantage (binary rewards); outcome, quality minus a penalty for each
    # repeat of a final answer in the group (needs answer extraction: math, the dice task).
    method: Method = Method.DARLING
    k: int = Field(4, ge=1)  # method pass_at_k: the k of pass@k; at most the group size
    # method outcome: reward = quality - outcome_coef * (other responses with the same
    # answer) / n; the paper's per-response term, placed before the group baseline and with
    # an untuned coefficient (rivals.outcome_penalty says how it differs from the paper).
    outcome_coef: float = Field(0.5, ge=0.0)
    diversity_weight: float = Field(1.0, ge=0.0)  # fusion gdpo: z(q) + diversity_weight z(d)
    diversity: Diversity = Diversity.SEMANTIC
    ngram: int = Field(4, ge=1)
    floor: float = Field(0.1, ge=0.0, le=1.0)  # reference floor; 0 allowed (paper formula)
    partition_scope: PartitionScope = PartitionScope.ALL
    fusion: Fusion = Fusion.MULTIPLICATIVE
    quality_shift: QualityShift = QualityShift.NONE
    baseline: Baseline = Baseline.MEAN
    normalize_std: bool = False  # DARLING drops std normalisation; GRPO baselines turn it on
    std_epsilon: float = Field(1e-6, gt=0.0)
    judge: JudgeConfig = Field(default_factory=LexicalJudgeConfig)
    # Same classes either way. waves: pairs already joined are never judged (fewer pairs, up
    # to n-1 judge calls per step); one: every pair in one call, as the reference (more pairs,
    # one round trip: for a served judge whose latency dominates).
    judge_rounds: JudgeRounds = JudgeRounds.WAVES
    # NeMo-RL engine: the judge runs while NeMo-RL computes log-probabilities and training
    # waits for it; same rewards and advantages bit for bit (docs/judge-cost.md). false:
    # the judge runs before the baseline, on the step's critical path.
    overlap: bool = True
    # NeMo-RL engine with vLLM's async engine (per-sample rollouts): pairs are judged as
    # their responses finish, while the rest of the rollout still generates; the classes
    # are the synchronous ones (docs/judge-cost.md). Needs diversity semantic, partition
    # scope all and judge_rounds waves; otherwise (printed) the judge waits for the rollout.
    judge_during_generation: bool = True
    # With judge_during_generation and a judge that reads only the first K words of each
    # response (served or cross_encoder, truncation words, no fallback): the vLLM workers
    # report a response as soon as its first K words are settled, and its pairs are judged
    # then, not when it finishes; a verdict is kept only if the final response gives the
    # judge the same input (docs/judge-cost.md). Otherwise (printed) responses join when
    # they finish.
    prefix_judging: bool = True

    @model_validator(mode="after")
    def _method_applies(self) -> DarlingConfig:
        """Refuse settings a method cannot honour, naming the keys (one message each)."""
        problems = []
        if self.method is not Method.DARLING:
            if not self.enabled:
                problems.append(
                    f"enabled=false is plain GRPO, but method={self.method.value}: set "
                    "enabled=true (or leave method unset for GRPO)"
                )
            if self.fusion is not Fusion.MULTIPLICATIVE:
                problems.append(
                    f"fusion={self.fusion.value} applies to method darling only, not "
                    f"method={self.method.value}"
                )
        if self.method is Method.OUTCOME and self.partition_scope is not PartitionScope.ALL:
            problems.append(
                "partition_scope=correct applies to method darling: outcome exploration "
                "counts repeats among every response's answer"
            )
        already_normalised = self.method is Method.PASS_AT_K or (
            self.method is Method.DARLING and self.enabled and self.fusion is Fusion.GDPO
        )
        what = "method=pass_at_k" if self.method is Method.PASS_AT_K else "fusion=gdpo"
        if already_normalised and self.normalize_std:
            problems.append(
                f"normalize_std=true with {what}: its advantages are normalised already; "
                "set normalize_std=false (NeMo-RL: grpo.normalize_rewards=false)"
            )
        if already_normalised and self.baseline is not Baseline.MEAN:
            problems.append(
                f"baseline={self.baseline.value} with {what}: its advantages have mean 0 per "
                "group already and a leave-one-out baseline would rescale them; set "
                "baseline=mean"
            )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def calls_judge(self) -> bool:
        """Whether the pair judge (darling.judge) is ever asked (the ngram ablation never
        asks it; outcome exploration asks the task's answer judge instead): only then is a
        judge built and a served judge probed."""
        return self.diversity == Diversity.SEMANTIC and self.method is not Method.OUTCOME

    def settings(self) -> DarlingSettings:
        """The plain-value knobs the pure core takes."""
        return DarlingSettings(
            diversity=self.diversity,
            ngram=self.ngram,
            floor=self.floor,
            partition_scope=self.partition_scope,
            fusion=self.fusion if self.enabled else Fusion.QUALITY_ONLY,
            quality_shift=self.quality_shift,
            baseline=self.baseline,
            normalize_std=self.normalize_std,
            std_epsilon=self.std_epsilon,
            threshold=self.judge.threshold,
            judge_rounds=self.judge_rounds,
            method=self.method,
            k=self.k,
            outcome_coef=self.outcome_coef,
            diversity_weight=self.diversity_weight,
        )


def validate_darling(section: dict[str, Any] | None, prefix: str = "darling") -> DarlingConfig:
    """Validate a raw `darling:` mapping; raise ConfigError naming every bad key path."""
    try:
        return DarlingConfig.model_validate(section or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, DarlingConfig)) from None
