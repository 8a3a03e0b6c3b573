"""One vocabulary and one lifetime for every registry (darling_nemo/registries.py).

A toy method, a toy judge kind and a toy task are registered after `darling_nemo.schema` is
imported (this module imports it first), accepted by config validation while registered,
looked up and listed with the same verbs, and refused again, naming the key path, once
unregistered.
"""

from __future__ import annotations

import sys
from typing import ClassVar, Literal

import pytest
from helpers import REPO

import darling_nemo.schema  # noqa: F401  (imported first: every registration below is late)
from darling_nemo import methods, tasks
from darling_nemo.config import load_validated
from darling_nemo.judges import registry as judges
from darling_nemo.schema import (
    ConfigError,
    Strict,
    TaskSection,
    TrlRunConfig,
    validate_darling,
    validate_section,
)
from darling_nemo.tasks.base import Prompts, Task

BUILT_IN_METHODS = ("darling", "pass_at_k", "outcome", "unlikeliness", "pkpo", "dqo")
BUILT_IN_JUDGES = ("lexical", "cross_encoder", "embedding", "served", "ray_pool")
BUILT_IN_TASKS = ("digit_sum", "lattice_routes", "math", "chat", "reward_funcs")
TRL_CONFIG = REPO / "conf" / "local" / "wildchat_trl.yaml"

LATE_METHOD = methods.Method(
    "late",
    "late training",
    lambda batch, settings: batch.quality,
    keys=(methods.Key("late_weight", 0.5, "method late: a weight", ge=0.0),),
)


class LateJudgeConfig(Strict):
    kind: Literal["late_judge"] = "late_judge"
    threshold: float = 0.5


LATE_JUDGE = judges.JudgeKind(LateJudgeConfig, build=lambda cfg: None, pair_model=False)


class LateTaskConfig(TaskSection):
    graded: ClassVar[bool] = True
    kind: Literal["late_task"]
    words: int = 3


LATE_TASK = Task(
    "late_task",
    "a task registered late",
    config=LateTaskConfig,
    prompts=lambda cfg: Prompts([{"prompt": "say three words"}], [], None),
    quality=lambda section: lambda prompts, completions, **_: [1.0] * len(completions),
    graded=True,
)


@pytest.mark.parametrize(
    ("registry", "noun"),
    [(methods, "method"), (methods, "fusion"), (judges, "judge_kind"), (tasks, "task")],
)
def test_every_registry_has_the_same_verbs(registry, noun):
    for name in (f"register_{noun}", f"unregister_{noun}", f"registered_{noun}", noun):
        assert callable(getattr(registry, name)), name
    assert isinstance(getattr(registry, f"{noun}_names")(), tuple)


def test_a_method_registered_after_the_schema_import_is_accepted_then_refused():
    assert "darling_nemo.schema" in sys.modules
    with methods.registered_method(LATE_METHOD) as entry:
        assert methods.method("late") is entry
        assert methods.method_names() == (*BUILT_IN_METHODS, "late")
        darling = validate_darling({"method": "late", "late_weight": 2})
        assert (darling.method, darling.late_weight) == ("late", 2.0)
        assert darling.settings().keys["late_weight"] == 2.0
        assert validate_darling({}).late_weight == 0.5
        with pytest.raises(ConfigError) as err:
            validate_darling({"method": "late", "late_weight": -1})
        assert str(err.value) == "darling.late_weight: must be >= 0.0, got -1"
        run, _ = load_validated(
            str(TRL_CONFIG), ["darling.method=late", "darling.late_weight=3"], TrlRunConfig
        )
        assert (run.darling.method, run.darling.late_weight) == ("late", 3.0)
    assert methods.method_names() == BUILT_IN_METHODS
    with pytest.raises(ConfigError) as err:
        validate_darling({"method": "late"})
    assert str(err.value) == (
        "darling.method: 'late' is not one of darling, pass_at_k, outcome, unlikeliness, pkpo, dqo"
    )
    with pytest.raises(ConfigError, match=r"^darling\.late_weight: unknown key"):
        validate_darling({"late_weight": 1})
    with pytest.raises(
        ConfigError, match=r"wildchat_trl\.yaml: darling\.method: 'late' is not one"
    ):
        load_validated(str(TRL_CONFIG), ["darling.method=late"], TrlRunConfig)
    with pytest.raises(KeyError, match=r"unknown darling\.method 'late'"):
        methods.method("late")


def test_a_method_whose_key_is_a_shared_key_is_refused_and_not_kept():
    clash = methods.Method(
        "clash",
        "clash",
        lambda batch, settings: batch.quality,
        keys=(methods.Key("floor", 0.1, "x"),),
    )
    with pytest.raises(ValueError, match=r"method key\(s\) \['floor'\] are darling: keys"):
        methods.register_method(clash)
    assert methods.method_names() == BUILT_IN_METHODS
    assert validate_darling({"floor": 0.2}).floor == 0.2
    with pytest.raises(ValueError, match="method 'darling' is registered already"):
        methods.register_method(methods.method("darling"))


def test_a_judge_kind_registered_late_is_accepted_then_refused():
    with judges.registered_judge_kind(LATE_JUDGE) as entry:
        assert judges.judge_kind("late_judge") is entry
        assert judges.judge_kind_names() == (*BUILT_IN_JUDGES, "late_judge")
        darling = validate_darling({"judge": {"kind": "late_judge", "threshold": 0.7}})
        assert judges.judge_kind(darling.judge) is entry and darling.judge.threshold == 0.7
    assert judges.judge_kind_names() == BUILT_IN_JUDGES
    with pytest.raises(ConfigError) as err:
        validate_darling({"judge": {"kind": "late_judge"}})
    assert str(err.value) == (
        "darling.judge.kind: 'late_judge' is not one of lexical, cross_encoder, embedding, "
        "served, ray_pool"
    )


def test_a_task_registered_late_is_accepted_then_refused():
    run = {"engine": "trl", "task": {"kind": "late_task", "words": 2}}
    with tasks.registered_task(LATE_TASK) as entry:
        assert tasks.task("late_task") is entry
        assert tasks.task_names() == (*BUILT_IN_TASKS, "late_task")
        cfg = validate_section(TrlRunConfig, run, "")
        assert tasks.task_of(cfg.task) is entry and cfg.task.words == 2
    assert tasks.task_names() == BUILT_IN_TASKS
    with pytest.raises(ConfigError, match=r"^task\.kind: 'late_task' is not one of"):
        validate_section(TrlRunConfig, run, "")
