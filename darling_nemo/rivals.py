"""DARLING's 2025 rivals as small pure functions, one group at a time (numpy only).

`core.darling_batch` calls them when `darling.method` or `darling.fusion` asks (docs/rivals.md):

    pass@k training       analytic pass@k advantage of binary rewards  `passk_advantages`
    outcome exploration   penalty for repeating a final answer         `outcome_penalty`
    separate normalising  quality and diversity z-scored apart (GDPO)  `separately_normalized`
                          then the batch whitened                      `whiten_batch`

Each returns per-response values for one group; every group's result has mean 0 where the
method says so, which is what lets both engines subtract their own group-mean baseline
after it without changing anything (tests/core/test_rivals.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from math import comb

import numpy as np


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


def outcome_penalty(answer_ids: Sequence[int], coef: float) -> np.ndarray:
    """Outcome-based exploration, batch form (Song, Kempe and Munos 2025, arXiv 2509.06941):
    a response is penalised for every other response of its group that reaches the same
    final answer:

        b_i = -coef * |{j != i : answer_j = answer_i}| / n

    `answer_ids[i]` is response i's answer class within the group (equal ids = the same
    answer). Counting j = i too only shifts every b_i by -coef / n, which no group baseline
    sees, so either form trains the same advantages.

    Against the paper (Section 5, as quoted in a public reading of it; the paper's own
    Section 5 was not readable from this project's machines): the per-response term is the
    paper's, A_i = -(1/G) sum_{j != i} 1[o_i = o_j], with G = n. Where it goes differs.
    The paper adds lambda * A_i to the GRPO advantage of the correctness reward (after that
    advantage's std division), uncentred. Here it is added to the reward, before the
    engine's group-mean baseline, because both engines' hooks write rewards, not advantages
    (NeMo-RL v0.4.0's scale_rewards, TRL's reward functions). So this package trains
    A_paper_term - coef * mean_group(b): the two differ by one constant per group, which
    leaves the expected score-function gradient unchanged but not each step. Example: a
    group whose n answers all agree gets -coef (n - 1)/n on every response in the paper's
    form, 0 here. The task term is std-normalised in the paper (darling.normalize_std=true
    divides the whole reward here). The paper's lambda was not found in the sources at hand:
    `coef` (darling.outcome_coef, 0.5) is this package's untuned choice. The answer-token
    mask and all-correct gating the paper describes for historical exploration are not
    applied.
    """
    ids = np.asarray(answer_ids, dtype=np.int64)
    n = ids.size
    if n == 0:
        return np.zeros(0)
    same_answer = np.bincount(ids)[ids] - 1
    return -coef * same_answer / n


def _group_zscore(x: np.ndarray, epsilon: float) -> np.ndarray:
    """(x - mean) / (sample std + epsilon), and x - mean (= 0) where the std is 0: the
    per-reward normalisation of NeMo-RL's GDPO advantage estimator (sample std, ddof=1,
    as its calculate_baseline_and_std_per_prompt)."""
    centred = x - x.mean()
    std = x.std(ddof=1) if x.size > 1 else 0.0
    return centred / (std + epsilon) if std > 0 else centred


def separately_normalized(
    quality: np.ndarray, diversity: np.ndarray, *, diversity_weight: float, epsilon: float
) -> np.ndarray:
    """One group's quality and diversity each normalised within the group, then summed:
    z(q) + w z(d), z as `_group_zscore`.

    The multi-reward normalisation of GDPO (Liu et al. 2026, arXiv 2601.05242), as NeMo-RL
    implements it in `GDPOAdvantageEstimator` (NVIDIA-NeMo/RL PR #1986, merged as #2069):
    per reward component, the group baseline and the group's sample std (divide only where
    it is > 0, epsilon 1e-6), weighted sum over components; `whiten_batch` is its last
    step. Here the two components are DARLING's quality and diversity, so a group whose
    responses are all correct still ranks them by diversity, and one whose responses all
    form one class still ranks them by quality.
    """
    return _group_zscore(quality, epsilon) + diversity_weight * _group_zscore(diversity, epsilon)


def whiten_batch(values: np.ndarray) -> np.ndarray:
    """GDPO's last step over the whole batch: (A - mean) / std (sample std, as torch's), or
    A - mean where the std is 0. Every group of A already has mean 0, so this only rescales
    and each group keeps mean 0."""
    centred = values - values.mean() if values.size else values
    std = values.std(ddof=1) if values.size > 1 else 0.0
    return centred / std if std > 0 else centred
