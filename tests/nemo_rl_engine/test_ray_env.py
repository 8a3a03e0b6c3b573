"""What of the driver's environment reaches Ray (darling_nemo/nemo_rl/ray_env.py): the reward
environment's allow-list, and the secrets held back while NeMo-RL's init_ray hands Ray the
environment. No NeMo-RL needed; the rehearsal (test_rehearsal.py, the math path) checks Ray's
own tables end to end."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from darling_nemo.judges.auth import is_secret_name
from darling_nemo.nemo_rl import adapter
from darling_nemo.nemo_rl.ray_env import REWARD_ENV_VARS, reward_env_vars, secrets_withheld

DRIVER_ENV = {
    "WANDB_API_KEY": "wandb-fake-0123456789",
    "HF_TOKEN": "hf_fake0123456789",
    "DARLING_JUDGE_TOKEN": "judge-fake-0123456789",
    "AWS_SECRET_ACCESS_KEY": "aws-fake-0123456789",
    "HF_HOME": "/shared/hf",
    "HF_HUB_OFFLINE": "1",
    "PATH": "/usr/bin",
    "PYTHONPATH": "/opt/darling-nemo",
}


def test_the_reward_environment_gets_the_allow_list_only():
    assert reward_env_vars(DRIVER_ENV) == {
        "HF_HOME": "/shared/hf",
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": "/opt/darling-nemo",
    }


def test_every_allowed_name_has_a_reason_and_none_is_a_secret():
    for name, reason in REWARD_ENV_VARS.items():
        assert len(reason.split()) >= 4, name
        assert not is_secret_name(name), name


def test_the_adapter_starts_the_reward_environment_with_the_allow_list():
    # the one runtime_env the adapter gives an actor of its own; the driver's whole
    # environment (dict(os.environ)) would carry every secret into Ray's actor table
    source = adapter.setup_data.__code__.co_names
    assert "reward_env_vars" in source and "environ" not in source


def test_secrets_are_withheld_while_init_ray_runs_and_come_back():
    env = dict(DRIVER_ENV)
    with secrets_withheld(env) as held:
        assert held == ["AWS_SECRET_ACCESS_KEY", "DARLING_JUDGE_TOKEN", "HF_TOKEN", "WANDB_API_KEY"]
        assert set(env) == {"HF_HOME", "HF_HUB_OFFLINE", "PATH", "PYTHONPATH"}
    assert env == DRIVER_ENV
    with pytest.raises(ConnectionError), secrets_withheld(env):  # init_ray failing
        raise ConnectionError("no cluster")
    assert env == DRIVER_ENV


@given(st.dictionaries(st.from_regex(r"[A-Z][A-Z0-9_]{0,20}", fullmatch=True), st.text(max_size=5)))
def test_nothing_secret_is_left_and_nothing_else_is_touched(env):
    before = dict(env)
    with secrets_withheld(env):
        assert not any(is_secret_name(name) for name in env)
        assert env == {k: v for k, v in before.items() if not is_secret_name(k)}
    assert env == before


def test_wandb_gets_its_key_from_its_settings_and_writes_no_netrc(tmp_path, monkeypatch):
    # NeMo-RL's setup() starts the wandb run while WANDB_API_KEY is held back: wandb must find
    # the key in its settings, and (a key handed over so) write it to no netrc
    wandb = pytest.importorskip("wandb")

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    from darling_nemo.nemo_rl.ray_env import hand_wandb_its_key

    try:
        hand_wandb_its_key({"WANDB_API_KEY": "k" * 40})
        with secrets_withheld():
            # what wandb's login reads first (wandb 0.21.1, NeMo-RL v0.4.0's: _login ->
            # apikey.api_key(settings)), before the environment and netrc
            assert wandb.setup().settings.api_key == "k" * 40
    finally:
        wandb.teardown()
    assert not (tmp_path / ".netrc").exists()
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert not any(b"k" * 40 in path.read_bytes() for path in files)
