"""GDPO's separate normalisation as a fusion of method darling (`darling.fusion: gdpo`).

The multi-reward normalisation of GDPO (Liu et al. 2026, arXiv 2601.05242), as NeMo-RL
implements it in `GDPOAdvantageEstimator` (NVIDIA-NeMo/RL PR #1986, merged as #2069): per
reward component, the group baseline and the group's sample std, weighted sum over
components, then the batch whitened. Here the two components are DARLING's quality and
diversity.
"""

from __future__ import annotations

import numpy as np

from darling_nemo.methods.base import Fusion, Key, Settings


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
    z(q) + w z(d), z as `_group_zscore` (divide only where the std is > 0, epsilon 1e-6).
    A group whose responses are all correct still ranks them by diversity, and one whose
    responses all form one class still ranks them by quality.
    """
    return _group_zscore(quality, epsilon) + diversity_weight * _group_zscore(diversity, epsilon)


def whiten_batch(values: np.ndarray) -> np.ndarray:
    """GDPO's last step over the whole batch: (A - mean) / std (sample std, as torch's), or
    A - mean where the std is 0. Every group of A already has mean 0, so this only rescales
    and each group keeps mean 0."""
    centred = values - values.mean() if values.size else values
    std = values.std(ddof=1) if values.size > 1 else 0.0
    return centred / std if std > 0 else centred


def _group(q: np.ndarray, d: np.ndarray, settings: Settings) -> np.ndarray:
    return separately_normalized(
        q, d, diversity_weight=settings.keys["diversity_weight"], epsilon=settings.std_epsilon
    )


FUSION = Fusion(
    "gdpo",
    _group,
    batch=whiten_batch,
    keys=(Key("diversity_weight", 1.0, "fusion gdpo: z(q) + diversity_weight z(d)", ge=0.0),),
    normalised=True,
)
