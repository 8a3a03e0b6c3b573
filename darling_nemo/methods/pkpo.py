"""PKPO (`darling.method: pkpo`): Pass-at-k Policy Optimization (Walder and Karkhanis 2025,
arXiv 2505.15201), the unbiased pass@k (binary rewards) and maxg@k (graded rewards)
reward transformation, any k <= n; docs/rivals.md.

Not pass@k training (methods/pass_at_k.py, Chen et al. 2025): that one is the analytic,
std-normalised pass@k advantage of 0/1 rewards with its baseline built in; this one is a
gradient estimator's reward, graded rewards included, and the engines' group baseline
(and `normalize_std`) apply to it as to any reward.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from fractions import Fraction
from math import comb
from typing import Any

import numpy as np

from darling_nemo.methods.base import GroupBatch, Key, Method, Settings, each_group


class PkpoBaseline(StrEnum):
    NONE = "none"  # s_i: the paper's unbiased estimator, no baseline of its own
    LOO_MINUS_ONE = "loo_minus_one"  # s_i minus the same sum over the (k-1)-subsets of others


def _sorted_positions(g: np.ndarray) -> np.ndarray:
    """Each value's place when sorted ascending (ties in index order: any fixed order gives
    the same sums below, which depend on the values only)."""
    position = np.empty(g.size, dtype=np.int64)
    position[np.argsort(g, kind="stable")] = np.arange(g.size)
    return position


def max_sums_with(g: np.ndarray, k: int) -> np.ndarray:
    """For each i: the sum over the k-subsets I holding i of max_{j in I} g_j. With p_j the
    sorted place of j: i is the max of C(p_i, k-1) of them, and a j above i the max of
    C(p_j - 1, k-2) (the others below j, i excluded)."""
    p = _sorted_positions(g)
    out = np.zeros(g.size)
    for i in range(g.size):
        above = [j for j in range(g.size) if p[j] > p[i]]
        out[i] = comb(int(p[i]), k - 1) * g[i]
        if k >= 2:
            out[i] += sum(comb(int(p[j]) - 1, k - 2) * g[j] for j in above)
    return out


def max_sums_without(g: np.ndarray, k: int) -> np.ndarray:
    """For each i: the sum over the (k-1)-subsets J of the OTHER values of max_{j in J} g_j
    (0 when k = 1: the empty subset's max is taken as 0)."""
    out = np.zeros(g.size)
    if k < 2:
        return out
    for i in range(g.size):
        others = np.sort(np.delete(g, i))  # the m-th smallest is the max of C(m, k-2) of them
        out[i] = sum(comb(m, k - 2) * float(v) for m, v in enumerate(others))
    return out


def pkpo_rewards(rewards: Sequence[float], k: int, baseline: str) -> np.ndarray:
    """PKPO's transformed rewards of one group of n, for maxg@k (pass@k when 0/1):

        s_i = (1 / C(n, k)) * sum over the k-subsets I holding i of max_{j in I} g_j

    so sum_i s_i grad log p(x_i) is the gradient of the unbiased maxg@k estimate
    (1/C(n,k)) sum_I max g_I. For 0/1 rewards with c correct this is k/n for a correct
    response and (k/n) rho(n-1, c, k-1) for an incorrect one, rho(n, c, k) = 1 - C(n-c, k) /
    C(n, k) (the paper's binary form). Baseline `loo_minus_one` subtracts from s_i the same
    sum with i left out of each subset, (1/C(n,k)) sum_I max_{j in I, j != i} g_j, a
    function of the other responses only (the gradient stays unbiased): what remains is
    i's marginal contribution to the subsets' maxima, 0 for an incorrect response of a 0/1
    group and C(n-c, k-1) / C(n, k) for a correct one. With k = 1 it subtracts 0.
    """
    g = np.asarray(rewards, dtype=float)
    n = g.size
    if not 1 <= k <= n:
        raise ValueError(f"darling.pkpo_k={k} but a group has {n} responses: PKPO needs k <= n")
    scale = float(Fraction(1, comb(n, k)))
    s = max_sums_with(g, k) * scale
    if baseline == PkpoBaseline.LOO_MINUS_ONE:
        s = s - max_sums_without(g, k) * scale
    return s


def group_rewards(group: GroupBatch, settings: Settings) -> np.ndarray:
    """A group's `pkpo_rewards` of its quality."""
    return pkpo_rewards(group.quality, settings.keys["pkpo_k"], settings.keys["pkpo_baseline"])


def config_problems(section: Mapping[str, Any]) -> list[str]:
    if section["pkpo_baseline"] not in set(PkpoBaseline):
        names = ", ".join(PkpoBaseline)
        return [f"pkpo_baseline={section['pkpo_baseline']!r} is not one of {names}"]
    return []


METHOD = Method(
    "pkpo",
    "PKPO",
    each_group(group_rewards),
    keys=(
        Key("pkpo_k", 4, "method pkpo: the k of pass@k (maxg@k); at most the group size", ge=1),
        Key(
            "pkpo_baseline",
            PkpoBaseline.LOO_MINUS_ONE.value,
            "method pkpo: loo_minus_one (the paper's variance-reduced form) or none",
        ),
    ),
    group_size_key="pkpo_k",
    config_problems=config_problems,
)
