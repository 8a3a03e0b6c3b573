"""The miniature's judge with a measured judge's two error rates (task.judge_false_similar,
task.judge_false_different): each kind of pair errs at its own rate, the defaults are the
symmetric judge's verdicts exactly, and the config refuses both knobs at once."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import REPO

from darling_nemo.config import load_config
from darling_nemo.mini.task import FlippedJudge, multiset_judge
from darling_nemo.schema import ConfigError, DigitSumTaskConfig, MiniConfig, validate_section
from darling_nemo.tasks.digit_sum import training_judge


def dice_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """Random pairs of six-dice answers, half of them one multiset in two orders."""
    rng = np.random.default_rng(seed)
    pairs = []
    for k in range(count):
        roll = rng.integers(1, 7, size=6)
        other = rng.permutation(roll) if k % 2 else rng.integers(1, 7, size=6)
        pairs.append((" ".join(map(str, roll)), " ".join(map(str, other))))
    return [(a, b) for a, b in pairs if a != b]


def test_each_kind_of_pair_errs_at_its_own_rate():
    pairs = dice_pairs(8000, 0)
    exact = np.array(multiset_judge(pairs))
    verdicts = np.array(FlippedJudge(multiset_judge, 1.0, 5, 0.3, 0.1)(pairs))
    for label, rate in ((0.0, 0.3), (1.0, 0.1)):  # different pairs said similar, and back
        kind = exact == label
        wrong = np.mean(verdicts[kind] != label)
        assert abs(wrong - rate) <= 5 * np.sqrt(rate * (1 - rate) / kind.sum())
    assert FlippedJudge(multiset_judge, 1.0, 5, 0.3, 0.1)([(b, a) for a, b in pairs]) == list(
        verdicts
    )
    one_sided = np.array(FlippedJudge(multiset_judge, 1.0, 5, 0.3, 0.0)(pairs))
    assert (one_sided[exact == 1.0] == 1.0).all()  # no false "different" at rate 0


def test_at_zero_rates_the_verdicts_are_the_symmetric_judges():
    pairs = dice_pairs(2000, 1)
    for accuracy in (1.0, 0.9, 0.6):
        assert FlippedJudge(multiset_judge, accuracy, 2, 0.0, 0.0)(pairs) == FlippedJudge(
            multiset_judge, accuracy, 2
        )(pairs)
    assert training_judge(DigitSumTaskConfig(kind="digit_sum")) is None  # exact: no judge


def test_the_rates_config():
    rates = {"kind": "digit_sum", "judge_false_similar": 0.28, "judge_false_different": 0.3}
    assert training_judge(validate_section(DigitSumTaskConfig, rates, "task")) == (
        FlippedJudge(multiset_judge, 1.0, 0, 0.28, 0.3)
    )
    with pytest.raises(ConfigError, match=r"^task: judge_accuracy=0.8 flips both kinds") as err:
        validate_section(DigitSumTaskConfig, {**rates, "judge_accuracy": 0.8}, "task")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"task\.judge_false_similar: must be < 1"):
        validate_section(DigitSumTaskConfig, {**rates, "judge_false_similar": 1.0}, "task")
    cfg = validate_section(MiniConfig, load_config(str(REPO / "conf/mini/judge_rates.yaml"), []))
    assert training_judge(cfg.arm_run(1, "darling").task) == FlippedJudge(
        multiset_judge, 1.0, 0, 0.282, 0.297
    )
