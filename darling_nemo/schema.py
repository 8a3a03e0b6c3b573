"""The typed schema of the `darling:` config section: every default lives here, once.

Defaults reproduce the reference code (facebookresearch/darling). Unknown keys are errors
whose message carries the key path (pydantic `extra="forbid"`), so a typo never trains the
wrong run. Call sites read attributes of the validated model, never `cfg.get(key, default)`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from darling_nemo.core import Baseline, DarlingSettings, Fusion, PartitionScope, QualityShift


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------------------------------------
# Judges: which semantic-equivalence classifier decides the undecided pairs
# ---------------------------------------------------------------------------------------------


class LexicalJudgeConfig(Strict):
    """No model: exact duplicates and the short-answer rule; everything else is distinct."""

    kind: Literal["lexical"] = "lexical"
    threshold: float = 0.5  # unused by the rules; kept so every judge has one


JudgeConfig = Annotated[LexicalJudgeConfig, Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------------
# The darling: section
# ---------------------------------------------------------------------------------------------


class DarlingConfig(Strict):
    """How rewards become DARLING rewards and advantages. See README "Configuration"."""

    enabled: bool = True  # false = plain GRPO rewards (quality only) through the same path
    diversity: Literal["semantic", "ngram"] = "semantic"
    ngram: int = Field(4, ge=1)
    floor: float = Field(0.1, ge=0.0, le=1.0)  # reference floor; 0 allowed (paper formula)
    partition_scope: PartitionScope = PartitionScope.ALL
    fusion: Fusion = Fusion.MULTIPLICATIVE
    quality_shift: QualityShift = QualityShift.NONE
    baseline: Baseline = Baseline.MEAN
    normalize_std: bool = False  # DARLING drops std normalisation; GRPO baselines turn it on
    std_epsilon: float = Field(1e-6, gt=0.0)
    judge: JudgeConfig = Field(default_factory=LexicalJudgeConfig)

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
        )


def format_validation_error(err: ValidationError, prefix: str = "") -> str:
    """All problems at once, one line each, as dotted key paths (`darling.judge.kind: ...`)."""
    lines = []
    for e in err.errors():
        path = ".".join(str(p) for p in (prefix, *e["loc"]) if p != "")
        lines.append(f"  {path}: {e['msg']}")
    return "invalid config:\n" + "\n".join(lines)


class ConfigError(ValueError):
    """A config problem, with the key path(s) in the message."""


def validate_darling(section: dict[str, Any] | None, prefix: str = "darling") -> DarlingConfig:
    """Validate a raw `darling:` mapping; raise ConfigError naming every bad key path."""
    try:
        return DarlingConfig.model_validate(section or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix)) from None
