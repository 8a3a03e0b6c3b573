"""The commands users type: one config-error path (one message naming the file, line or
key path; exit code 2; nothing written), `--help` with an example command, and closed sets
of option values listed from the schema."""

from __future__ import annotations

import importlib.util
import shlex
from typing import get_args

import pytest
from helpers import REPO

from darling_nemo import data_prep, score, serve_classifiers
from darling_nemo.schema import JudgeConfig


def recipe_main(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


RECIPES = ["eval_math", "eval_noveltybench", "eval_creative", "plot_runs", "train_classifier"]
COMMANDS = {
    "darling-score": score.main,
    "darling-serve-classifiers": serve_classifiers.main,
    "darling-prep-math": data_prep.main_math,
    "darling-prep-wildchat": data_prep.main_wildchat,
}


def help_text(main, capsys) -> str:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", RECIPES + list(COMMANDS))
def test_help_ends_with_one_example_command_that_names_real_files(name, capsys):
    main = COMMANDS[name] if name in COMMANDS else recipe_main(name)
    text = help_text(main, capsys)
    example = text.split("\nexample:\n", 1)[1].strip()
    assert len(example.splitlines()) == 1  # one command
    words = shlex.split(example)
    expected_start = ["uv", "run", f"recipes/{name}.py"] if name in RECIPES else [name]
    assert words[: len(expected_start)] == expected_start
    if "--config" in words:  # the example's config file exists
        assert (REPO / words[words.index("--config") + 1]).is_file()


def test_judge_kinds_in_help_come_from_the_schema(capsys):
    kinds = [model.model_fields["kind"].default for model in get_args(get_args(JudgeConfig)[0])]
    assert kinds == ["lexical", "cross_encoder", "embedding", "served", "ray_pool"]
    assert "--judge {" + ",".join(kinds) + "}" in help_text(score.main, capsys)
    with pytest.raises(SystemExit) as done:
        score.main(["groups.jsonl", "--judge", "bogus"])
    assert done.value.code == 2
    assert "--judge: invalid choice: 'bogus' (choose from 'lexical', 'cross_encoder'" in (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("name", ["eval_math", "eval_noveltybench", "eval_creative"])
def test_eval_recipes_end_config_errors_with_exit_2_and_write_nothing(name, tmp_path, capsys):
    main = recipe_main(name)
    out = tmp_path / "out"
    missing = tmp_path / "missing.yaml"
    assert main(["--config", str(missing), f"output_dir={out}"]) == 2
    assert capsys.readouterr().err == f"{name}: config file not found: {missing}\n"
    config = REPO / "conf" / "eval" / f"{name.removeprefix('eval_')}_tiny.yaml"
    assert main(["--config", str(config), f"output_dir={out}", "generator.modle=x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{name}: override 'generator.modle=x': unknown key 'generator.modle'")
    assert "did you mean 'generator.model'?" in err
    assert main(["--config", str(config), f"output_dir={out}", "generator.backend=vllx"]) == 2
    err = capsys.readouterr().err
    # one problem, one line (creative's tiny config names its prompts and judge.model too)
    assert f"{name}: {config}: invalid config:\n" not in err
    assert "generator.backend: 'vllx' is not one of vllm, transformers\n" in err
    # The tiny YAMLs leave generator.model unset, and no run=... is given either (the
    # whole-config check runs once every key is valid).
    assert main(["--config", str(config), f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "set exactly one of `run` (a training run) and `generator.model`" in err
    assert not out.exists()


def test_plot_runs_reports_a_missing_or_malformed_summary_with_exit_2(tmp_path, capsys):
    main = recipe_main("plot_runs")
    out = tmp_path / "plots"
    assert main([str(tmp_path / "none"), "--out", str(out)]) == 2
    assert (
        capsys.readouterr().err == f"plot_runs: no summary.json at or under {tmp_path / 'none'}\n"
    )
    bad = tmp_path / "run" / "summary.json"
    bad.parent.mkdir()
    bad.write_text('{"eval": "math",\n "run_name": "x" "y"}\n')
    assert main([str(bad.parent), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"plot_runs: {bad}:2: not valid JSON: Expecting ',' delimiter (column 18)\n"
    assert not out.exists()


def test_the_other_commands_share_the_exit_code_and_message_form(tmp_path, capsys):
    missing = tmp_path / "missing.yaml"
    assert serve_classifiers.main(["--config", str(missing), "--dry-run"]) == 2
    assert (
        capsys.readouterr().err == f"darling-serve-classifiers: config file not found: {missing}\n"
    )
    out = tmp_path / "out.jsonl"
    assert data_prep.main_math([str(tmp_path / "none.jsonl"), "--out", str(out)]) == 2
    assert (
        capsys.readouterr().err == f"darling-prep-math: {tmp_path / 'none.jsonl'}: no such file\n"
    )
    groups = tmp_path / "groups.jsonl"
    groups.write_text('{"responses": ["a", "b"], "quality": [1, 0]}\n')
    assert score.main([str(groups), "-o", str(out), "--set", "flor=0"]) == 2
    assert capsys.readouterr().err == (
        "darling-score: override 'flor=0': unknown key 'flor'; did you mean 'floor'?\n"
    )
    assert not out.exists()


@pytest.mark.parametrize("recipe", ["darling_mini"])
def test_ctrl_c_while_a_recipe_starts_ends_in_one_line(recipe, tmp_path):
    """SIGINT half a second in: the recipe is importing torch and the rest (seconds on any
    machine), which used to end in the traceback of whichever import it hit. Every recipe
    starts with the same `quiet_start`; the miniature's imports (torch at the top) keep it in
    that window for seconds, where darling_math's `--dry-run` can be past it in 0.5 s on an
    idle machine."""
    import signal
    import time

    from helpers import RECIPE_ENV, start_recipe_as_from_a_terminal

    script = str(REPO / "recipes" / f"{recipe}.py")
    proc = start_recipe_as_from_a_terminal([script, f"output_dir={tmp_path / 'o'}"], RECIPE_ENV)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"{recipe}: interrupted (Ctrl-C)"), err
    assert not (tmp_path / "o").exists()
