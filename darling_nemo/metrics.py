"""Small shared metrics: unbiased pass@k (Chen et al., 2021) and its curve over k, and the
`darling/*` scalars that both training engines log (`darling_step_metrics`, one function so
the TRL and NeMo-RL runs of one config are compared under the same names)."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np

from darling_nemo.core import DarlingBatch, PairJudge, group_indices
from darling_nemo.judge_stream import prefix_words


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c are correct: 1 - C(n-c, k) / C(n, k).

    Computed as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomials, so
    it is exact to float precision for n in the thousands.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def default_ks(n: int) -> list[int]:
    """k = 1, 2, 4, ... up to n, and n itself when it is not a power of two."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    ks = [1 << e for e in range(n.bit_length()) if (1 << e) <= n]
    return ks if ks[-1] == n else [*ks, n]


def pass_at_k_curve(n: int, c: int, ks: Sequence[int]) -> np.ndarray:
    """pass_at_k(n, c, k) for every k in `ks` at once (same product form, one array op).

    For k <= n - c every factor 1 - k/i (i > n - c >= k) lies in (0, 1], so the product
    never changes sign; k > n - c gives exactly 1.
    """
    k = np.asarray(ks, dtype=np.float64)
    if not (0 <= c <= n) or k.size == 0 or k.min() < 1 or k.max() > n:
        raise ValueError(f"pass_at_k_curve needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c}")
    i = np.arange(n - c + 1, n + 1, dtype=np.float64)
    sure = k > n - c
    factors = 1.0 - np.where(sure, 0.0, k)[:, None] / i[None, :]
    return np.where(sure, 1.0, 1.0 - factors.prod(axis=1))


def mean_pass_at_k(counts: Sequence[tuple[int, int]], ks: Sequence[int]) -> dict[int, float]:
    """Mean over problems of pass@k, from (n, c) per problem; every n must be >= max(ks)."""
    if not counts:
        raise ValueError("mean_pass_at_k needs at least one problem")
    curves = np.stack([pass_at_k_curve(n, c, ks) for n, c in counts])
    return {int(k): float(v) for k, v in zip(ks, curves.mean(axis=0), strict=True)}


def distinct_correct_per_group(
    class_ids: Sequence[int], quality: Sequence[float], group_ids: Sequence[Hashable]
) -> list[int]:
    """Per group (in order of first appearance of its id): distinct classes among its
    responses with quality > 0.

    `class_ids` are classes within each group (core.DarlingBatch.class_ids); rows of a group
    need not be contiguous. A class id < 0 marks a response outside any class (`diversity:
    ngram` partitions nothing): each such correct response counts as one answer of its own.
    """
    classes = np.asarray(class_ids)
    correct = np.asarray(quality, dtype=np.float64) > 0
    if not (classes.size == correct.size == len(group_ids)):
        raise ValueError(
            f"lengths differ: {classes.size} class ids, {correct.size} qualities, "
            f"{len(group_ids)} group ids"
        )
    counts = []
    for rows in group_indices(group_ids):
        ids = classes[rows[correct[rows]]]
        counts.append(len(set(ids[ids >= 0].tolist())) + int((ids < 0).sum()))
    return counts


# ---------------------------------------------------------------------------------------------
# The darling/* training metrics (both engines)
# ---------------------------------------------------------------------------------------------


class TimedJudge:
    """A PairJudge that counts its calls, seconds and raised errors (see `judge_usage`)."""

    def __init__(self, judge: PairJudge) -> None:
        self.judge = judge
        self.calls = self.errors = 0
        self.seconds = 0.0

    @property
    def prefix_words(self) -> int | None:  # judge_stream.prefix_words of the wrapped judge
        return prefix_words(self.judge)

    @property
    def embed(self) -> Callable[[Sequence[str]], Mapping[str, Any]] | None:
        """The wrapped judge's `embed` (texts -> {text: vector}), or None where it has none
        (a method with embeddings, DQO, asks for it: methods.base.method_inputs)."""
        return getattr(self.judge, "embed", None)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> Sequence[float]:
        start = time.perf_counter()
        self.calls += 1
        try:
            return self.judge(pairs)
        except Exception:
            self.errors += 1
            raise
        finally:
            self.seconds += time.perf_counter() - start


def judge_usage(judge: TimedJudge | None) -> dict[str, float]:
    """Running totals of a judge: judge_calls, judge_errors, judge_seconds (all 0 without a
    judge), and judge_<name> for each numeric counter in the wrapped judge's own `stats`
    dict (ServedJudge: requests, failed_requests, pairs, fallback_pairs)."""
    if judge is None:
        return {"judge_calls": 0.0, "judge_errors": 0.0, "judge_seconds": 0.0}
    stats = getattr(judge.judge, "stats", None)
    own = {f"judge_{k}": float(v) for k, v in stats.items()} if isinstance(stats, dict) else {}
    return {
        **own,
        "judge_calls": float(judge.calls),
        "judge_errors": float(judge.errors),
        "judge_seconds": judge.seconds,
    }


def usage_since(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """`after - before` per counter of `judge_usage` (a counter new since `before` counts from 0)."""
    return {key: value - before.get(key, 0.0) for key, value in after.items()}


def darling_step_metrics(
    batches: Sequence[tuple[DarlingBatch, Sequence[Hashable]]],
    *,
    semantic: bool,
    seconds: float,
    judge: Mapping[str, float],
) -> dict[str, float]:
    """The DARLING scalars of one training step, logged as `darling/<name>` by both engines.

    batches: every (core.darling_batch result, its group ids) of the step (NeMo-RL's dynamic
    sampling may score several batches before one step). semantic: `darling.diversity ==
    "semantic"` (the class metrics exist only then). seconds: wall time of the DARLING
    computation (partition, judge, rewards, advantages; quality scoring not included).
    judge: this step's judge counters, `usage_since(...)` of `judge_usage`.

    Per response: quality_mean, correct_fraction (quality > 0), diversity_mean, reward_mean,
    advantage_abs_mean. Per group: num_groups, distinct_correct_per_group (mean of
    `distinct_correct_per_group`), and with semantic diversity classes_per_group (mean),
    classes_per_group_hist/<k> (share of groups with k classes, k = 1..largest group) and
    collapsed_group_share (share of groups of >= 2 responses that form a single class).
    Judging: pairs_judged, pairs_total, pairs_judged_fraction (0 when no pairs), seconds,
    and the `judge` counters.
    """
    if not batches:
        raise ValueError("darling_step_metrics needs at least one batch")

    def rows(field: str) -> np.ndarray:
        return np.concatenate([getattr(batch, field) for batch, _ in batches])

    quality = rows("quality")
    distinct_correct = [
        count
        for batch, group_ids in batches
        for count in distinct_correct_per_group(batch.class_ids, batch.quality, group_ids)
    ]
    sizes = np.asarray([n for batch, _ in batches for n in batch.group_sizes])
    pairs_judged = sum(batch.pairs_judged for batch, _ in batches)
    pairs_total = sum(batch.pairs_total for batch, _ in batches)
    out = {
        "quality_mean": float(quality.mean()),
        "correct_fraction": float((quality > 0).mean()),
        "diversity_mean": float(rows("diversity").mean()),
        "reward_mean": float(rows("reward").mean()),
        "advantage_abs_mean": float(np.abs(rows("advantage")).mean()),
        "num_groups": float(sizes.size),
        "distinct_correct_per_group": float(np.mean(distinct_correct)),
        "pairs_judged": float(pairs_judged),
        "pairs_total": float(pairs_total),
        "pairs_judged_fraction": pairs_judged / pairs_total if pairs_total else 0.0,
        "seconds": float(seconds),
    }
    if semantic:
        classes = np.asarray([k for batch, _ in batches for k in batch.num_classes])
        out["classes_per_group"] = float(classes.mean())
        for k in range(1, int(sizes.max()) + 1):
            out[f"classes_per_group_hist/{k}"] = float((classes == k).mean())
        multi = sizes >= 2
        out["collapsed_group_share"] = float((classes[multi] == 1).mean()) if multi.any() else 0.0
    out.update(judge)
    return out
