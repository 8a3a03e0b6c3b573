"""Outcome-based exploration (`darling.method: outcome`): quality plus a penalty for each
other response of the group that reaches the same final answer (Song, Kempe and Munos
2025, arXiv 2509.06941). The classes are final answers, judged by the task's answer judge
(math-verify), not darling.judge; docs/rivals.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from darling_nemo.methods.base import ANSWERS, GroupBatch, Key, Method, Settings, each_group


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


def group_rewards(group: GroupBatch, settings: Settings) -> np.ndarray:
    """A group's quality plus `outcome_penalty` of its answer classes."""
    return group.quality + outcome_penalty(group.class_ids, settings.keys["outcome_coef"])


def config_problems(section: Mapping[str, Any]) -> list[str]:
    if section["partition_scope"] != "all":
        return [
            "partition_scope=correct applies to method darling: outcome exploration "
            "counts repeats among every response's answer"
        ]
    return []


METHOD = Method(
    "outcome",
    "outcome exploration",
    each_group(group_rewards),
    # reward = quality - outcome_coef * (other responses with the same answer) / n; the
    # paper's per-response term, placed before the group baseline and with an untuned
    # coefficient (outcome_penalty says how it differs from the paper).
    keys=(Key("outcome_coef", 0.5, "method outcome: the penalty per repeat, over n", ge=0.0),),
    inputs=(ANSWERS,),  # each group's classes are its final answers'
    needs="final answers",
    needs_detail=" to compare",
    config_problems=config_problems,
)
