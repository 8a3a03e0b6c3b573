"""darling_nemo.resume: the one comparison of saved and new settings, the one atomic write;
and the miniature's arm run configs that the TRL run directory is checked against."""

from __future__ import annotations

import json

import pytest
from helpers import REPO
from hypothesis import given
from hypothesis import strategies as st

from darling_nemo.config import load_config
from darling_nemo.resume import changed_settings, write_json
from darling_nemo.schema import ConfigError, MiniConfig, TrlRunConfig, validate_section
from darling_nemo.trl import validate_trl_config


def test_changed_settings_names_each_key_path_old_and_new():
    saved = {"trainer": {"learning_rate": 0.001, "max_steps": 2}, "seed": 1, "gone": "x"}
    new = {"trainer": {"learning_rate": 0.0005, "max_steps": 2}, "seed": 1, "added": [1, 2]}
    # sorted by key path; a key on one side only shows <unset> on the other
    assert changed_settings(saved, new) == [
        "added: <unset> -> [1, 2]",
        "gone: 'x' -> <unset>",
        "trainer.learning_rate: 0.001 -> 0.0005",
    ]


def test_may_change_covers_a_key_and_everything_under_it_but_not_a_longer_name():
    saved = {"logging": {"report_to": ["tensorboard"]}, "logging_steps": 1, "trainer": {"a": 1}}
    new = {"logging": {"report_to": ["wandb"]}, "logging_steps": 2, "trainer": {"a": 2}}
    assert changed_settings(saved, new, ["logging", "trainer.a"]) == ["logging_steps: 1 -> 2"]


def test_values_compare_as_json_stores_them():
    # a tuple is saved as a list; an empty mapping is a setting of its own, not "nothing"
    assert changed_settings({"ks": [1, 4]}, {"ks": (1, 4)}) == []
    assert changed_settings({"extra": {}}, {}) == ["extra: {} -> <unset>"]


keys = st.text("abc", min_size=1, max_size=2)
settings_trees = st.dictionaries(
    keys,
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=3),
        lambda inner: st.dictionaries(keys, inner, max_size=3),
        max_leaves=8,
    ),
    max_size=3,
)


@given(settings_trees, settings_trees)
def test_no_change_means_equal_and_changes_are_listed_both_ways(saved, new):
    forward, backward = changed_settings(saved, new), changed_settings(new, saved)
    assert changed_settings(saved, saved) == []
    assert (forward == []) == (json.dumps(saved, sort_keys=True) == json.dumps(new, sort_keys=True))
    assert [line.split(":")[0] for line in forward] == [line.split(":")[0] for line in backward]


def test_write_json_replaces_the_file_whole_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "deep" / "summary.json"
    write_json(target, {"name": "café", "n": 1})
    write_json(target, {"name": "thé", "n": 2})
    assert json.loads(target.read_text(encoding="utf-8")) == {"name": "thé", "n": 2}
    assert "thé" in target.read_text(encoding="utf-8")  # UTF-8 kept, not \\u escapes
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]


# ------------------------------------------------- the miniature's arms as TRL run configs


def mini_config(overrides: list[str] | None = None) -> MiniConfig:
    raw = load_config(REPO / "conf" / "mini" / "dice_k.yaml", overrides or [])
    return validate_section(MiniConfig, raw)


def test_an_arm_run_is_the_shared_settings_with_the_seed_policy_and_darling_section():
    cfg = mini_config(["output_dir=/tmp/mini"])
    for name in cfg.arms:
        arm = cfg.arm_run(3, name)
        assert isinstance(arm, TrlRunConfig)
        # the same config as validating it from YAML: shared keys, then this seed's run
        expected = {
            **cfg.model_dump(
                mode="json", include={"torch_threads", "task", "trainer", "evaluation", "logging"}
            ),
            "engine": "trl",
            "seed": 3,
            "output_dir": f"/tmp/mini/seed-3/{name}",
            "resume": True,
            "policy": {
                "kind": "pretrained",
                "name_or_path": "/tmp/mini/seed-3/warm_start",
                "dtype": "float32",
            },
            "darling": cfg.arms[name].model_dump(mode="json"),
        }
        assert arm.model_dump(mode="json") == validate_trl_config(expected).model_dump(mode="json")
        assert arm.model_dump(mode="json") == expected


def test_an_arm_with_a_judge_of_its_own_is_refused_by_key_path():
    first = next(iter(mini_config().arms))
    with pytest.raises(ConfigError, match=rf"arms\.{first}\.judge: the digit_sum task decides"):
        mini_config([f"arms.{first}.judge={{kind: embedding}}"])
