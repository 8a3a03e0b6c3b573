"""The YAML loader: `defaults:` inheritance, strict overrides, interpolation, clear errors."""

from __future__ import annotations

import re

import pytest
from helpers import REPO

from darling_nemo.config import (
    apply_overrides,
    check_model_path,
    check_output_dir,
    check_output_file,
    exits_on_config_error,
    load_config,
    load_validated,
)
from darling_nemo.evals.schema import MathEvalConfig
from darling_nemo.schema import (
    ClassifierTrainConfig,
    ConfigError,
    MiniConfig,
    TrlRunConfig,
    validate_darling,
    validate_section,
)

CONF = REPO / "conf"


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
    with pytest.raises(ConfigError, match=r"unknown key 'polcy'; did you mean 'policy'\?"):
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


def test_a_config_copied_out_of_conf_finds_its_defaults_and_a_missing_one_says_where(tmp_path):
    shipped = CONF / "code_tests_qwen3_1p7b_darling.yaml"
    copy = tmp_path / "mine.yaml"  # as docs/your-own-task.md says: copy it, then edit
    copy.write_text(shipped.read_text())
    assert load_config(copy) == load_config(shipped)
    (tmp_path / "local.yaml").write_text("darling:\n  floor: 0.2\n")  # beside it wins
    copy.write_text("defaults: [local.yaml, base/nowhere.yaml]\n")
    with pytest.raises(ConfigError) as err:
        load_config(copy)
    assert str(err.value) == (
        f"{copy}: defaults entry 'base/nowhere.yaml' not found (looked in "
        f"{tmp_path / 'base' / 'nowhere.yaml'}, {CONF / 'base' / 'nowhere.yaml'})"
    )


def test_defaults_cycle_is_reported(tmp_path):
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\n")
    with pytest.raises(ConfigError, match="defaults cycle"):
        load_config(tmp_path / "a.yaml")


def test_darling_schema_defaults_are_the_reference():
    cfg = validate_darling({})
    s = cfg.settings()
    assert (s.floor, s.fusion, s.baseline.value, s.normalize_std) == (
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
    assert "darling.flor: unknown key; did you mean 'darling.floor'?" in msg
    assert "darling.fusion: 'sum' is not one of multiplicative, additive, quality_only" in msg
    assert "darling.floor: must be <= 1.0, got 2" in msg


def test_disabled_darling_is_plain_quality():
    assert validate_darling({"enabled": False}).settings().fusion == "quality_only"


def test_exponent_floats_are_floats_in_files_and_overrides(tmp_path):
    # PyYAML alone reads `1e-6` as the string "1e-6"; OmegaConf (NeMo-RL) reads a float.
    (tmp_path / "c.yaml").write_text("policy:\n  lr: 1e-6\n  name: 1e-6x\n  n: 10\n")
    cfg = load_config(tmp_path / "c.yaml", ["policy.n=2e3"])
    assert cfg["policy"]["lr"] == 1e-6 and isinstance(cfg["policy"]["lr"], float)
    assert cfg["policy"]["n"] == 2000.0
    assert cfg["policy"]["name"] == "1e-6x"


# -- strict overrides know the schema's keys (issue 11) ---------------------------------------


@pytest.mark.parametrize(
    ("config", "schema", "override", "path", "value"),
    [
        # the TRL configs list no darling.floor: it is a schema default
        ("local/math_trl.yaml", None, "darling.floor=0.2", ("darling", "floor"), 0.2),
        ("local/wildchat_trl.yaml", None, "darling.floor=0.2", ("darling", "floor"), 0.2),
        ("local/math_trl.yaml", None, "trainer.top_p=0.9", ("trainer", "top_p"), 0.9),
        # a NeMo-RL config: its darling: section is the schema's
        (
            "math_qwen3_4b_darling.yaml",
            None,
            "darling.std_epsilon=1e-5",
            ("darling", "std_epsilon"),
            1e-5,
        ),
        ("mini/default.yaml", MiniConfig, "arms.grpo.floor=0", ("arms", "grpo", "floor"), 0),
        # recipes/darling_mini.py names no schema: an `arms:` config declares MiniConfig
        (
            "mini/default.yaml",
            None,
            "arms.darling.judge_rounds=one",
            ("arms", "darling", "judge_rounds"),
            "one",
        ),
        ("mini/default.yaml", MiniConfig, "warm_start.steps=3", ("warm_start", "steps"), 3),
        ("eval/math_tiny.yaml", MathEvalConfig, "sampling.seed=7", ("sampling", "seed"), 7),
        (
            "classifier/minilm_noveltybench.yaml",
            ClassifierTrainConfig,
            "max_steps=2",
            ("max_steps",),
            2,
        ),
    ],
)
def test_overrides_accept_every_key_the_schema_knows(config, schema, override, path, value):
    cfg = load_config(CONF / config, [override], schema)
    for part in path:
        cfg = cfg[part]
    assert cfg == value


def test_a_schema_key_inside_an_absent_section_keeps_the_default_variant(tmp_path):
    (tmp_path / "c.yaml").write_text("engine: trl\ntask: {kind: digit_sum}\n")
    # no darling: section at all; the judge's default kind is written with the threshold
    cfg = load_config(tmp_path / "c.yaml", ["darling.judge.threshold=0.3"])
    assert cfg["darling"] == {"judge": {"kind": "lexical", "threshold": 0.3}}
    assert validate_section(TrlRunConfig, cfg).darling.judge.threshold == 0.3
    # a kind chosen first decides which keys follow
    cfg = load_config(
        tmp_path / "c.yaml", ["darling.judge.kind=embedding", "darling.judge.cache_size=8"]
    )
    assert cfg["darling"]["judge"] == {"kind": "embedding", "cache_size": 8}
    with pytest.raises(ConfigError, match=r"unknown key 'darling\.judge\.cache_size'"):
        load_config(tmp_path / "c.yaml", ["darling.judge.cache_size=8"])  # lexical has none


def test_a_typo_is_answered_with_the_closest_key_not_with_plus():
    with pytest.raises(ConfigError) as err:
        load_config(CONF / "local" / "math_trl.yaml", ["darling.flor=0.2"])
    assert str(err.value) == (
        "override 'darling.flor=0.2': unknown key 'darling.flor'; did you mean 'darling.floor'?"
    )
    with pytest.raises(ConfigError) as err:
        load_config(CONF / "local" / "math_trl.yaml", ["darling.judge.xyz=1"])
    # (the smoke config's judge is the embedding judge: its keys are listed)
    assert "+" not in str(err.value)
    assert (
        "darling.judge has: batch_size, cache_size, calibration, device, head, kind, model, "
        "operating_point, threshold" in str(err.value)
    )
    # NeMo-RL's own sections take keys no schema lists: there `+` is the way to add one
    with pytest.raises(ConfigError) as err:
        load_config(CONF / "math_qwen3_4b_darling.yaml", ["grpo.max_num_step=3"])
    assert "did you mean 'grpo.max_num_steps'?" in str(err.value)
    assert "+grpo.max_num_step=..." in str(err.value)


def test_validation_messages_name_the_key_and_the_allowed_values():
    with pytest.raises(ConfigError) as err:
        validate_darling(
            {
                "judge": {
                    "kind": "served",
                    "template": "bert",
                    "endpoints": ["ftp://x", {"ur": "http://y"}],
                    "fallback": {"kind": "served"},
                }
            }
        )
    lines = str(err.value).splitlines()[1:]
    assert lines == [
        "  darling.judge.endpoints[0].url: endpoint url must start with http:// or https://, "
        "got 'ftp://x'",
        "  darling.judge.endpoints[1].url: missing (required)",
        "  darling.judge.endpoints[1].ur: unknown key; did you mean "
        "'darling.judge.endpoints[1].url'?",
        "  darling.judge.template: 'bert' is not one of modernbert, qwen3_math",
        "  darling.judge.fallback.kind: 'served' is not one of lexical, cross_encoder, embedding",
    ]
    with pytest.raises(ConfigError) as err:
        validate_darling({"judge": {"kind": "bogus"}, "enabled": "maybe"})
    message = str(err.value)
    assert "darling.enabled: must be true or false, got 'maybe'" in message
    assert (
        "darling.judge.kind: 'bogus' is not one of lexical, cross_encoder, embedding, served, "
        "ray_pool" in message
    )
    with pytest.raises(ConfigError) as err:
        validate_section(TrlRunConfig, {"engine": "trl"})
    assert str(err.value).endswith(
        "task: missing (required; one of digit_sum, lattice_routes, math, chat, reward_funcs)"
    )
    for pydantic_wording in ("Input", "Extra inputs", "Field required", "Value error"):
        assert pydantic_wording not in message


def test_load_validated_names_the_file_and_the_schema_defaults_need_no_file(tmp_path):
    cfg, raw = load_validated(None, ["epochs=2"], ClassifierTrainConfig)
    assert cfg.epochs == 2 and raw == {"epochs": 2}
    (tmp_path / "c.yaml").write_text("epochs: -1\nbatch_size: 0\n")
    # several problems: a header and one line each, all at once
    with pytest.raises(ConfigError) as err:
        load_validated(tmp_path / "c.yaml", [], ClassifierTrainConfig)
    assert str(err.value).splitlines() == [
        f"{tmp_path / 'c.yaml'}: invalid config:",
        "  epochs: must be > 0.0, got -1",
        "  batch_size: must be >= 1, got 0",
    ]
    # one problem: one line
    with pytest.raises(ConfigError) as err:
        load_validated(tmp_path / "c.yaml", ["batch_size=1"], ClassifierTrainConfig)
    assert str(err.value) == f"{tmp_path / 'c.yaml'}: epochs: must be > 0.0, got -1"


def test_every_config_error_ends_a_command_with_one_line_and_exit_code_2(tmp_path, capsys):
    written = tmp_path / "written"

    @exits_on_config_error("demo")
    def main(argv: list[str]) -> int:
        load_validated(tmp_path / "missing.yaml", argv, ClassifierTrainConfig)
        written.write_text("")  # never reached
        return 0

    assert main([]) == 2
    assert capsys.readouterr().err == f"demo: config file not found: {tmp_path / 'missing.yaml'}\n"
    assert not written.exists()


def test_a_null_or_scalar_is_not_a_section():
    cfg = {"a": {"b": None, "d": 3}}
    with pytest.raises(
        ConfigError, match=r"'a\.b' is null, not a section \(\+a\.b\.c=\.\.\. makes"
    ):
        apply_overrides(cfg, ["a.b.c=1"])
    assert apply_overrides(cfg, ["+a.b.c=1"]) == {"a": {"b": {"c": 1}, "d": 3}}
    with pytest.raises(ConfigError, match=r"'a\.d' is a value, not a section$"):
        apply_overrides(cfg, ["+a.d.c=1"])


# ---------------------------------------------------------------------------------------------
# What only this machine can check: output folders and files, model folders
# ---------------------------------------------------------------------------------------------


def test_an_output_folder_is_checked_without_leaving_anything(tmp_path):
    (tmp_path / "afile").write_text("")
    check_output_dir(tmp_path / "new" / "run")  # not there yet: fine, and not made
    check_output_dir(tmp_path)  # there: fine
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the probe folder is gone
    with pytest.raises(ConfigError, match=rf"^output_dir: {tmp_path}/afile is a file"):
        check_output_dir(tmp_path / "afile")
    with pytest.raises(ConfigError, match=rf"^key: {tmp_path}/afile/x lies under {tmp_path}/afile"):
        check_output_dir(tmp_path / "afile" / "x", "key")
    # a folder that takes no new folder, whoever runs this (root included)
    with pytest.raises(ConfigError, match=r"^output_dir: cannot write in /proc \("):
        check_output_dir("/proc/darling/run")


def test_an_output_file_is_not_a_folder_and_its_folder_is_writable(tmp_path):
    (tmp_path / "afile").write_text("")
    check_output_file(tmp_path / "new" / "out.jsonl", "--out")
    check_output_file(tmp_path / "afile", "--out")  # an existing file is overwritten
    with pytest.raises(ConfigError, match=rf"^--out: {tmp_path} is a folder, not a file"):
        check_output_file(tmp_path, "--out")
    with pytest.raises(ConfigError, match=r"^-o: .*/afile/out\.jsonl lies under .*/afile, which"):
        check_output_file(tmp_path / "afile" / "out.jsonl", "-o")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


@pytest.mark.parametrize(
    "model",
    ["/no/such/model", "./no-such-model", "../no-such-model", "~/no-such-model", "a/b/c"],
)
def test_a_model_written_as_a_path_must_be_a_folder_here(model):
    with pytest.raises(ConfigError, match=rf"^policy\.name_or_path: no such model folder {model} "):
        check_model_path(model, "policy.name_or_path")


@pytest.mark.parametrize("model", ["Qwen/Qwen3-4B-Base", "gpt2", None, str(REPO / "conf")])
def test_hub_names_and_existing_folders_pass_the_model_check(model):
    check_model_path(model, "policy.name_or_path")  # hub names are the hub's to answer


def test_a_nemo_rl_run_checks_its_paths_before_nemo_rl_starts(tmp_path, monkeypatch):
    """What recipe.check_nemo_rl_paths reads from a real shipped config: the data files, the
    log and checkpoint folders, the policy's and the judge's model paths, each by key."""
    from darling_nemo.recipe import check_nemo_rl_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "data").mkdir()
    config = CONF / "math_qwen3_4b_darling.yaml"
    cfg = load_config(config, [])
    for key in ("prompt_file", "system_prompt_file", "train_data_path", "val_data_path"):
        if isinstance(cfg["data"][key], str):  # relative to the cwd, as NeMo-RL reads them
            (tmp_path / cfg["data"][key]).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / cfg["data"][key]).write_text("{}\n")
    darling = validate_darling(cfg["darling"])
    check_nemo_rl_paths(cfg, darling)  # as shipped, its data in place: fine
    cases = [
        ("data.train_data_path=missing.jsonl", "data.train_data_path: file not found"),
        ("logger.log_dir=afile/logs", "logger.log_dir: afile/logs lies under afile"),
        ("checkpointing.checkpoint_dir=afile", "checkpointing.checkpoint_dir: afile is a file"),
        ("policy.model_name=/no/such/model", "policy.model_name: no such model folder"),
        ("darling.judge={kind: cross_encoder}", None),  # a hub name: the hub's to answer
    ]
    for override, message in cases:
        changed = load_config(config, [override])
        if message is None:
            check_nemo_rl_paths(changed, validate_darling(changed["darling"]))
            continue
        with pytest.raises(ConfigError, match=rf"^{re.escape(message)}"):
            check_nemo_rl_paths(changed, validate_darling(changed["darling"]))
