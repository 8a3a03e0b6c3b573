"""The YAML loader: `defaults:` inheritance, strict overrides, interpolation, clear errors."""

from __future__ import annotations

import pytest

from darling_nemo.config import apply_overrides, load_config
from darling_nemo.schema import ConfigError, validate_darling


@pytest.fixture
def conf(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "grpo:\n  num_prompts_per_step: 256\n  num_generations_per_prompt: 8\n"
        "policy:\n  train_global_batch_size: ${mul:${grpo.num_prompts_per_step},"
        "${grpo.num_generations_per_prompt}}\n"
        "darling:\n  floor: 0.1\n"
    )
    (tmp_path / "child.yaml").write_text(
        "defaults: base.yaml\ngrpo:\n  num_prompts_per_step: 64\ndarling:\n  fusion: additive\n"
    )
    return tmp_path


def test_defaults_inheritance_and_interpolation(conf):
    cfg = load_config(conf / "child.yaml")
    # child wins on num_prompts_per_step; the parent's other keys survive the deep merge.
    assert cfg["grpo"] == {"num_prompts_per_step": 64, "num_generations_per_prompt": 8}
    assert cfg["darling"] == {"floor": 0.1, "fusion": "additive"}
    # ${mul:64,8} = 512, resolved after the merge.
    assert cfg["policy"]["train_global_batch_size"] == 512


def test_overrides_are_strict(conf):
    cfg = load_config(conf / "child.yaml", ["grpo.num_prompts_per_step=8", "darling.floor=0"])
    assert cfg["grpo"]["num_prompts_per_step"] == 8
    assert cfg["policy"]["train_global_batch_size"] == 64  # interpolation sees the override
    assert cfg["darling"]["floor"] == 0
    with pytest.raises(ConfigError, match=r"unknown key 'grpo\.num_prompt_per_step'"):
        load_config(conf / "child.yaml", ["grpo.num_prompt_per_step=8"])
    with pytest.raises(ConfigError, match=r"no section 'polcy'"):
        load_config(conf / "child.yaml", ["polcy.lr=1"])


def test_plus_adds_and_tilde_deletes():
    cfg = apply_overrides({"a": {"b": 1}}, ["+a.c=[1, 2]", "+x.y=hi", "~a.b"])
    assert cfg == {"a": {"c": [1, 2]}, "x": {"y": "hi"}}
    with pytest.raises(ConfigError, match="does not exist"):
        apply_overrides({"a": {}}, ["~a.b"])
    with pytest.raises(ConfigError, match="not of the form key=value"):
        apply_overrides({"a": 1}, ["a"])


def test_yaml_error_names_file_and_line(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("grpo:\n  a: 1\n  b: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"{bad}:\d+:\d+: invalid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")


def test_defaults_cycle_is_reported(tmp_path):
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    with pytest.raises(ConfigError, match="defaults cycle"):
        load_config(tmp_path / "a.yaml")


def test_darling_schema_defaults_are_the_reference():
    cfg = validate_darling({})
    s = cfg.settings()
    assert (s.floor, s.fusion.value, s.baseline.value, s.normalize_std) == (
        0.1,
        "multiplicative",
        "mean",
        False,
    )
    assert (s.partition_scope.value, s.quality_shift.value, s.diversity) == (
        "all",
        "none",
        "semantic",
    )


def test_darling_schema_reports_every_bad_key_with_its_path():
    with pytest.raises(ConfigError) as err:
        validate_darling({"flor": 0.1, "fusion": "sum", "floor": 2})
    msg = str(err.value)
    assert "darling.flor: Extra inputs are not permitted" in msg
    assert "darling.fusion:" in msg
    assert "darling.floor:" in msg


def test_disabled_darling_is_plain_quality():
    assert validate_darling({"enabled": False}).settings().fusion.value == "quality_only"


def test_exponent_floats_are_floats_in_files_and_overrides(tmp_path):
    # PyYAML alone reads `1e-6` as the string "1e-6"; OmegaConf (NeMo-RL) reads a float.
    (tmp_path / "c.yaml").write_text("policy:\n  lr: 1e-6\n  name: 1e-6x\n  n: 10\n")
    cfg = load_config(tmp_path / "c.yaml", ["policy.n=2e3"])
    assert cfg["policy"]["lr"] == 1e-6 and isinstance(cfg["policy"]["lr"], float)
    assert cfg["policy"]["n"] == 2000.0
    assert cfg["policy"]["name"] == "1e-6x"
