"""Pass@k training (`darling.method: pass_at_k`): the reward is the analytic pass@k
advantage of binary rewards (Chen et al. 2025, arXiv 2508.10751). Per group of n responses
with c correct, computed exactly; docs/rivals.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import comb

import numpy as np

from darling_nemo.methods.base import GroupBatch, Key, Method, Settings, each_group


def passk_group_statistics(n: int, c: int, k: int) -> tuple[float, float, float]:
    """(rho, sigma, tail) of a group of n responses with c correct, for pass@k training.

    rho = 1 - C(n-c, k) / C(n, k): the group's unbiased pass@k (Chen et al. 2021);
    sigma = sqrt(rho (1 - rho)): the std of the pass@k reward of a random k-subset;
    tail = C(n-c-1, k-1) / C(n-1, k-1): the chance that the other k-1 members of a
    k-subset holding one given incorrect response are all incorrect too (0 when c = n).
    Computed as exact fractions (math.comb), then rounded once, so large n loses nothing.
    """
    if not (0 <= c <= n) or not (1 <= k <= n):
        raise ValueError(
            f"pass@k training needs 0 <= c <= n and 1 <= k <= n; got n={n} c={c} k={k}"
        )
    rho = 1 - Fraction(comb(n - c, k), comb(n, k))
    tail = Fraction(comb(n - c - 1, k - 1), comb(n - 1, k - 1)) if c < n else Fraction(0)
    return float(rho), float(np.sqrt(float(rho * (1 - rho)))), float(tail)


def passk_advantages(correct: Sequence[bool], k: int) -> np.ndarray:
    """The analytic pass@k advantage of one group (Chen et al. 2025, arXiv 2508.10751, as
    the authors' code RUCAIBox/Passk_Training `code/passk_adv.py` computes it).

    With n responses, c of them correct, and (rho, sigma, tail) of `passk_group_statistics`:
        correct response     A = (1 - rho) / sigma
        incorrect response   A = (1 - rho - tail) / sigma
    This is the expected, std-normalised advantage a response gets when the group is cut
    into k-subsets scored by whether any member is correct; n (1 - rho) = (n - c) tail, so
    the advantages of every group sum to 0 (the zero-mean property the paper states).
    k = 1 gives GRPO's advantage with the population std: (q - mean) / std.

    Degenerate groups (sigma = 0) get advantage 0 for every response, by definition here:
    c = 0 (rho = 0, nothing to learn) and n - c < k (every k-subset holds a correct
    response: rho = 1). The authors' code divides by sigma + 1e-6, which gives the same 0
    there (both numerators are 0) and values smaller by a factor sigma / (sigma + 1e-6)
    elsewhere; this follows the paper's formula, without the epsilon.
    """
    mask = np.asarray(correct, dtype=bool)
    n, c = mask.size, int(mask.sum())
    rho, sigma, tail = passk_group_statistics(n, c, k)
    if sigma == 0.0:
        return np.zeros(n)
    return np.where(mask, (1.0 - rho) / sigma, (1.0 - rho - tail) / sigma)


def check_binary(quality: np.ndarray) -> None:
    """pass@k training counts correct responses: every quality must be 0 or 1."""
    bad = np.flatnonzero((quality != 0.0) & (quality != 1.0))
    if bad.size:
        raise ValueError(
            f"quality[{int(bad[0])}] is {quality[bad[0]]}: darling.method=pass_at_k needs binary "
            "rewards (1 correct, 0 not), such as a verifier's; use method darling or outcome "
            "for graded rewards (NeMo-RL: leave grpo.reward_scaling off)"
        )


def group_rewards(group: GroupBatch, settings: Settings) -> np.ndarray:
    """A group's `passk_advantages` (a response is correct where its quality is > 0)."""
    k, size = settings.keys["k"], group.quality.size
    if k > size:
        raise ValueError(
            f"darling.k={k} but a group has {size} responses: pass@k "
            "training needs k <= the group size"
        )
    return passk_advantages(group.quality > 0, k)


METHOD = Method(
    "pass_at_k",
    "pass@k training",
    each_group(group_rewards),
    keys=(Key("k", 4, "method pass_at_k: the k of pass@k; at most the group size", ge=1),),
    normalised=True,
    binary_rewards=True,
    needs="binary rewards",
    needs_detail=" (a verifier's)",
    group_size_key="k",
    check_quality=check_binary,
)
