"""DARLING (the paper's method): a response's reward fuses its quality and its diversity.

`darling.fusion` picks how (one `Fusion` each, registered by `methods/__init__.py`):

    multiplicative   q * d (paper and reference code)
    additive         z(q) + z(d), per-group population z-scores (paper Table 2 ablation)
    quality_only     q (plain GRPO; `darling.enabled: false` selects it)
    gdpo             its own module, methods/gdpo.py

`quality_shift: group_min` first replaces q by q - min(q), for reward models whose scores
are negative, where q * d would punish diversity.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

import numpy as np

from darling_nemo.methods import registry
from darling_nemo.methods.base import (
    Fusion,
    GroupBatch,
    Method,
    Settings,
    check_finite,
    each_group,
)


class QualityShift(StrEnum):
    NONE = "none"  # reference default: negative quality times diversity gets MORE negative
    GROUP_MIN = "group_min"  # q - min_group(q) >= 0, so more diversity never lowers a reward


def _zscore(x: np.ndarray) -> np.ndarray:
    std = x.std()
    return (x - x.mean()) / std if std > 0 else np.zeros_like(x)


_COMBINE = {
    "multiplicative": lambda q, d: q * d,
    "additive": lambda q, d: _zscore(q) + _zscore(d),
    "quality_only": lambda q, d: q.copy(),
}


def fuse(
    quality: Sequence[float],
    diversity: Sequence[float],
    *,
    fusion: str,
    quality_shift: str,
) -> np.ndarray:
    """Combine one group's quality and diversity into the DARLING reward.

    multiplicative: q * d (reference: no epsilon, no shift).
    additive: z(q) + z(d) with per-group population z-scores (0 where a term is constant).
    quality_only: q.
    quality_shift=group_min first replaces q by q - min(q) (>= 0).
    """
    q = check_finite(quality, "quality")
    d = check_finite(diversity, "diversity")
    if q.shape != d.shape:
        raise ValueError(f"quality has {q.size} values but diversity has {d.size}")
    if quality_shift == QualityShift.GROUP_MIN and q.size:
        q = q - q.min()
    combine = _COMBINE.get(fusion)
    if combine is None:
        raise ValueError(f"fusion {fusion} is not a fuse() rule: ask methods.fusion({fusion!r})")
    return combine(q, d)


def _fusion(name: str) -> Fusion:
    def group(q: np.ndarray, d: np.ndarray, settings: Settings) -> np.ndarray:
        return fuse(q, d, fusion=name, quality_shift=settings.quality_shift)

    return Fusion(name, group)


FUSIONS = tuple(_fusion(name) for name in _COMBINE)


def _fused(group: GroupBatch, settings: Settings) -> np.ndarray:
    return registry.fusion(settings.fusion).group(group.quality, group.diversity, settings)


_fused_groups = each_group(_fused)


def rewards(batch: GroupBatch, settings: Settings) -> np.ndarray:
    """Each group fused by `settings.fusion`, then the fusion's batch step if it has one."""
    fusion = registry.fusion(settings.fusion)
    reward = _fused_groups(batch, settings)
    if fusion.batch is not None:
        reward = fusion.batch(reward)
    return reward


METHOD = Method("darling", "DARLING", rewards, uses_fusion=True)
