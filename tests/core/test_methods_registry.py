"""Adding a diversity method is one module and one registry entry (darling_nemo/methods/).

A toy method, written by this test as its own module in a temporary folder (no project file
touched), is registered and then used as a config would use a shipped one: `darling.method:
toy` and its own key validate (a bad value is refused by key), a TRL run config takes them
as overrides, the core computes its rewards, and `darling-score` scores with it. It runs in
a fresh interpreter, registered before the schema is imported; registering after the import
is accepted too (the schema follows the registry; tests/core/test_registries.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from helpers import REPO

from darling_nemo import methods
from darling_nemo.config import load_validated
from darling_nemo.methods.base import ANSWERS, missing_inputs
from darling_nemo.schema import ConfigError, TrlRunConfig, validate_darling

# The built-in methods, in registration order (methods/__init__.py).
BUILT_IN = ["darling", "pass_at_k", "outcome", "unlikeliness", "pkpo", "dqo"]

TOY_MODULE = '''
"""A toy method: reward = quality + toy_bonus * diversity."""

import numpy as np

from darling_nemo.methods.base import Key, Method


def rewards(batch, settings):  # batch: a methods.base.GroupBatch
    return batch.quality + settings.keys["toy_bonus"] * batch.diversity


METHOD = Method(
    "toy",
    "toy training",
    rewards,
    keys=(Key("toy_bonus", 0.25, "method toy: the weight of diversity", ge=0.0),),
)
'''

CHECKS = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import toy_method
    from darling_nemo import methods

    methods.register_method(toy_method.METHOD)  # the one registry entry

    from darling_nemo.config import load_validated
    from darling_nemo.core import darling_batch
    from darling_nemo.schema import ConfigError, TrlRunConfig, validate_darling
    from darling_nemo.score import main

    result = {"methods": list(methods.method_names())}
    cfg = validate_darling({"method": "toy", "toy_bonus": 2.0})
    # Four responses, one group: "4" and "4" one class (size 2), "four", "x" alone.
    # diversity (n - size) / (n - 1): 2/3, 2/3, 1, 1; reward q + 2 d.
    out = darling_batch(["4", "4", "four", "x"], [1, 0, 1, 0], [0] * 4, None, cfg.settings())
    result["reward"] = out.reward.tolist()
    result["advantage"] = out.advantage.tolist()
    result["default_bonus"] = validate_darling({"method": "toy"}).toy_bonus
    try:
        validate_darling({"method": "toy", "toy_bonus": -1})
    except ConfigError as err:
        result["refused"] = str(err)
    run, _ = load_validated(
        sys.argv[1], ["darling.method=toy", "darling.toy_bonus=3"], TrlRunConfig
    )
    result["trl"] = [run.darling.method, run.darling.toy_bonus]
    result["score_exit"] = main(
        [sys.argv[2], "--set", "method=toy", "--set", "toy_bonus=2", "--output", sys.argv[3]]
    )
    print(json.dumps(result))
    """
)


def test_a_toy_method_is_one_module_and_one_registry_entry(tmp_path):
    (tmp_path / "toy_method.py").write_text(TOY_MODULE)
    (tmp_path / "checks.py").write_text(CHECKS)
    groups = tmp_path / "groups.jsonl"
    groups.write_text(json.dumps({"responses": ["4", "4", "four", "x"], "quality": [1, 0, 1, 0]}))
    scored = tmp_path / "scored.jsonl"
    trl_config = REPO / "conf" / "local" / "wildchat_trl.yaml"
    result = subprocess.run(
        [sys.executable, "checks.py", str(trl_config), str(groups), str(scored)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["methods"] == [*BUILT_IN, "toy"]
    reward = [1 + 4 / 3, 4 / 3, 3.0, 2.0]
    assert found["reward"] == pytest.approx(reward)
    mean = sum(reward) / 4
    assert found["advantage"] == pytest.approx([r - mean for r in reward])
    assert found["default_bonus"] == 0.25
    assert found["refused"] == "darling.toy_bonus: must be >= 0.0, got -1"
    assert found["trl"] == ["toy", 3.0]
    assert found["score_exit"] == 0
    (row,) = [json.loads(line) for line in scored.read_text().splitlines()]
    assert row["advantage"] == pytest.approx([r - mean for r in reward])


def test_registering_after_the_schema_import_is_accepted():
    # this module imported the schema (validate_darling) before the registration
    late = methods.Method("late", "late", lambda batch, settings: batch.quality)
    with methods.registered_method(late):
        assert validate_darling({"method": "late"}).method == "late"
    assert "late" not in methods.method_names()


def test_a_method_declaring_answers_needs_a_task_with_final_answers():
    """ANSWERS is an input like the others: declared, it cuts classes by final answers
    (`answer_classes`), and a task with graded scores and no final answer refuses it."""
    by_answer = methods.Method("by_answer", "by answer", lambda b, s: b.quality, inputs=(ANSWERS,))
    with methods.registered_method(by_answer):
        assert by_answer.answer_classes and missing_inputs(by_answer, ()) == []
        chat = REPO / "conf" / "local" / "wildchat_trl.yaml"
        with pytest.raises(ConfigError) as err:
            load_validated(chat, ["darling.method=by_answer"], TrlRunConfig)
        assert "darling.method=by_answer needs final answers; task.kind=" in str(err.value)
        math = REPO / "conf" / "local" / "math_trl.yaml"
        run, _ = load_validated(math, ["darling.method=by_answer"], TrlRunConfig)
        assert run.darling.method == "by_answer"
