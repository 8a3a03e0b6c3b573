"""Local ports and waiting for a child process to serve (standard library only).

Shared by what starts servers and waits for them: the NeMo-RL engine's Ray head
(`nemo_rl/ray_env.py`), the rehearsal's Ray and classifier server (`rehearsal/run.py`), the
smoke run's judge server and the step-time benchmark.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable


class NotReady(RuntimeError):
    """`wait_until` gave up: `exit_status` is the process's status where it exited first,
    None where the time ran out."""

    def __init__(self, message: str, exit_status: int | None) -> None:
        super().__init__(message)
        self.exit_status = exit_status


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the system's choice)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_open(port: int) -> bool:
    """Whether something accepts connections on 127.0.0.1:`port`."""
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def wait_until(
    check: Callable[[], bool],
    timeout_s: float,
    what: str,
    proc: subprocess.Popen | None = None,
) -> None:
    """Return once `check()` holds, asking every half second; NotReady (`what: ...`) where
    `proc` exits first or `timeout_s` pass."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise NotReady(
                f"{what}: the process exited with status {proc.returncode}", proc.returncode
            )
        if check():
            return
        time.sleep(0.5)
    raise NotReady(f"{what}: not ready after {timeout_s:.0f} s", None)
