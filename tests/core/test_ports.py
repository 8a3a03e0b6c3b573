"""darling_nemo/ports.py: a free port, whether one is open, and waiting for a child to serve
(what the NeMo-RL engine's Ray head, the rehearsal, the smoke run and the step-time
benchmark share), with the Ray head's own messages kept (`nemo_rl/ray_env._wait_for_port`)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from darling_nemo.nemo_rl import ray_env
from darling_nemo.ports import NotReady, free_port, port_open, wait_until


def test_a_free_port_is_closed_until_something_listens():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        port = server.getsockname()[1]
        assert not port_open(port)
        server.listen()
        assert port_open(port)
    assert 0 < free_port() < 65536


def test_wait_until_returns_once_the_check_holds():
    calls = iter([False, True])
    wait_until(lambda: next(calls), 30, "thing")


def test_wait_until_names_a_process_that_exited_and_its_status():
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(NotReady) as err:
        wait_until(lambda: False, 30, "server", proc)
    assert str(err.value) == "server: the process exited with status 3"
    assert err.value.exit_status == 3 and isinstance(err.value, RuntimeError)


def test_wait_until_gives_up_after_its_time():
    with pytest.raises(NotReady) as err:
        wait_until(lambda: False, 0, "server")
    assert str(err.value) == "server: not ready after 0 s" and err.value.exit_status is None


def test_the_ray_heads_messages_are_its_own(monkeypatch):
    log = Path("ray.log")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(2)"])
    proc.wait()
    with pytest.raises(ray_env.RayStartError) as err:
        ray_env._wait_for_port(free_port(), proc, log)
    assert str(err.value) == "ray start exited with status 2; see ray.log"
    monkeypatch.setattr(ray_env, "RAY_HEAD_START_S", 0)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        port = free_port()
        with pytest.raises(ray_env.RayStartError) as err:
            ray_env._wait_for_port(port, running, log)
        assert str(err.value) == f"ray start: no head on port {port} after 0 s; see ray.log"
    finally:
        running.kill()
        running.wait()
