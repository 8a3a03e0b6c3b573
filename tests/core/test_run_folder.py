"""run_folder: a full disk recognised as each writer reports it (on a real tmpfs), and the
output folder's lock (re-entrant in one process, exclusive between processes)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import REPO, mount_tmpfs, unmount

from darling_nemo.run_folder import acquire, disk_full, release, run_lock


@pytest.fixture
def full_disk(tmp_path):
    mount = tmp_path / "disk"
    why_not = mount_tmpfs(mount, "64k")
    if why_not:
        pytest.skip(f"cannot mount a tmpfs here: {why_not}")
    yield mount
    unmount(mount)


def raised(write) -> BaseException:
    with pytest.raises(BaseException) as err:
        write()
    return err.value


def test_a_full_disk_is_recognised_as_python_torch_and_safetensors_report_it(full_disk):
    import torch
    from safetensors.torch import save_file

    big = torch.zeros(100_000)  # 400 kB: past the 64 kB disk
    errors = {
        "open().write": raised(lambda: (full_disk / "a.bin").write_bytes(b"x" * 400_000)),
        "torch.save": raised(lambda: torch.save({"w": big}, full_disk / "b.pt")),
        "safetensors": raised(lambda: save_file({"w": big}, str(full_disk / "c.safetensors"))),
    }
    for writer, err in errors.items():
        assert disk_full(err), f"{writer}: {type(err).__name__}: {err}"


def test_other_errors_are_not_a_full_disk():
    assert not disk_full(ValueError("No space left on device"))  # not an I/O error
    assert not disk_full(RuntimeError("CUDA out of memory"))
    assert not disk_full(FileNotFoundError(2, "No such file or directory"))


HOLD = "import sys; from darling_nemo.run_folder import acquire; acquire(sys.argv[1])"


def test_the_lock_is_reentrant_here_and_exclusive_between_processes(tmp_path):
    def other_process_takes_it() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, capture_output=True, text=True
        )

    with run_lock(tmp_path):
        acquire(tmp_path)  # the same process again (the miniature's run inside its own)
        release(tmp_path)
        taken = other_process_takes_it()
        assert taken.returncode == 1 and "RunLocked" in taken.stderr
        assert f"is in use by another run (pid {os.getpid()} on " in taken.stderr
    assert other_process_takes_it().returncode == 0  # released with the block
    with pytest.raises(ZeroDivisionError), run_lock(tmp_path):
        _ = 1 / 0
    assert other_process_takes_it().returncode == 0  # released on an exception too
