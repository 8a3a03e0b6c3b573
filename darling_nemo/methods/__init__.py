"""The diversity methods: one module each, one registry that everything else asks.

    darling.py     DARLING: quality and diversity fused (multiplicative, additive, quality_only)
    gdpo.py        fusion gdpo: quality and diversity normalised apart, the batch whitened
    pass_at_k.py   pass@k training: the analytic pass@k advantage of binary rewards
    outcome.py     outcome exploration: a penalty per repeat of a final answer
    unlikeliness.py  unlikeliness reward: correct but less likely responses keep more reward
    pkpo.py        PKPO: the unbiased pass@k / maxg@k reward transformation, any k <= n
    dqo.py         DQO: quality plus a log-determinant diversity gain over embeddings

numpy and the standard library only, like the core that calls them (docs/rivals.md). A new
method: its module (a `base.Method` whose rewards read a `base.GroupBatch`, a per-group
formula wrapped in `base.each_group`; its config keys as `base.Key`s) and one line below.
"""

from __future__ import annotations

from darling_nemo.methods import darling, dqo, gdpo, outcome, pass_at_k, pkpo, unlikeliness
from darling_nemo.methods.base import Fusion, GroupBatch, Key, Method, check_finite, each_group
from darling_nemo.methods.registry import (
    all_keys,
    fusion,
    fusion_names,
    method,
    method_names,
    on_change,
    register_fusion,
    register_method,
    registered_fusion,
    registered_method,
    unregister_fusion,
    unregister_method,
)

# The registry's entries, in the order config messages list them.
for _method in (
    darling.METHOD,
    pass_at_k.METHOD,
    outcome.METHOD,
    unlikeliness.METHOD,
    pkpo.METHOD,
    dqo.METHOD,
):
    register_method(_method)
for _fusion in (*darling.FUSIONS, gdpo.FUSION):
    register_fusion(_fusion)

__all__ = [
    "Fusion",
    "GroupBatch",
    "Key",
    "Method",
    "all_keys",
    "check_finite",
    "each_group",
    "fusion",
    "fusion_names",
    "method",
    "method_names",
    "on_change",
    "register_fusion",
    "register_method",
    "registered_fusion",
    "registered_method",
    "unregister_fusion",
    "unregister_method",
]
