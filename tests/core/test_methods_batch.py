"""Methods read one batch value, and what they declare decides the config check.

`GroupBatch.group` cuts every array to a group's rows and `each_group` is the one loop that
turns a per-group formula into a batch's rewards. A method declaring an input (`inputs`) is
refused at the config phase where the judge kind gives none, by what the judge kind's config
class declares (`gives`), so a judge kind registered at run time that gives embeddings
serves DQO with no method or schema file knowing its name.
"""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import pytest

from darling_nemo.judges.registry import JudgeKind, registered_judge_kind
from darling_nemo.methods.base import (
    ANSWERS,
    EMBEDDINGS,
    LOGPROBS,
    GroupBatch,
    Method,
    each_group,
    missing_inputs,
)
from darling_nemo.schema import ConfigError, Strict, inputs_problem, validate_darling
from darling_nemo.schema.judges import kinds_giving


def batch() -> GroupBatch:
    return GroupBatch(
        quality=np.array([1.0, 0.0, 2.0, 3.0, 5.0]),
        diversity=np.array([0.5, 0.25, 1.0, 0.0, 0.75]),
        class_ids=np.array([0, 1, 0, 0, 1]),
        groups=[np.array([0, 2, 4]), np.array([1, 3])],  # interleaved groups
        logprobs=np.array([-1.0, -2.0, -3.0, -4.0, -5.0]),
    )


def test_a_group_is_the_batch_cut_to_its_rows():
    group = batch().group(np.array([0, 2, 4]))
    assert group.quality.tolist() == [1.0, 2.0, 5.0]
    assert group.diversity.tolist() == [0.5, 1.0, 0.75]
    assert group.class_ids.tolist() == [0, 0, 1]
    assert group.logprobs is not None and group.logprobs.tolist() == [-1.0, -3.0, -5.0]
    assert group.embeddings is None  # not declared, not given
    assert [rows.tolist() for rows in group.groups] == [[0, 1, 2]]


def test_each_group_writes_each_groups_formula_back_to_its_rows():
    def centred(group: GroupBatch, settings: object) -> np.ndarray:
        return group.quality - group.quality.mean()

    reward = each_group(centred)(batch(), None)  # type: ignore[arg-type]
    assert reward.tolist() == [1.0 - 8 / 3, -1.5, 2.0 - 8 / 3, 1.5, 5.0 - 8 / 3]


def test_an_input_is_missing_unless_the_engines_the_task_or_the_judge_give_it():
    # ANSWERS comes from the task (checked against the task, Method.task_needs)
    inputs = (LOGPROBS, EMBEDDINGS, ANSWERS, "rationales")
    method = Method("m", "m", lambda b, s: b.quality, inputs=inputs)
    assert missing_inputs(method, frozenset()) == [EMBEDDINGS, "rationales"]
    assert missing_inputs(method, {EMBEDDINGS, "rationales"}) == []
    assert method.answer_classes and method.task_needs == "final answers"


def test_dqo_is_refused_by_what_it_declares_against_what_the_judge_gives():
    lexical = validate_darling({"method": "dqo", "judge": {"kind": "lexical"}})
    assert inputs_problem(lexical, "darling") == (
        "darling.method=dqo needs response embeddings: set darling.judge.kind=embedding "
        "(darling.judge.kind=lexical gives none)"
    )
    assert inputs_problem(lexical, "darling", task_gives={EMBEDDINGS}) == ""  # the dice task
    with pytest.raises(ConfigError, match=r"judge\.kind=served gives none"):
        validate_darling({"method": "dqo", "judge": {"kind": "served"}})


class EmbeddingToyConfig(Strict):
    kind: Literal["embedding_toy"] = "embedding_toy"
    threshold: float = 0.5
    gives: ClassVar[frozenset[str]] = frozenset({EMBEDDINGS})


def test_a_registered_kind_that_gives_embeddings_serves_dqo():
    with registered_judge_kind(JudgeKind(EmbeddingToyConfig, build=lambda cfg: None)) as entry:
        assert entry.gives == {EMBEDDINGS}
        assert kinds_giving(EMBEDDINGS) == ["embedding", "embedding_toy"]
        darling = validate_darling({"method": "dqo", "judge": {"kind": "embedding_toy"}})
        assert inputs_problem(darling, "darling") == ""
        lexical = validate_darling({"method": "dqo"})
        assert "set darling.judge.kind=embedding or embedding_toy" in inputs_problem(
            lexical, "darling"
        )
    assert kinds_giving(EMBEDDINGS) == ["embedding"]
