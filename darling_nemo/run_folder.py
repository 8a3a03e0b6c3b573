"""An output folder a run can trust: one run at a time, and a full disk said as such.

`run_lock(folder)` holds an exclusive lock on `folder/.darling-run.lock` for as long as the
run lives. The kernel releases a `flock` when its process ends however it ends (exit,
exception, kill -9), so a lock file left by a crashed run is taken over, in one line naming
whose it was (a run that ends normally empties the file); a live holder makes a second run
into the same folder stop with a `RunLocked` (a ConfigError: exit code 2) naming the
holder's process, host, start time and command.

`disk_full(err)` tells whether an exception is a write that ran out of space, as Python
(`OSError` ENOSPC), torch.save (`RuntimeError: ... iostream error` / `file write failed`)
and safetensors (`StorageFull`) report it; `DiskFull` is the one line a command then ends
with (a ConfigError too: exit 2), naming the folder, the space it needed where known, the
last complete checkpoint and that the same command resumes.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from darling_nemo.schema import ConfigError

LOCK_FILE = ".darling-run.lock"
_HELD: dict[Path, tuple[int, int]] = {}  # folder -> (fd, depth): re-entrant in one process


class RunLocked(ConfigError):
    """Another live process holds the output folder's run lock."""


class DiskFull(ConfigError):
    """A write into a run's output folder ran out of space."""


def _holder_words(text: str) -> str:
    """A lock file's record of who holds (or held) it, as words ("" when empty)."""
    try:
        info = json.loads(text or "{}")
    except ValueError:
        info = {}
    if not isinstance(info, dict) or not info:
        return ""
    return (
        f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}: "
        f"{info.get('command')}"
    )


def _holder(path: Path) -> str:
    """The lock file's record of who holds it, as words."""
    try:
        text = path.read_text()
    except OSError:
        text = ""
    return _holder_words(text) or "another process"


def acquire(folder: str | Path) -> None:
    """Take `folder`'s run lock (making the folder) or raise RunLocked; see `run_lock`."""
    folder = Path(folder).expanduser().resolve()
    if folder in _HELD:
        fd, depth = _HELD[folder]
        _HELD[folder] = (fd, depth + 1)
        return
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise
        raise RunLocked(
            f"{folder} is in use by another run ({_holder(path)}): wait for it to end, or "
            "choose another output folder"
        ) from None
    left = _holder_words(os.pread(fd, 1 << 16, 0).decode(errors="replace"))
    if left:  # its holder ended without releasing it: killed, or its machine went down
        print(
            f"{folder}: taking over the run lock of a run that ended without releasing it ({left})",
            flush=True,
        )
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv) or sys.executable,
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    _HELD[folder] = (fd, 1)


def release(folder: str | Path) -> None:
    """Give back one `acquire` of `folder`'s lock; the last one unlocks it. The file stays:
    removing it would let a waiting process lock a file no longer on the path."""
    folder = Path(folder).expanduser().resolve()
    if folder not in _HELD:
        return
    fd, depth = _HELD.pop(folder)
    if depth > 1:
        _HELD[folder] = (fd, depth - 1)
        return
    os.ftruncate(fd, 0)  # a reader sees no holder once it is released
    os.close(fd)


def release_all() -> None:
    """Every lock this process holds (a command's end: `exits_on_config_error`)."""
    for folder in list(_HELD):
        _HELD[folder] = (_HELD[folder][0], 1)
        release(folder)


@contextmanager
def run_lock(folder: str | Path, tidy: bool = False) -> Iterator[None]:
    """Hold `folder`'s run lock inside the block (re-entrant within one process). With
    `tidy`, a folder the lock made is removed again when the block raises and has left
    nothing but the lock file in it (a refused run leaves no trace)."""
    made = not Path(folder).expanduser().exists()
    acquire(folder)
    try:
        yield
    except BaseException:
        release(folder)
        if tidy and made:
            _remove_if_only_the_lock(Path(folder).expanduser())
        raise
    release(folder)


def _remove_if_only_the_lock(folder: Path) -> None:
    if [p.name for p in folder.iterdir()] == [LOCK_FILE]:
        (folder / LOCK_FILE).unlink()
        folder.rmdir()


DISK_FULL_WORDS = ("No space left on device", "StorageFull", "iostream error", "file write failed")


def disk_full(err: BaseException) -> bool:
    """Whether `err` (or an exception it was raised from) is a write that found no space."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        io_error = isinstance(current, RuntimeError | OSError)
        if (io_error or type(current).__name__.endswith("SafetensorError")) and any(
            words in str(current) for words in DISK_FULL_WORDS
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


def folder_size(path: Path) -> int:
    """Bytes of the files under `path` (0 when it does not exist)."""
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.is_dir() else 0


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def last_complete(name: str | None) -> str:
    """What a full disk leaves of a run's checkpoints, in words."""
    return f"the last complete one is {name}" if name else "no complete one was saved yet"


def disk_full_message(folder: Path, what: str, needed: int | None, kept: str) -> str:
    """The one line a command ends with when `what` did not fit into `folder`; `kept` says
    what is whole (`last_complete`)."""
    free = shutil.disk_usage(folder).free if folder.exists() else None
    need = f"needs about {mib(needed)}" if needed else "needs more space"
    have = f", {mib(free)} free" if free is not None else ""
    return (
        f"disk full: {what} did not fit in {folder} ({need}{have}); {kept}; free some space "
        "and run the same command again to resume"
    )
