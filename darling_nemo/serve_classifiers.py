"""`darling-serve-classifiers`: start the pair-classifier servers of a GPU node.

    darling-serve-classifiers model=/ckpt/similarity-classifier gpus=[0,1,2,3] --dry-run
    darling-serve-classifiers --config conf/classifier/serve_8gpu.yaml log_dir=logs/clf
    # a machine without vLLM (same protocol, CPU):
    darling-serve-classifiers model=/tmp/darling-clf gpus=[0] \
        'executable=python -m darling_nemo.classify_server' host=127.0.0.1

Runs `EXECUTABLE serve MODEL --task classify --port P --served-model-name NAME` once per
GPU with CUDA_VISIBLE_DEVICES set, waits until every server answers /health, prints the
endpoint list in the form `darling.judge.endpoints` takes (and writes it to
`endpoints_file`), then stays in the foreground: if one server dies the others are stopped
and the command fails; SIGTERM/SIGINT stop them all. Settings: `ClassifierServersConfig`
in darling_nemo/schema/classifier.py, from `--config` and `key=value` overrides.

Every server checks one token (`--middleware darling_nemo.judges.auth.BearerTokenAuth`,
judges/auth.py): DARLING_JUDGE_TOKEN (or DARLING_JUDGE_TOKEN_FILE) when set, as the
cluster jobs set it; else a new one, written to a file only you can read, whose path is
printed (clients: DARLING_JUDGE_TOKEN_FILE=that path) and which is removed when the servers
stop. The servers listen on `host`: by default this machine's address (its hostname's),
not every interface.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from darling_nemo.config import command_parser, exits_on_config_error, load_validated
from darling_nemo.judges import auth
from darling_nemo.judges.serve_flags import caching_args
from darling_nemo.schema import ClassifierServersConfig

STOP_GRACE_S = 15.0


def server_commands(cfg: ClassifierServersConfig) -> list[tuple[dict[str, str], list[str]]]:
    """(extra environment, argv) of every server."""
    commands = []
    for k, gpu in enumerate(cfg.gpus):
        argv = [
            *shlex.split(cfg.executable),
            "serve",
            cfg.model,
            "--task",
            "classify",
            "--dtype",
            cfg.dtype,
            "--host",
            listen_host(cfg),
            "--port",
            str(cfg.base_port + k),
            "--served-model-name",
            f"{cfg.served_model_name_prefix}{k}",
            "--middleware",  # the token on every path but /health
            auth.MIDDLEWARE,
            *caching_args(cfg.model, cfg.extra_args),
            *cfg.extra_args,
        ]
        commands.append(({"CUDA_VISIBLE_DEVICES": str(gpu)}, argv))
    return commands


def listen_host(cfg: ClassifierServersConfig) -> str:
    """`host`, or this machine's address on the network its hostname resolves to (the
    address a driver on another node reaches), 127.0.0.1 where the name does not resolve."""
    if cfg.host is not None:
        return cfg.host
    try:
        return socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)[0][4][0]
    except (OSError, IndexError):
        return "127.0.0.1"


def server_token() -> tuple[str, Path | None]:
    """The servers' token and, when it is new, the 0600 file (in a new private folder)
    that holds it for the clients."""
    token = auth.job_token()
    if token is not None:
        return token, None
    token = auth.new_token()
    folder = Path(tempfile.mkdtemp(prefix="darling-serve-"))  # mode 0700
    return token, auth.write_token_file(folder / "judge_token", token)


def endpoints(cfg: ClassifierServersConfig) -> list[dict[str, str]]:
    host = cfg.advertise_host or socket.gethostname()
    return [
        {"url": f"http://{host}:{cfg.base_port + k}", "model": f"{cfg.served_model_name_prefix}{k}"}
        for k in range(len(cfg.gpus))
    ]


def endpoints_yaml(cfg: ClassifierServersConfig) -> str:
    """The endpoint list as YAML (for `darling.judge.endpoints`) and as one override."""
    items = [f"{{url: {e['url']}, model: {e['model']}}}" for e in endpoints(cfg)]
    lines = ["endpoints:", *(f"  - {item}" for item in items)]
    lines.append(f"# override: darling.judge.endpoints=[{', '.join(items)}]")
    return "\n".join(lines) + "\n"


def wait_ready(
    cfg: ClassifierServersConfig, procs: list[subprocess.Popen], deadline: float, token: str
) -> None:
    """Poll every server's /health until all answer, then have each prove it holds `token`
    (a squatter on a port answers /health too); raise if one exits, fails its proof, or time
    runs out."""
    host = listen_host(cfg)
    local = "127.0.0.1" if host in ("0.0.0.0", "::") else host
    waiting = {k: f"http://{local}:{cfg.base_port + k}/health" for k in range(len(procs))}
    while waiting:
        for k, url in list(waiting.items()):
            if procs[k].poll() is not None:
                raise RuntimeError(
                    f"server {k} (GPU {cfg.gpus[k]}) exited with {procs[k].returncode}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    healthy = resp.status == 200
                if healthy:
                    auth.prove_server(url.removesuffix("/health"), token, timeout_s=10)
                    del waiting[k]
            except (urllib.error.URLError, OSError):  # not up yet (a failed proof: raised)
                pass
        if waiting and time.monotonic() > deadline:
            raise RuntimeError(
                f"servers {sorted(waiting)} not ready after {cfg.ready_timeout_s:g}s"
            )
        time.sleep(0.5)


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every server still running, then SIGKILL what is left after a grace period."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    end = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def load_servers_config(path: str | None, overrides: Sequence[str]) -> ClassifierServersConfig:
    return load_validated(path, overrides, ClassifierServersConfig)[0]


@exits_on_config_error("darling-serve-classifiers")
def main(argv: Sequence[str] | None = None) -> int:
    parser = command_parser(__doc__, prog="darling-serve-classifiers")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    parser.add_argument("--config", help="YAML file of ClassifierServersConfig keys")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    args = parser.parse_args(argv)
    cfg = load_servers_config(args.config, args.overrides)

    commands = server_commands(cfg)
    if args.dry_run:
        for env, command in commands:
            prefix = " ".join(f"{k}={v}" for k, v in env.items())
            print(f"{prefix} {shlex.join(command)}")
        print(endpoints_yaml(cfg), end="")
        return 0

    procs: list[subprocess.Popen] = []
    token, token_file = server_token()
    if token_file is not None:
        print(
            f"darling-serve-classifiers: no {auth.TOKEN_ENV} given: the servers' token is in "
            f"{token_file} (mode 0600, removed when they stop); clients: "
            f"{auth.TOKEN_FILE_ENV}={token_file}",
            flush=True,
        )

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, on_signal)
    try:
        for k, (env, command) in enumerate(commands):
            out = None
            if cfg.log_dir:
                Path(cfg.log_dir).mkdir(parents=True, exist_ok=True)
                out = open(Path(cfg.log_dir) / f"classifier_{k}.log", "ab")  # noqa: SIM115
            procs.append(
                subprocess.Popen(
                    command,
                    env={**os.environ, **env, auth.TOKEN_ENV: token},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            )
        wait_ready(cfg, procs, time.monotonic() + cfg.ready_timeout_s, token)
        text = endpoints_yaml(cfg)
        if cfg.endpoints_file:
            Path(cfg.endpoints_file).write_text(text)
        print(
            f"darling-serve-classifiers: {len(procs)} server(s) ready\n{text}", end="", flush=True
        )
        while True:
            for k, p in enumerate(procs):
                if p.poll() is not None:
                    raise RuntimeError(f"server {k} (GPU {cfg.gpus[k]}) exited with {p.returncode}")
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    except (RuntimeError, OSError) as err:
        print(f"darling-serve-classifiers: {err}", file=sys.stderr)
        return 1
    finally:
        stop(procs)
        if token_file is not None:
            token_file.unlink(missing_ok=True)
            token_file.parent.rmdir()


if __name__ == "__main__":
    sys.exit(main())
