"""DQO (`darling.method: dqo`; Chen, Chakraborty, Wolf, Paschalidis and Pacchiano 2025,
arXiv 2509.04784): a determinantal (DPP) diversity term over the embeddings of a group's
responses, added to quality; docs/rivals.md says which choices are this package's.
"""

from __future__ import annotations

import numpy as np

from darling_nemo.methods.base import EMBEDDINGS, GroupBatch, Key, Method, Settings, each_group


def determinant_gains(embeddings: np.ndarray, ridge: float) -> np.ndarray:
    """Each response's share of the group's log-volume:

        L = E E^T + ridge I       (E: one unit-norm embedding per row: cosine kernel)
        d_i = log det L - log det L_{-i}  =  -log (L^{-1})_{ii}

    L_{-i} is L without row and column i (det of the empty matrix = 1). d_i is what
    response i adds to log det L, a function of the others only through its baseline
    log det L_{-i}: a duplicate of another response adds little, a direction no other
    response covers adds most. `ridge` > 0 keeps L invertible when responses repeat or
    outnumber the embedding's dimensions.
    """
    e = np.asarray(embeddings, dtype=float)
    n = e.shape[0]
    if n == 0:
        return np.zeros(0)
    kernel = e @ e.T + ridge * np.eye(n)
    return -np.log(np.diag(np.linalg.inv(kernel)))


def group_rewards(group: GroupBatch, settings: Settings) -> np.ndarray:
    """A group's quality + dqo_weight * `determinant_gains` of its embeddings."""
    weight, ridge = settings.keys["dqo_weight"], settings.keys["dqo_ridge"]
    assert group.embeddings is not None  # declared in `inputs`: the core gives them
    return group.quality + weight * determinant_gains(group.embeddings, ridge)


METHOD = Method(
    "dqo",
    "DQO",
    each_group(group_rewards),
    keys=(
        Key("dqo_weight", 1.0, "method dqo: quality + dqo_weight * log-det gain", ge=0.0),
        Key("dqo_ridge", 1.0, "method dqo: L = E E^T + dqo_ridge I (1: log det(I + K))", gt=0.0),
    ),
    # a pair classifier gives verdicts, not embeddings: the config check refuses it by this
    inputs=(EMBEDDINGS,),
)
