"""The one-node configs' classifier server: started and stopped by the recipe itself.

`darling.judge.launch` (NodeServerConfig) asks the NeMo-RL recipe to run the pair classifier
as `vllm serve MODEL --task classify` on one of the node's own GPUs, beside the policy,
instead of on a classifier node of its own (darling-serve-classifiers). This module is that
server's life: the judge the run uses (`choose_node_judge`: the served classifier, or the
calibrated CPU judge when no GPU is visible), the command, start, wait for GET /health,
and stop (`node_classifier_server`, a context manager). No NeMo-RL here: the recipe calls it
before NeMo-RL starts.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shlex
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from darling_nemo.judges import JudgeError, auth
from darling_nemo.judges.serve_flags import caching_args
from darling_nemo.schema import (
    DarlingConfig,
    EmbeddingJudgeConfig,
    JudgeConfig,
    NodeServerConfig,
    validate_darling,
)

HEALTH_POLL_S = 0.5
PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when its parent dies


class NodeServerError(JudgeError):
    """The recipe's own classifier server did not start (the message names its log)."""


def visible_gpu_count() -> int:
    """CUDA GPUs this process sees (0 where torch is absent, as in the CPU test venv)."""
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def choose_node_judge(judge: JudgeConfig, gpus: int) -> tuple[JudgeConfig, str | None]:
    """The judge a run uses given `gpus` visible GPUs, and the line saying which and why
    (None when the config has no `launch`: nothing to choose).

    A launched server that needs a GPU where none is visible becomes the calibrated CPU
    judge (`launch.no_gpu: embedding`, the default), or a NodeServerError (`fail`)."""
    launch = getattr(judge, "launch", None)
    if launch is None:
        return judge, None
    if launch.needs_gpu and gpus == 0:
        if launch.no_gpu == "fail":
            raise NodeServerError(
                "darling.judge.launch: no CUDA GPU is visible for the classifier server "
                f"({launch.model}) and launch.no_gpu is fail; run on a GPU node, or set "
                "darling.judge.launch.no_gpu=embedding for the calibrated CPU judge"
            )
        return EmbeddingJudgeConfig(), (
            "darling judge: embedding (the calibrated CPU judge in the driver): no CUDA GPU "
            f"is visible for the classifier server {launch.model} "
            "(darling.judge.launch.no_gpu=embedding)"
        )
    where = f"GPU {launch.gpu}" if launch.needs_gpu else "CPU (needs_gpu: false)"
    return judge, (
        f"darling judge: served, {launch.model} started by this recipe on {where} at "
        f"{launch.url} (gpu_memory_utilization {launch.gpu_memory_utilization:g})"
    )


def server_command(launch: NodeServerConfig) -> tuple[dict[str, str], list[str]]:
    """(extra environment, argv) of the server: vLLM's command line (classify_server takes
    the same)."""
    argv = [
        *shlex.split(launch.executable),
        "serve",
        launch.model,
        "--task",
        "classify",
        "--host",
        "127.0.0.1",
        "--port",
        str(launch.port),
        "--gpu-memory-utilization",
        str(launch.gpu_memory_utilization),
        "--middleware",  # the job's token on every path but /health (judges/auth.py)
        auth.MIDDLEWARE,
    ]
    if launch.max_model_len is not None:
        argv += ["--max-model-len", str(launch.max_model_len)]
    argv += caching_args(launch.model, launch.extra_args)  # prefix caching: causal models
    argv += launch.extra_args
    env = {"CUDA_VISIBLE_DEVICES": str(launch.gpu)} if launch.needs_gpu else {}
    return env, argv


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the recipe dies, even by SIGKILL (Linux), so
    a killed recipe leaves no server holding GPU memory. Elsewhere a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _log_tail(log: Path, lines: int = 3) -> str:
    try:
        text = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(line.strip() for line in text[-lines:])


def wait_healthy(launch: NodeServerConfig, proc: subprocess.Popen, log: Path) -> float:
    """Poll GET /health until it answers 200, then have the server prove it holds the job's
    token (/health says nothing about who answers it: a squatter on the port would); the
    seconds it took. NodeServerError when the process exits first or `ready_timeout_s`
    passes, naming the log and its last lines, or when the proof fails (one line)."""
    started = time.monotonic()
    while not _healthy(launch.url):
        waited = time.monotonic() - started
        if proc.poll() is not None:
            what = f"exited with status {proc.returncode} before answering GET /health"
        elif waited > launch.ready_timeout_s:
            what = (
                f"did not answer GET {launch.url}/health within "
                f"darling.judge.launch.ready_timeout_s={launch.ready_timeout_s:g}"
            )
        else:
            time.sleep(HEALTH_POLL_S)
            continue
        tail = _log_tail(log)
        raise NodeServerError(
            f"the classifier server ({launch.model}) {what}; its log: {log}"
            + (f" (last lines: {tail})" if tail else "")
        )
    try:
        auth.prove_server(launch.url, auth.job_token(), timeout_s=10)
    except OSError as err:
        raise NodeServerError(f"{launch.url}: no proof of the job's token: {err}") from None
    except auth.UnprovenServerError as err:
        raise NodeServerError(str(err)) from None
    return time.monotonic() - started


def stop_server(proc: subprocess.Popen, timeout_s: float) -> None:
    """SIGTERM its process group (vLLM's engine core too), SIGKILL what is left after
    `timeout_s`; returns once the server has exited."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout_s)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group's stragglers


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the server runs, SIGTERM (a scheduler's cancel) unwinds like Ctrl-C, so the
    `finally` that stops the server runs. Only where SIGTERM has its default action."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def node_classifier_server(
    launch: NodeServerConfig, log: Path, announce: bool = True
) -> Iterator[subprocess.Popen]:
    """The server, running and healthy, for the `with` block; stopped when it ends, however
    it ends (exception, Ctrl-C, SIGTERM; a SIGKILLed parent via PR_SET_PDEATHSIG).

    Its token: the one this process was given (DARLING_JUDGE_TOKEN or _FILE), else a new
    one, put in this process's environment for the driver's served judge and handed to the
    server through its environment (never its command line)."""
    env, argv = server_command(launch)
    token = auth.job_token() or auth.new_token()
    os.environ[auth.TOKEN_ENV] = token
    log.parent.mkdir(parents=True, exist_ok=True)
    if announce:
        print(f"classifier server: {shlex.join(argv)} (log: {log})", flush=True)
    with _sigterm_raises():
        with log.open("ab") as out:
            try:
                proc = subprocess.Popen(
                    argv,
                    env={**os.environ, **env, auth.TOKEN_ENV: token},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own group: Ctrl-C reaches it through us
                    preexec_fn=die_with_parent,
                )
            except OSError as err:
                raise NodeServerError(
                    f"darling.judge.launch.executable: cannot run {argv[0]!r}: {err}"
                ) from None
        try:
            waited = wait_healthy(launch, proc, log)
            if announce:
                print(
                    f"classifier server: healthy at {launch.url} after {waited:.0f} s "
                    f"(pid {proc.pid})",
                    flush=True,
                )
            yield proc
        finally:
            stop_server(proc, launch.stop_timeout_s)
            if announce:
                print(f"classifier server: stopped (pid {proc.pid})", flush=True)


def start_node_judge(
    cfg: dict[str, Any], darling: DarlingConfig, services: ExitStack
) -> tuple[dict[str, Any], DarlingConfig]:
    """The recipe's step before NeMo-RL starts: with `darling.judge.launch`, print which
    judge runs and why, and either start the server (stopped when `services` closes) or
    swap in the calibrated CPU judge; returns the config and `darling:` the run uses."""
    if not darling.calls_judge:
        return cfg, darling
    judge, line = choose_node_judge(darling.judge, visible_gpu_count())
    if line is None:
        return cfg, darling
    print(line, flush=True)
    if judge is not darling.judge:  # no GPU: the CPU judge, written into the saved config
        section = {**cfg["darling"], "judge": judge.model_dump(mode="json")}
        return {**cfg, "darling": section}, validate_darling(section)
    launch = judge.launch
    log = Path(launch.log_file or Path(cfg["logger"]["log_dir"]) / "classifier_server.log")
    services.enter_context(node_classifier_server(launch, log))
    return cfg, darling
