"""What of the driver's environment reaches Ray (darling_nemo/nemo_rl/ray_env.py): the reward
environment's allow-list, and the allow-list the environment is narrowed to while NeMo-RL's
init_ray and setup() hand Ray the environment. No NeMo-RL needed; the rehearsal
(test_rehearsal.py, the math path) plants secrets and checks Ray's own tables end to end."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from darling_nemo.judges.auth import is_secret_name
from darling_nemo.nemo_rl import adapter, ray_env
from darling_nemo.nemo_rl.ray_env import (
    EXTRA_ENV,
    RAY_ENV_PREFIXES,
    RAY_ENV_VARS,
    REWARD_ENV_VARS,
    only_allowed_env,
    ray_env_vars,
    reward_env_vars,
    strip_url_credentials,
)
from darling_nemo.schema import ConfigError

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


# secrets under names no deny-list recognises (issue 45's attack), beside the usual ones
UNRECOGNISED = {
    "DATABASE_URL": "postgresql://app:db-pw-0123@db.internal/prod",
    "GH_PAT": "ghp_fake0123456789",
    "MYSQL_PWD": "pw-123",
    "GPG_PASSPHRASE": "correct horse",
    "SSH_KEYS": "ssh-ed25519 AAAAfake",
    "MYTOKEN": "tok-0123456789",
    "DB_PWD": "x7",
}


def test_only_allow_listed_names_are_set_while_init_ray_runs_and_all_come_back():
    driver = {**DRIVER_ENV, **UNRECOGNISED, "CUDA_VISIBLE_DEVICES": "0,1", "NRL_X": "1"}
    env = dict(driver)
    with only_allowed_env(env) as held:
        assert env == {
            "HF_HOME": "/shared/hf",
            "HF_HUB_OFFLINE": "1",
            "PATH": "/usr/bin",
            "PYTHONPATH": "/opt/darling-nemo",
            "CUDA_VISIBLE_DEVICES": "0,1",
            "NRL_X": "1",
        }
        assert held == sorted(set(driver) - set(env))
        env["VLLM_USE_V1"] = "1"  # what NeMo-RL sets for its workers meanwhile stays
    assert env == {**driver, "VLLM_USE_V1": "1"}
    with pytest.raises(ConnectionError), only_allowed_env(env):  # init_ray failing
        raise ConnectionError("no cluster")
    assert env == {**driver, "VLLM_USE_V1": "1"}


def test_a_proxy_keeps_its_host_and_loses_its_credentials_and_comes_back_whole():
    env = {
        "HTTPS_PROXY": "http://user:p@ss@proxy.site:3128",
        "http_proxy": "user:pass@proxy.site:3128",
        "NO_PROXY": "localhost,127.0.0.1",
    }
    before = dict(env)
    with only_allowed_env(env):
        assert env == {
            "HTTPS_PROXY": "http://proxy.site:3128",
            "http_proxy": "proxy.site:3128",
            "NO_PROXY": "localhost,127.0.0.1",
        }
    assert env == before
    assert strip_url_credentials("a http://h1/x,https://u:p@h2:1/") == "a http://h1/x,https://h2:1/"
    assert strip_url_credentials("me@site.org", "WANDB_USERNAME") == "me@site.org"


def test_an_extra_variable_passes_and_a_secret_looking_one_is_refused():
    env = {"PATH": "/usr/bin", "MY_SITE_SETTING": "on", EXTRA_ENV: "MY_SITE_SETTING, OTHER"}
    assert ray_env_vars(env) == env
    for name in ("MY_API_KEY", "SITE_PASSWORD", "GITHUB_TOKEN", "not-a-name"):
        env[EXTRA_ENV] = f"MY_SITE_SETTING,{name}"
        before = dict(env)
        with pytest.raises(ConfigError, match=EXTRA_ENV), only_allowed_env(env):
            pass
        assert env == before  # refused before anything changed


def test_every_name_and_prefix_has_a_reason_and_none_is_a_secret():
    for name, reason in {**RAY_ENV_VARS, **RAY_ENV_PREFIXES}.items():
        assert len(reason.split()) >= 4, name
        assert not is_secret_name(name), name


def test_a_secret_name_never_passes_even_under_an_allowed_prefix():
    env = {"HF_TOKEN": "t" * 20, "WANDB_API_KEY": "k" * 40, "DARLING_JUDGE_TOKEN": "j" * 43}
    env["DARLING_JUDGE_TOKEN_FILE"] = "/run/user/token"  # a path: the token stays in the file
    assert ray_env_vars(env) == {"DARLING_JUDGE_TOKEN_FILE": "/run/user/token"}


@given(
    st.dictionaries(
        st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,20}", fullmatch=True), st.text(max_size=5)
    )
)
def test_nothing_secret_or_unlisted_is_left_and_everything_comes_back(env):
    env.pop(EXTRA_ENV, None)
    before = dict(env)
    with only_allowed_env(env):
        assert not any(is_secret_name(name) for name in env)
        assert set(env) <= set(before)
        assert env == ray_env_vars(before)
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
        with only_allowed_env():
            # what wandb's login reads first (wandb 0.21.1, NeMo-RL v0.4.0's: _login ->
            # apikey.api_key(settings)), before the environment and netrc
            assert wandb.setup().settings.api_key == "k" * 40
    finally:
        wandb.teardown()
    assert not (tmp_path / ".netrc").exists()
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert not any(b"k" * 40 in path.read_bytes() for path in files)


def test_a_set_ray_address_is_the_running_cluster(monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    assert ray_env.running_ray_address() == "10.0.0.7:6379"
    with ray_env.ray_head_without_dashboard(Path("/nonexistent/ray.log")) as started:
        assert started is None  # a cluster runs: nothing is started, nothing written


@pytest.mark.nemo_rl
def test_without_a_cluster_init_ray_attaches_to_a_head_without_dashboard(tmp_path, monkeypatch):
    """NeMo-RL's own init_ray, where no Ray runs for the driver: it attaches to the head the
    recipe started (dashboard off, allow-listed environment), which stops with the block."""
    pytest.importorskip("nemo_rl")
    import ray
    from nemo_rl.distributed.virtual_cluster import init_ray
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # another test's Ray on this machine (CI runs two sessions) must not be taken for ours
    monkeypatch.setattr(ray_env, "running_ray_address", lambda: None)
    monkeypatch.setenv("DATABASE_URL", "postgres://u:planted-in-the-driver@db/x")
    with ray_env.ray_head_without_dashboard(tmp_path / "ray.log") as address:
        assert address is not None and os.environ["RAY_ADDRESS"] == address
        with ray_env.only_allowed_env():
            init_ray()
        try:
            # (Ray names a local address by the node's IP: the port tells the head)
            gcs = ray.get_runtime_context().gcs_address
            assert gcs.rsplit(":", 1)[1] == address.rsplit(":", 1)[1]
            dashboard = _internal_kv_get(
                ray_constants.DASHBOARD_ADDRESS, namespace=ray_constants.KV_NAMESPACE_DASHBOARD
            )
            # Ray 2.46 runs a minimal dashboard process even so, but its HTTP server (the
            # job API) does not listen at the address it registers
            host, dash_port = dashboard.decode().rsplit(":", 1)
            with socket.socket() as sock:
                assert sock.connect_ex((host, int(dash_port))) != 0
            env = ray.get(ray.remote(lambda: dict(os.environ)).remote())
            assert "DATABASE_URL" not in env  # the head's workers got the allow-list
        finally:
            ray.shutdown()
    assert "RAY_ADDRESS" not in os.environ
    port = int(address.rsplit(":", 1)[1])
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0  # the head is gone
