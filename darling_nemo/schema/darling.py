"""The `darling:` section: how rewards become DARLING rewards and advantages.

Read by both engines (the TRL reward adapter, the NeMo-RL reward hook), `darling-score` and
the planners. Defaults reproduce the reference code (facebookresearch/darling).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal

from pydantic import Field, ValidationError, create_model, model_validator
from pydantic.fields import FieldInfo

from darling_nemo import methods
from darling_nemo.core import (
    Baseline,
    DarlingSettings,
    Diversity,
    JudgeRounds,
    PartitionScope,
    QualityShift,
)
from darling_nemo.methods.base import INPUT_WORDS, missing_inputs
from darling_nemo.registries import DEFAULT_PLUGIN_PATH
from darling_nemo.schema.base import (
    ConfigError,
    Strict,
    format_validation_error,
    import_configured_plugins,
    rebuild_models,
)
from darling_nemo.schema.judges import (
    JudgeConfig,
    LexicalJudgeConfig,
    judge_gives,
    kinds_giving,
)

# The names `method` and `fusion` allow and the keys the methods declare, as the method
# registry holds them now (darling_nemo/methods/); `_follow_registry` keeps them so.
MethodName = Literal[methods.method_names()]
FusionName = Literal[methods.fusion_names()]


class DarlingSection(Strict):
    """The `darling:` keys every method shares; `DarlingConfig` adds the methods' own keys."""

    enabled: bool = True  # false = plain GRPO rewards (quality only) through the same path
    # darling: fused quality and diversity. The rivals (docs/rivals.md): pass_at_k, the
    # analytic pass@k advantage (binary rewards); outcome, quality minus a penalty for each
    # repeat of a final answer in the group (needs answer extraction: math, the dice task).
    # Each is a module of darling_nemo/methods/, with its keys (k, outcome_coef, ...).
    method: MethodName = "darling"
    diversity: Diversity = Diversity.SEMANTIC
    ngram: int = Field(4, ge=1)
    floor: float = Field(0.1, ge=0.0, le=1.0)  # reference floor; 0 allowed (paper formula)
    partition_scope: PartitionScope = PartitionScope.ALL
    fusion: FusionName = "multiplicative"  # method darling: methods/darling.py, gdpo.py
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
    # Modules of your own imported before the config is read, each registering a method,
    # judge kind or task when imported (docs/your-own-task.md): import paths, looked for
    # first in the folders of plugin_path (relative: to the working directory).
    plugins: list[str] = Field(default_factory=list)
    plugin_path: list[str] = Field(default_factory=lambda: list(DEFAULT_PLUGIN_PATH))

    @model_validator(mode="after")
    def _method_applies(self) -> DarlingSection:
        """Refuse settings a method cannot honour, naming the keys (one message each)."""
        method = methods.method(self.method)
        problems = []
        if not method.uses_fusion:
            if not self.enabled:
                problems.append(
                    f"enabled=false is plain GRPO, but method={self.method}: set "
                    "enabled=true (or leave method unset for GRPO)"
                )
            if self.fusion != "multiplicative":
                problems.append(
                    f"fusion={self.fusion} applies to method darling only, not method={self.method}"
                )
        if method.config_problems is not None:
            problems += method.config_problems(dict(self))
        # With the lexical rules a task may bring its own judge (the dice task's, with
        # embeddings): the engines' checks, which see the task, decide then.
        if not isinstance(self.judge, LexicalJudgeConfig):
            problems += [p for p in [inputs_problem(self, "")] if p]
        fusion = methods.fusion(self.fusion)
        fused = method.uses_fusion and self.enabled and fusion.normalised
        what = f"method={self.method}" if method.normalised else f"fusion={self.fusion}"
        if (method.normalised or fused) and self.normalize_std:
            problems.append(
                f"normalize_std=true with {what}: its advantages are normalised already; "
                "set normalize_std=false (NeMo-RL: grpo.normalize_rewards=false)"
            )
        if (method.normalised or fused) and self.baseline is not Baseline.MEAN:
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
        answers = methods.method(self.method).answer_classes
        return self.diversity == Diversity.SEMANTIC and not answers

    def settings(self) -> DarlingSettings:
        """The plain-value knobs the pure core takes."""
        return DarlingSettings(
            diversity=self.diversity,
            ngram=self.ngram,
            floor=self.floor,
            partition_scope=self.partition_scope,
            fusion=self.fusion if self.enabled else "quality_only",
            quality_shift=self.quality_shift,
            baseline=self.baseline,
            normalize_std=self.normalize_std,
            std_epsilon=self.std_epsilon,
            threshold=self.judge.threshold,
            judge_rounds=self.judge_rounds,
            method=self.method,
            keys={key.name: getattr(self, key.name) for key in methods.all_keys()},
        )


def _field(key: methods.Key) -> Any:
    bounds = {"ge": key.ge, "gt": key.gt, "le": key.le}
    return (type(key.default), Field(key.default, description=key.doc, **bounds))


# The section: the shared keys, then each registered method's and fusion's own.
DarlingConfig = create_model(
    "DarlingConfig",
    __base__=DarlingSection,
    __module__=__name__,
    __doc__="How rewards become DARLING rewards and advantages. See docs/fidelity.md.",
    **{key.name: _field(key) for key in methods.all_keys()},
)


def _follow_registry() -> None:
    """Make the section hold what the method registry holds now: the names `method` and
    `fusion` allow and, after the shared keys, each registered entry's own keys (in
    registration order); then rebuild the models that hold the section. Called by the
    registry after each registration and removal (a key that is a shared key is refused)."""
    keys = methods.all_keys()
    clash = sorted(set(DarlingSection.model_fields) & {key.name for key in keys})
    if clash:
        raise ValueError(f"method key(s) {clash} are darling: keys every method shares")
    for model in (DarlingSection, DarlingConfig):
        model.__pydantic_fields__["method"].annotation = Literal[methods.method_names()]
        model.__pydantic_fields__["fusion"].annotation = Literal[methods.fusion_names()]
    fields = DarlingConfig.__pydantic_fields__
    held = {name: info for name, info in fields.items() if name not in DarlingSection.model_fields}
    shared = {name: info for name, info in fields.items() if name not in held}
    fields.clear()
    fields.update(shared)
    for key in keys:
        fields[key.name] = held.get(key.name) or FieldInfo.from_annotated_attribute(*_field(key))
    rebuild_models()


methods.on_change(_follow_registry)


def group_size_problem(darling: DarlingSection, key: str, size_key: str, size: int) -> str | None:
    """Where the method's `group_size_key` (pass@k's k) exceeds the responses per prompt
    (`size_key`=`size`, the engine's), the problem naming both keys."""
    name = methods.method(darling.method).group_size_key
    if name is None or getattr(darling, name) <= size:
        return None
    title = methods.method(darling.method).title
    return (
        f"{key}.{name}={getattr(darling, name)} is more than {size_key}={size}: {title} "
        f"needs {name} <= the responses per prompt"
    )


def inputs_problem(darling: DarlingSection, key: str, task_gives: Collection[str] = ()) -> str:
    """Where neither the engines, the configured judge nor the task (`task_gives`) gives an
    input `darling.method` declares (`Method.inputs`), the problem naming the keys under
    `key` (the section's path; "" inside it); "" where the run gives them all."""
    method = methods.method(darling.method)
    missing = missing_inputs(method, judge_gives(darling.judge) | set(task_gives))
    if not missing:
        return ""
    p = f"{key}." if key else ""
    givers = kinds_giving(missing[0])
    fix = f"set {p}judge.kind={' or '.join(givers)}" if givers else "no judge kind gives it"
    return (
        f"{p}method={darling.method} needs {INPUT_WORDS.get(missing[0], missing[0])}: {fix} "
        f"({p}judge.kind={darling.judge.kind} gives none)"
    )


def validate_darling(section: dict[str, Any] | None, prefix: str = "darling") -> DarlingSection:
    """Validate a raw `darling:` mapping (its plugins imported first); raise ConfigError
    naming every bad key path."""
    import_configured_plugins(section)
    try:
        return DarlingConfig.model_validate(section or {})
    except ValidationError as err:
        raise ConfigError(format_validation_error(err, prefix, DarlingConfig)) from None
