"""Unlikeliness reward (`darling.method: unlikeliness`; He, Fried and Welleck 2025, arXiv
2506.02355): a correct response the policy found less likely keeps more of its reward,
so GRPO's bias toward already-likely solutions is countered; docs/rivals.md.

As the authors' released code computes it (AndreHe02/rewarding-unlikely-release,
`verl/trainer/ppo/ray_lean_trainer.py`, `_compute_advantages`; coefficient
`lean.rank_penalty=0.25` in `examples/lean/grpo.sh`, the run the paper reports): each
group's responses are ranked by their mean token log-probability under the policy that
sampled them, 0 = least likely, and a reward r becomes r (1 - penalty * rank / n). Their
training script also drops every group whose 0/1 rewards are all equal before computing
advantages (`advantage_threshold`): such a group, all correct or all wrong, teaches nothing
about correctness, and ranking an all-correct group by likelihood alone would push its
likeliest correct answers down by up to 1.34 after std normalisation. The option
`unlikeliness_drop_uniform` (default true, the authors' setting) does the same here: the
group keeps its equal rewards, so every engine's baseline gives it no advantage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from darling_nemo.methods.base import LOGPROBS, GroupBatch, Key, Method, Settings, each_group


def likelihood_ranks(logprobs: Sequence[float]) -> np.ndarray:
    """Each response's place when its group is sorted by log-probability, ascending: 0 for
    the least likely. Ties keep response order (the authors' torch.argsort leaves ties
    unspecified)."""
    lp = np.asarray(logprobs, dtype=float)
    ranks = np.empty(lp.size, dtype=np.int64)
    ranks[np.argsort(lp, kind="stable")] = np.arange(lp.size)
    return ranks


def unlikeliness_rewards(
    quality: Sequence[float], logprobs: Sequence[float], penalty: float, drop_uniform: bool = False
) -> np.ndarray:
    """One group: r_i = q_i (1 - penalty * rank_i / n), rank_i of `likelihood_ranks`.

    Like the authors' code, and unlike the paper's wording (which ranks the correct
    samples and speaks of sequence likelihood): every response of the group is ranked,
    correct or not, by its MEAN token log-probability (length-normalised), and the rank is
    divided by n, so the most likely response keeps 1 - penalty (n-1)/n of its reward. An
    incorrect response (q = 0) gets 0 whatever its rank. `drop_uniform`: a group whose
    rewards are all equal is returned as it is (no update, the authors' advantage_threshold).
    """
    q = np.asarray(quality, dtype=float)
    if drop_uniform and q.size and np.all(q == q[0]):
        return q.copy()
    ranks = likelihood_ranks(logprobs)
    return q * (1.0 - penalty * ranks / max(q.size, 1))


def group_rewards(group: GroupBatch, settings: Settings) -> np.ndarray:
    """A group's `unlikeliness_rewards`."""
    penalty = settings.keys["unlikeliness_penalty"]
    drop = settings.keys["unlikeliness_drop_uniform"]
    assert group.logprobs is not None  # declared in `inputs`: the core gives them
    return unlikeliness_rewards(group.quality, group.logprobs, penalty, drop)


METHOD = Method(
    "unlikeliness",
    "unlikeliness reward",
    each_group(group_rewards),
    keys=(
        Key(
            "unlikeliness_penalty",
            0.25,
            "method unlikeliness: r (1 - penalty rank/n), rank 0 = least likely",
            ge=0.0,
            le=1.0,
        ),
        Key(
            "unlikeliness_drop_uniform",
            True,
            "method unlikeliness: a group whose rewards are all equal gets no update "
            "(the authors' advantage_threshold); false: ranked like any other",
        ),
    ),
    inputs=(LOGPROBS,),
)
