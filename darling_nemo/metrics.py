"""Small shared metrics: unbiased pass@k (Chen et al., 2021) and its curve over k, and the
number of distinct correct answers per group that both training engines log."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from darling_nemo.core import group_indices


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
