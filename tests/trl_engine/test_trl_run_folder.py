"""A TRL run's folder under stress: a real full disk (a small tmpfs), a checkpoint a kill
left half-written, a second run into the same folder, resumes said in one line.

Each run is the chat smoke config of test_trl_engine_e2e (a tiny policy, 1-3 steps, about
two seconds); the full disk is a real tmpfs mounted for the test (root only: skipped with
the reason where mounting is not allowed).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from helpers import REPO, mount_tmpfs, unmount
from test_trl_engine_e2e import chat_config

from darling_nemo.run_folder import RunLocked
from darling_nemo.trl.checkpoints import STAGING
from darling_nemo.trl.run import run


@pytest.fixture(autouse=True)
def _offline_single_thread(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(REPO)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs: room for the tiny policy's first checkpoint (1.6 MiB) and its initial
    weights, not for a second checkpoint. Yields (mount point, resize(size))."""
    mount = tmp_path / "disk"
    why_not = mount_tmpfs(mount, "3m")
    if why_not:
        pytest.skip(f"cannot mount a tmpfs here: {why_not}")

    def resize(size: str) -> None:
        subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    yield mount, resize
    unmount(mount)


def recipe_main(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def test_a_full_disk_ends_in_one_line_and_the_same_command_resumes(tmp_path, small_disk, capfd):
    mount, resize = small_disk
    out = mount / "run"
    cfg = chat_config(tmp_path, out, steps=2)
    cfg["trainer"]["save_steps"] = 1
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(cfg))

    code = recipe_main("darling_wildchat")(["--config", str(config)])
    err = capfd.readouterr().err
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("darling_wildchat:")]
    assert len(lines) == 1, err
    assert f"disk full: checkpoint-2 did not fit in {out}" in lines[0]
    assert "needs about 1.6 MiB" in lines[0]
    assert "the last complete one is checkpoint-1" in lines[0]
    assert "run the same command again to resume" in lines[0]
    assert "Traceback" not in err
    # all or nothing: no half checkpoint-2 under either name, checkpoint-1 whole
    assert not (out / "checkpoint-2").exists()
    assert not list((out / STAGING).glob("*"))
    assert (out / "checkpoint-1" / "trainer_state.json").is_file()

    resize("8m")  # space freed: the same command continues from checkpoint-1
    assert recipe_main("darling_wildchat")(["--config", str(config)]) == 0
    printed = capfd.readouterr().out
    assert "resuming from checkpoint-1 (step 1 of 2)" in printed
    final = json.loads((out / "final_metrics.json").read_text())
    assert (final["global_step"], final["resumed_from_step"]) == (2, 1)

    assert recipe_main("darling_wildchat")(["--config", str(config)]) == 0
    assert (
        f"{out}: already complete (2 steps): nothing to do (delete the folder or choose "
        "another to rerun)" in capfd.readouterr().out
    )


def test_a_half_written_checkpoint_is_named_skipped_and_the_newest_complete_one_used(
    tmp_path, capfd
):
    out = tmp_path / "run"
    cfg = chat_config(tmp_path, out, steps=2)
    cfg["trainer"]["save_steps"] = 1
    run(cfg)
    # What a kill mid-save leaves: a staged half (this version) and a checkpoint-2 written in
    # place without its trainer state (an earlier version), the final metrics not yet written.
    (out / "final_metrics.json").unlink()
    (out / "checkpoint-2" / "trainer_state.json").unlink()
    half = out / STAGING / "checkpoint-3"
    half.mkdir(parents=True)
    shutil.copy(out / "checkpoint-2" / "optimizer.pt", half)
    capfd.readouterr()

    cfg["trainer"]["max_steps"] = 3
    final = run(cfg)
    captured = capfd.readouterr()
    assert (
        f"skipping incomplete {STAGING}/checkpoint-3 (a save that did not finish): removed"
        in captured.out
    )
    assert "skipping incomplete checkpoint-2 (no trainer_state.json)" in captured.out
    assert "resuming from checkpoint-1 (step 1 of 3)" in captured.out
    assert (final["resumed_from_step"], final["global_step"]) == (1, 3)
    assert not half.exists()
    assert (out / "checkpoint-2" / "trainer_state.json").is_file()  # saved again, whole
    # The tied output layer restored on resume is expected, not reported as corruption.
    assert "missing keys" not in captured.err + captured.out


HOLDER = """
import sys, time
from darling_nemo.run_folder import acquire
acquire(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_run_into_a_held_folder_is_refused_naming_the_first(tmp_path):
    out = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(RunLocked, match=rf"is in use by another run \(pid {first.pid} on "):
            run(chat_config(tmp_path, out, steps=1))
        assert not (out / "config.yaml").exists()  # refused before writing anything
    finally:
        first.kill()
        first.wait()
    # A crashed holder's lock file is left behind; the kernel released its lock: reused.
    assert (out / ".darling-run.lock").read_text().startswith('{"pid": ' + str(first.pid))
    assert run(chat_config(tmp_path, out, steps=1))["global_step"] == 1
