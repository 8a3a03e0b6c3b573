"""The one-node configs' classifier server (darling_nemo/judges/node_server.py): the judge
chosen with and without a GPU, and the server's life with a real process on 127.0.0.1 (a
small HTTP server standing in for `vllm serve`, tests/judges/health_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
from helpers import REPO

from darling_nemo.config import load_config
from darling_nemo.judges import auth
from darling_nemo.judges.node_server import (
    NodeServerError,
    choose_node_judge,
    node_classifier_server,
    server_command,
    start_node_judge,
    visible_gpu_count,
)
from darling_nemo.ports import free_port
from darling_nemo.schema import (
    ConfigError,
    EmbeddingJudgeConfig,
    NodeServerConfig,
    ServedJudgeConfig,
    validate_darling,
)

SERVER = Path(__file__).with_name("health_server.py")
ONE_NODE = ["wildchat_qwen3_1p7b_1node_darling.yaml", "math_qwen3_1p7b_1node_darling.yaml"]


def served_by_a_test_server(port: int) -> bool:
    """Whether a test server (health_server.py) still listens on `port`. Not `port_open`:
    once the server is gone its free port may be taken again by anything, e.g. the Ray head
    of a NeMo-RL session running beside this suite in CI (it failed this test once so)."""
    import psutil  # (accelerate's dependency)

    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            try:
                if str(SERVER) in " ".join(psutil.Process(conn.pid).cmdline()):
                    return True
            except psutil.NoSuchProcess:
                continue
    return False


def launch(mode: str = "ok", **kw) -> NodeServerConfig:
    return NodeServerConfig(
        model=mode,
        port=free_port(),
        executable=f"{sys.executable} {SERVER}",
        **{"ready_timeout_s": 120.0, **kw},
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose (exited, only not yet reaped by its parent)
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[1].startswith("Z"))


def wait_dead(pid: int, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s  # generous: a loaded machine, never asserted on
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def record(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "record"
    monkeypatch.setenv("HEALTH_SERVER_RECORD", str(path))
    # the recipe puts the run's token in its own environment: undone after each test
    monkeypatch.setenv(auth.TOKEN_ENV, "set-by-the-test")
    monkeypatch.delenv(auth.TOKEN_ENV)
    return path


@pytest.mark.parametrize("given", [None, "a-token-the-user-gave-0123456789"])
def test_the_server_gets_the_runs_token_in_its_environment_only(
    tmp_path, record, given, monkeypatch
):
    if given:
        monkeypatch.setenv(auth.TOKEN_ENV, given)
    with node_classifier_server(launch(), tmp_path / "server.log", announce=False):
        token = os.environ[auth.TOKEN_ENV]  # the driver's served judge reads it here
        argv, seen = Path(f"{record}.token").read_text().split("\n")
    assert seen == token
    assert token == given if given else len(token) >= 40  # the user's, or a new one
    assert token not in argv and f"--middleware {auth.MIDDLEWARE}" in argv
    assert token not in (tmp_path / "server.log").read_text()


# --- which judge runs ------------------------------------------------------------------------


def test_no_gpu_falls_back_to_the_calibrated_cpu_judge_and_says_why():
    served = ServedJudgeConfig(launch=NodeServerConfig())
    judge, line = choose_node_judge(served, gpus=0)
    assert isinstance(judge, EmbeddingJudgeConfig)
    assert judge.head == "calibrated" and judge.model is None  # the shipped calibrated judge
    assert line.startswith("darling judge: embedding") and "no CUDA GPU" in line
    assert "darling.judge.launch.no_gpu=embedding" in line


def test_no_gpu_with_no_gpu_fail_is_an_error_naming_the_key():
    served = ServedJudgeConfig(launch=NodeServerConfig(no_gpu="fail"))
    with pytest.raises(NodeServerError, match=r"launch\.no_gpu"):
        choose_node_judge(served, gpus=0)


def test_with_a_gpu_or_a_cpu_server_the_served_judge_stays():
    served = ServedJudgeConfig(launch=NodeServerConfig(gpu=2))
    judge, line = choose_node_judge(served, gpus=8)
    assert judge is served and "on GPU 2 at http://127.0.0.1:8000" in line
    cpu = ServedJudgeConfig(launch=NodeServerConfig(needs_gpu=False))
    judge, line = choose_node_judge(cpu, gpus=0)
    assert judge is cpu and "CPU (needs_gpu: false)" in line


def test_without_launch_nothing_is_chosen():
    served = ServedJudgeConfig()
    assert choose_node_judge(served, gpus=0) == (served, None)
    embedding = EmbeddingJudgeConfig()
    assert choose_node_judge(embedding, gpus=8) == (embedding, None)


@pytest.mark.skipif(visible_gpu_count() > 0, reason="the no-GPU path, on a machine with none")
@pytest.mark.parametrize("name", ONE_NODE)
def test_one_node_config_without_a_gpu_runs_the_cpu_judge(name, capsys):
    cfg = load_config(REPO / "conf" / name)
    darling = validate_darling(cfg["darling"])
    with ExitStack() as services:
        new_cfg, new_darling = start_node_judge(cfg, darling, services)
    assert new_darling.judge.kind == "embedding" and new_darling.judge.head == "calibrated"
    assert new_cfg["darling"]["judge"]["kind"] == "embedding"  # what the run saves
    assert cfg["darling"]["judge"]["kind"] == "served"  # the caller's dict is left alone
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].startswith("darling judge: embedding")


def test_launch_owns_the_endpoints():
    judge = ServedJudgeConfig(launch=NodeServerConfig(port=8123))
    assert [e.url for e in judge.endpoints] == ["http://127.0.0.1:8123"]
    same = ServedJudgeConfig(endpoints=["http://127.0.0.1:8123"], launch={"port": 8123})
    assert same.endpoints == judge.endpoints  # a dumped config reloads
    with pytest.raises(ConfigError, match=r"darling\.judge: .*endpoints.*launch"):
        validate_darling(
            {"judge": {"kind": "served", "endpoints": ["http://other:8000"], "launch": {}}}
        )


def test_the_command_is_vllms():
    env, argv = server_command(NodeServerConfig(gpu=3, max_model_len=8320, extra_args=["--x"]))
    assert env == {"CUDA_VISIBLE_DEVICES": "3"}
    assert argv == [
        "vllm", "serve", "dogtooth/similarity-classifier-f168-hf", "--task", "classify",
        "--host", "127.0.0.1", "--port", "8000", "--gpu-memory-utilization", "0.06",
        "--middleware", "darling_nemo.judges.auth.BearerTokenAuth", "--max-model-len", "8320",
        "--x",
    ]  # fmt: skip
    env, _ = server_command(NodeServerConfig(needs_gpu=False))
    assert env == {}  # a CPU stand-in keeps the caller's CUDA_VISIBLE_DEVICES


# --- the server's life -------------------------------------------------------------------


def test_start_waits_for_health_and_stop_ends_the_process(tmp_path, record):
    cfg = launch(gpu=3)
    with node_classifier_server(cfg, tmp_path / "server.log", announce=False) as proc:
        with urllib.request.urlopen(f"{cfg.url}/health", timeout=10) as reply:
            assert reply.status == 200
        pid, cuda = record.read_text().split()
        assert int(pid) == proc.pid and cuda == "3"
    assert proc.returncode is not None  # waited for: exited and reaped
    assert not served_by_a_test_server(cfg.port)
    assert "health_server: ok" in (tmp_path / "server.log").read_text()


def test_an_error_inside_the_run_still_stops_the_server(tmp_path, record):
    cfg = launch()
    with (
        pytest.raises(ValueError, match="training failed"),
        node_classifier_server(cfg, tmp_path / "server.log", announce=False),
    ):
        raise ValueError("training failed")
    pid = int(record.read_text().split()[0])
    assert wait_dead(pid) and not served_by_a_test_server(cfg.port)


def test_a_server_that_exits_at_start_is_one_clear_error(tmp_path, record):
    log = tmp_path / "server.log"
    with (
        pytest.raises(NodeServerError) as err,
        node_classifier_server(launch("exit"), log, announce=False),
    ):
        pytest.fail("the block must not run")
    message = str(err.value)
    assert "exited with status 3 before answering GET /health" in message
    assert str(log) in message and "asked to fail at start" in message


def test_a_server_never_healthy_times_out_and_is_stopped(tmp_path, record):
    cfg = launch("never", ready_timeout_s=1.0)
    with (
        pytest.raises(NodeServerError, match=r"ready_timeout_s=1\b"),
        node_classifier_server(cfg, tmp_path / "server.log", announce=False),
    ):
        pytest.fail("the block must not run")
    # On a loaded machine the server may be stopped before it wrote its record: then look for
    # any process of it (its command line names the script and the port) instead.
    pids = [int(record.read_text().split()[0])] if record.exists() else server_pids(cfg.port)
    assert all(wait_dead(pid) for pid in pids) and not server_pids(cfg.port)
    assert not served_by_a_test_server(cfg.port)


def server_pids(port: int) -> list[int]:
    """Living processes of health_server.py started on `port` (by their command lines)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:  # gone meanwhile
            continue
        if str(SERVER).encode() in words and str(port).encode() in words:
            pid = int(cmdline.parent.name)
            if alive(pid):
                pids.append(pid)
    return pids


def test_a_missing_executable_names_the_key(tmp_path):
    cfg = NodeServerConfig(executable="/nonexistent/vllm", port=free_port())
    with (
        pytest.raises(NodeServerError, match=r"launch\.executable: cannot run '/nonexistent/vllm'"),
        node_classifier_server(cfg, tmp_path / "server.log", announce=False),
    ):
        pass


PARENT = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    from darling_nemo.judges.node_server import node_classifier_server
    # Ctrl-C raises KeyboardInterrupt, as in a terminal, even when pytest itself was started
    # in the background by a shell without job control (which ignores SIGINT for it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from darling_nemo.schema import NodeServerConfig
    cfg = NodeServerConfig(model="ok", port={port}, executable={exe!r}, ready_timeout_s=120)
    try:
        with node_classifier_server(cfg, Path({log!r})):
            print("RUNNING", flush=True)
            time.sleep(600)
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
        sys.exit(130)
    """
)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_a_recipe_stopped_by_a_signal_takes_its_server_with_it(tmp_path, record, sig):
    """Ctrl-C, a scheduler's SIGTERM, even SIGKILL of the recipe: the server goes too."""
    port = free_port()
    code = PARENT.format(
        port=port, exe=f"{sys.executable} {SERVER}", log=str(tmp_path / "server.log")
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=REPO
    )
    try:
        assert (
            parent.stdout.readline().strip().endswith("(log: " + str(tmp_path / "server.log") + ")")
        )
        assert "healthy" in parent.stdout.readline()
        assert parent.stdout.readline().strip() == "RUNNING"
        server_pid = int(record.read_text().split()[0])
        assert alive(server_pid)
        parent.send_signal(sig)
        rest = parent.communicate(timeout=120)[0]
    finally:
        if parent.poll() is None:
            parent.kill()
    if sig != signal.SIGKILL:  # the `finally` ran: stopped in order, then the interrupt
        assert "classifier server: stopped" in rest and "INTERRUPTED" in rest
        assert parent.returncode == 130
    assert wait_dead(server_pid)  # SIGKILL: PR_SET_PDEATHSIG sends it SIGTERM
    assert not served_by_a_test_server(port)
