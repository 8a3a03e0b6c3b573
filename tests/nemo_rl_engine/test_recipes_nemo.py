"""recipes/darling_math.py and darling_wildchat.py up to the point NeMo-RL is needed (no GPU).

The NeMo-RL part itself (setup + grpo_train with the hook) runs in
tests/nemo_rl_engine/test_nemo_rl_integration.py when nemo_rl is importable.
"""

from __future__ import annotations

import importlib.util

import pytest
import yaml
from helpers import REPO


def recipe(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("name", "config"),
    [
        ("darling_math", "conf/math_qwen3_4b_darling.yaml"),
        ("darling_math", "conf/math_qwen3_14b_grpo.yaml"),
        ("darling_wildchat", "conf/wildchat_llama8b_darling.yaml"),
        ("darling_wildchat", "conf/wildchat_llama70b_grpo.yaml"),
    ],
)
def test_dry_run_prints_the_resolved_config(name, config, capsys):
    endpoints = "darling.judge.endpoints=[http://node7:8000,http://node7:8001]"
    assert recipe(name).main(["--config", str(REPO / config), "--dry-run", endpoints]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["darling"]["judge"]["endpoints"] == ["http://node7:8000", "http://node7:8001"]
    assert "defaults" not in printed and "${" not in yaml.safe_dump(printed)


def test_config_errors_exit_2_with_every_key_path(capsys):
    main = recipe("darling_math").main
    config = str(REPO / "conf/math_qwen3_4b_darling.yaml")
    assert main(["--config", config, "--dry-run", "grpo.normalise_rewards=true"]) == 2
    assert "unknown key 'grpo.normalise_rewards'" in capsys.readouterr().err
    args = ["grpo.normalize_rewards=true", "grpo.async_grpo.enabled=true"]
    assert main(["--config", config, "--dry-run", *args]) == 2
    err = capsys.readouterr().err
    assert "grpo.normalize_rewards=true contradicts darling.normalize_std=false" in err
    assert "grpo.async_grpo.enabled=true is not supported" in err
    # a math recipe refuses a reward-model config and the other way round
    wildchat = str(REPO / "conf/wildchat_llama8b_darling.yaml")
    assert main(["--config", wildchat, "--dry-run"]) == 2
    assert "recipes/darling_wildchat.py" in capsys.readouterr().err
    assert recipe("darling_wildchat").main(["--config", config, "--dry-run"]) == 2
    assert "recipes/darling_math.py" in capsys.readouterr().err


def test_without_nemo_rl_the_recipe_says_how_to_run_it(capsys):
    try:
        import nemo_rl  # noqa: F401

        pytest.skip("nemo_rl is importable here")
    except ImportError:
        pass
    config = REPO / "conf/math_qwen3_4b_darling.yaml"
    assert recipe("darling_math").main(["--config", str(config)]) == 2
    message = capsys.readouterr().err
    assert message.startswith(f"darling_math: {config}: engine: nemo_rl needs NeMo-RL")
    assert "NeMo-RL v0.4.0" in message and "No module named 'nemo_rl'" in message
    assert "docker run" in message and "srun --container-image" in message
    assert "uv run recipes/darling_math.py --config " in message  # the command to rerun there
    assert "engine: trl" in message


# ---------------------------------------------------------------------------------------------
# No --config: the recipe chooses the config that fits the machine, and says so
# ---------------------------------------------------------------------------------------------

NO_NEMO_RL = importlib.util.find_spec("nemo_rl") is None


@pytest.mark.skipif(not NO_NEMO_RL, reason="checks the choice on a machine without NeMo-RL")
@pytest.mark.parametrize(
    ("name", "chosen"),
    [
        ("darling_math", "conf/local/math_trl.yaml"),
        ("darling_wildchat", "conf/local/wildchat_trl.yaml"),
    ],
)
def test_no_config_chooses_the_single_machine_engine_and_says_why(name, chosen, capsys):
    assert recipe(name).main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"no --config given; NeMo-RL is not importable here: running {chosen}" in out
    assert "--config conf/" in out  # the hint: the paper's setup
    assert yaml.safe_load(out.split("\n", 2)[2])["engine"] == "trl"


def test_no_config_on_a_nemo_rl_gpu_machine_chooses_the_one_node_config(monkeypatch, capsys):
    from darling_nemo import recipe as library

    monkeypatch.setattr(library, "nemo_rl_with_gpus", lambda: (True, "NeMo-RL and 8 GPUs"))
    assert recipe("darling_wildchat").main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "running conf/wildchat_qwen3_1p7b_1node_darling.yaml" in out


@pytest.mark.parametrize("name", ["darling_math", "darling_wildchat"])
def test_help_shows_the_no_argument_behaviour_and_an_example(name, capsys):
    with pytest.raises(SystemExit) as done:
        recipe(name).main(["--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "With no --config:" in text and "--rehearse" in text
    assert f"example: uv run recipes/{name}.py --config conf/" in text


@pytest.mark.slow
@pytest.mark.skipif(not NO_NEMO_RL, reason="the CPU default runs where NeMo-RL is absent")
@pytest.mark.parametrize("name", ["darling_math", "darling_wildchat"])
def test_no_argument_run_finishes_on_cpu_with_darling_metrics(name, tmp_path, capsys):
    # One step of what `uv run recipes/<name>.py` runs here (the full default takes minutes).
    assert recipe(name).main(["trainer.max_steps=1", f"output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    assert "'darling/diversity_mean'" in out and "'darling/classes_per_group'" in out
