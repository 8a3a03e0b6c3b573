"""What every diversity method shares: the batch it reads, the shape of a registry entry,
the config keys it declares, and the finite-values check (numpy and stdlib only, like the core).

A method turns one `GroupBatch` (quality, diversity, classes, groups and the optional inputs
it declares) into rewards; the core (`core.darling_batch`) computes the partition and the
advantages around it and asks the registry (`methods.registry`) which method and which
fusion a config names. A method whose reward is one formula per group writes only that
formula and wraps it in `each_group`, the one loop over a batch's groups.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


def check_finite(values: Sequence[float], name: str) -> np.ndarray:
    """Return `values` as a float array; raise naming the first non-finite index."""
    arr = np.asarray(values, dtype=float)
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise ValueError(f"{name}[{int(bad[0])}] is {arr[bad[0]]}: {name} must be finite")
    return arr


class Settings(Protocol):
    """What a method reads of the core's `DarlingSettings` (kept structural, so this package
    does not import the core that imports it)."""

    fusion: str
    quality_shift: str
    std_epsilon: float
    keys: Mapping[str, Any]  # every registered method's config keys -> value


LOGPROBS = "logprobs"
"""Input: each response's mean token log-probability under the policy that sampled it (the
engines give it: TRL computes it, NeMo-RL reads vLLM's generation log-probs)."""

EMBEDDINGS = "embeddings"
"""Input: each response's embedding, one row each, from a judge with an `embed` method (the
embedding judge, or the miniature's multiset judge)."""

ANSWERS = "answers"
"""Input: each response's final answer, compared by the task's answer judge: the batch's
`class_ids` are then classes of final answers (only exact duplicates decided without the
judge), not of whole responses by `darling.judge`. The task gives them; which tasks can is
checked with the task (`Method.needs`)."""

TASK_INPUTS = frozenset({ANSWERS})
"""The inputs a task gives (its final answers), checked against the task, not the judge."""

ENGINE_INPUTS = frozenset({LOGPROBS})
"""The inputs the engines (and darling-score, from its file) give a method that declares
them; any other declared input must come from the configured judge (what its config class
declares in `gives`), checked at the config phase by `missing_inputs`."""

INPUT_WORDS = {
    LOGPROBS: "each response's log-probability",
    EMBEDDINGS: "response embeddings",
    ANSWERS: "final answers",
}
"""How messages name an input (one not listed is named as it is declared)."""


@dataclass(frozen=True)
class GroupBatch:
    """What a method reads: one batch of responses, or one group of it (`group`).

    quality, diversity, class_ids: one value per response (class ids are of meaning, or of
    final answers for a method that declares `ANSWERS`); groups: each group's rows. The
    optional inputs are given exactly when the method declares them in `Method.inputs`.
    """

    quality: np.ndarray
    diversity: np.ndarray
    class_ids: np.ndarray
    groups: Sequence[np.ndarray]
    logprobs: np.ndarray | None = None  # LOGPROBS
    embeddings: np.ndarray | None = None  # EMBEDDINGS

    def group(self, rows: np.ndarray) -> GroupBatch:
        """The responses `rows` as a batch of one group (every array cut to those rows)."""

        def cut(values: np.ndarray | None) -> np.ndarray | None:
            return None if values is None else values[rows]

        return GroupBatch(
            self.quality[rows],
            self.diversity[rows],
            self.class_ids[rows],
            (np.arange(len(rows)),),
            logprobs=cut(self.logprobs),
            embeddings=cut(self.embeddings),
        )


RewardFn = Callable[[GroupBatch, Settings], np.ndarray]
"""(the batch, settings) -> one reward per response of the batch."""


def each_group(formula: RewardFn) -> RewardFn:
    """A method's rewards from its per-group `formula` (one group's `GroupBatch`, settings ->
    that group's rewards): the one loop over a batch's groups that such a method runs."""

    def rewards(batch: GroupBatch, settings: Settings) -> np.ndarray:
        reward = np.zeros(batch.quality.size)
        for rows in batch.groups:
            reward[rows] = formula(batch.group(rows), settings)
        return reward

    rewards.__doc__ = formula.__doc__
    return rewards


GroupFn = Callable[[np.ndarray, np.ndarray, Settings], np.ndarray]
"""One group's (quality, diversity, settings) -> its rewards, for a fusion of method darling."""


@dataclass(frozen=True)
class Key:
    """A config key of the `darling:` section that a method or fusion reads. Its type is the
    default's; the bounds are pydantic's (`ge`, `gt`, `le`), so a bad value is refused
    with the schema's usual `darling.<name>: must be >= ...` line."""

    name: str
    default: int | float | bool | str
    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None


@dataclass(frozen=True)
class Method:
    """One value of `darling.method`: how a response's reward is made.

    Only `name`, `title` and `rewards` are needed; the rest states what the method asks of
    the config, the task and the engines, which read it here instead of naming the method.
    """

    name: str
    title: str  # in messages: "pass@k training needs k <= the responses per prompt"
    rewards: RewardFn  # a whole batch's; `each_group(formula)` for a per-group formula
    keys: tuple[Key, ...] = ()
    # Whether `darling.fusion` and `darling.enabled` apply (only DARLING fuses).
    uses_fusion: bool = False
    # Its rewards are normalised advantages already: normalize_std and a leave-one-out
    # baseline are refused.
    normalised: bool = False
    # Quality must be 0 or 1 (a verifier's); an engine must not rescale it.
    binary_rewards: bool = False
    # What the task must give beyond a score ("" = any reward, graded ones too), and the
    # words the TRL check adds after it.
    needs: str = ""
    needs_detail: str = ""
    # A key that must be at most the responses per prompt (checked against the engine's).
    group_size_key: str | None = None
    # Refuses a batch's quality before anything is computed (raises ValueError).
    check_quality: Callable[[np.ndarray], None] | None = None
    # The section's values (key -> value) -> problems naming the keys, one line each.
    config_problems: Callable[[Mapping[str, Any]], list[str]] | None = None
    # The optional inputs its `GroupBatch` must carry (LOGPROBS, EMBEDDINGS, ANSWERS): a
    # config whose engine, judge or task does not give one is refused (`missing_inputs`),
    # and `method_inputs` gathers them for each batch.
    inputs: tuple[str, ...] = ()

    @property
    def answer_classes(self) -> bool:
        """Each group is cut into classes of final answers (it declares `ANSWERS`)."""
        return ANSWERS in self.inputs

    @property
    def task_needs(self) -> str:
        """What the task must give beyond a score, in words ("" = any reward): `needs`, or
        final answers where it declares `ANSWERS`."""
        return self.needs or (INPUT_WORDS[ANSWERS] if self.answer_classes else "")


def missing_inputs(method: Method, judge_gives: Collection[str]) -> list[str]:
    """The inputs `method` declares that neither the engines (`ENGINE_INPUTS`), the task
    (`TASK_INPUTS`, checked with the task) nor a judge giving `judge_gives` gives (empty: the
    run gives them all)."""
    given = ENGINE_INPUTS | TASK_INPUTS | set(judge_gives)
    return [name for name in method.inputs if name not in given]


def method_inputs(
    method: Method, responses: Sequence[str], judge: Any, logprobs: Sequence[float] | None
) -> dict[str, np.ndarray]:
    """The arrays `method.inputs` names, for a batch of `responses`: the engine's `logprobs`
    and the embeddings of `judge.embed` (texts -> {text: vector}). A missing one is refused
    in one line naming what gives it."""
    inputs: dict[str, np.ndarray] = {}
    if LOGPROBS in method.inputs:
        if logprobs is None:
            raise ValueError(
                f"darling.method={method.name} needs each response's log-probability under the "
                f"policy ({LOGPROBS}) and this caller gave none"
            )
        values = check_finite(logprobs, LOGPROBS)
        if values.size != len(responses):
            raise ValueError(f"{values.size} {LOGPROBS} for {len(responses)} responses")
        inputs[LOGPROBS] = values
    if EMBEDDINGS in method.inputs:
        embed = getattr(judge, "embed", None)
        if embed is None:
            raise ValueError(
                f"darling.method={method.name} needs response embeddings: set darling.judge "
                "to kind embedding (the judge here gives none)"
            )
        vectors = embed(list(responses))
        rows = [np.asarray(vectors[text], dtype=float).reshape(-1) for text in responses]
        inputs[EMBEDDINGS] = np.stack(rows) if rows else np.zeros((0, 0))
    return inputs


@dataclass(frozen=True)
class Fusion:
    """One value of `darling.fusion`: how method darling turns one group's quality and
    diversity into rewards (`group`), then optionally the whole batch's (`batch`)."""

    name: str
    group: GroupFn
    batch: Callable[[np.ndarray], np.ndarray] | None = None
    keys: tuple[Key, ...] = ()
    normalised: bool = False  # as Method.normalised
