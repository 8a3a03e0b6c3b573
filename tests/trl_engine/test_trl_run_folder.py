"""A TRL run's folder under stress: a real full disk (a small tmpfs), a checkpoint a kill
left half-written, a second run into the same folder, resumes said in one line.

Each run is the chat smoke config of test_trl_engine_e2e (a tiny policy, 1-3 steps, about
two seconds); the full disk is a real tmpfs mounted for the test (root only: skipped with
the reason where mounting is not allowed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers import REPO, checkpoint_by_hand, mount_tmpfs, unmount
from test_trl_engine_e2e import chat_config

from darling_nemo.interrupt import Terminated, how_interrupted, started
from darling_nemo.manifest import check
from darling_nemo.run_folder import RunLocked
from darling_nemo.trl.checkpoints import STAGING, announce_resume, last_checkpoint
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


def test_a_half_written_or_damaged_checkpoint_is_named_and_the_newest_intact_one_used(
    tmp_path, capfd
):
    out = tmp_path / "run"
    cfg = chat_config(tmp_path, out, steps=3)
    cfg["trainer"].update(save_steps=1, save_total_limit=3)
    run(cfg)
    # What a kill mid-save leaves: a staged half (this version) and a checkpoint-3 written in
    # place without its trainer state (an earlier version), the final metrics not yet
    # written; and checkpoint-2's weights cut short afterwards (a disk or a copy).
    (out / "final_metrics.json").unlink()
    (out / "checkpoint-3" / "trainer_state.json").unlink()
    half = out / STAGING / "checkpoint-4"
    half.mkdir(parents=True)
    shutil.copy(out / "checkpoint-3" / "optimizer.pt", half)
    weights = out / "checkpoint-2" / "model.safetensors"
    size = weights.stat().st_size
    with weights.open("r+b") as f:
        f.truncate(1234)
    config_written = (out / "config.yaml").stat().st_mtime_ns
    capfd.readouterr()

    cfg["trainer"]["max_steps"] = 4
    cfg["trainer"]["save_total_limit"] = 2
    final = run(cfg)
    captured = capfd.readouterr()
    assert (
        f"skipping incomplete {STAGING}/checkpoint-4 (a save that did not finish): removed"
        in captured.out
    )
    assert "skipping incomplete checkpoint-3 (no trainer_state.json)" in captured.out
    (aside,) = out.glob("damaged-checkpoint-2-*")
    assert (
        f"checkpoint-2 is damaged (model.safetensors: 1234 bytes, manifest says {size}); "
        f"moved aside to {aside.name}; resuming from checkpoint-1 (step 1 of 4)\n" in captured.out
    )
    assert (final["resumed_from_step"], final["global_step"]) == (1, 4)
    assert not half.exists()
    assert (out / "config.yaml").stat().st_mtime_ns > config_written  # after the choice
    # save_total_limit=2 holds in the real folder; the damaged copy is kept, not rotated.
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-3", "checkpoint-4"]
    assert (aside / "model.safetensors").stat().st_size == 1234
    assert all(check(p).problem is None for p in out.glob("checkpoint-*"))
    # The tied output layer restored on resume is expected, not reported as corruption.
    assert "missing keys" not in captured.err + captured.out


def test_a_finished_run_with_damaged_weights_says_so_and_trains_them_again(tmp_path, capfd):
    out = tmp_path / "run"
    cfg = chat_config(tmp_path, out, steps=1)
    cfg["trainer"]["save_steps"] = 1
    first = run(cfg)
    made = (out / "final" / "model.safetensors").read_bytes()
    size = {}
    for folder in ("checkpoint-1", "final"):
        size[folder] = (out / folder / "model.safetensors").stat().st_size
        with (out / folder / "model.safetensors").open("r+b") as f:
            f.truncate(100)
    capfd.readouterr()

    again = run(cfg)  # not "already complete": its only checkpoint and final weights are cut
    line = next(x for x in capfd.readouterr().out.splitlines() if "damaged" in x)
    (final_aside,) = out.glob("damaged-final-*")
    (checkpoint_aside,) = out.glob("damaged-checkpoint-1-*")
    assert line == (
        f"{out}: finished (1 steps), but final is damaged (model.safetensors: 100 bytes, "
        f"manifest says {size['final']}); moved aside to {final_aside.name}; checkpoint-1 is "
        f"damaged (model.safetensors: 100 bytes, manifest says {size['checkpoint-1']}); moved "
        f"aside to {checkpoint_aside.name}; no intact checkpoint is left: training starts "
        "from step 0"
    )
    assert again["global_step"] == 1
    assert (out / "final" / "model.safetensors").read_bytes() == made  # the same seed
    assert again["darling/quality_mean"] == first["darling/quality_mean"]
    run(cfg)
    assert f"{out}: already complete (1 steps)" in capfd.readouterr().out


def test_sigterm_mid_save_discards_the_half_and_says_what_is_kept(tmp_path, monkeypatch):
    """SIGTERM (a scheduler's cancel) arrives while checkpoint-2 is being saved, after the
    Trainer's files and before the manifest: the half is discarded whole, the run ends with
    the words the command prints, and the same run resumes from checkpoint-1."""
    from darling_nemo.trl import checkpoints

    out = tmp_path / "run"
    cfg = chat_config(tmp_path, out, steps=3)
    cfg["trainer"]["save_steps"] = 1
    real_write = checkpoints.write_manifest

    def terminated_at_step_2(folder):
        if Path(folder).name == "checkpoint-2":
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises Terminated right here
        real_write(folder)

    monkeypatch.setattr(checkpoints, "write_manifest", terminated_at_step_2)
    before = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        started()  # as a command's main: SIGTERM raises Terminated
        # (without that handler the signal below would end pytest itself)
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        with pytest.raises(Terminated) as stopped:
            run(cfg)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert str(stopped.value) == (
        f"stopped after step 2 of 3; the last complete checkpoint is checkpoint-1 in {out}; "
        "the same command resumes from it"
    )
    assert how_interrupted(stopped.value) == ("SIGTERM", 143)
    assert not (out / "checkpoint-2").exists()
    assert not list((out / STAGING).glob("*"))  # discarded whole, nothing half left
    monkeypatch.undo()
    final = run(cfg)
    assert (final["resumed_from_step"], final["global_step"]) == (1, 3)


def test_the_newest_checkpoint_is_chosen_by_step_number_and_verified_first(tmp_path, capfd):
    """Checkpoint folders made by hand: checkpoint-10 is newer than checkpoint-9 (by number,
    not by name); a damaged newest one is moved aside in the same line as the resume; an
    earlier version's checkpoint (no manifest) is checked by its files' structure."""
    out = tmp_path / "run"
    for step in (8, 9, 10):
        checkpoint_by_hand(out / f"checkpoint-{step}", manifest=step != 8)
    assert last_checkpoint(out) == out / "checkpoint-10"
    # A newer checkpoint-11 without its trainer state (a save cut short) is not the last one.
    (out / "checkpoint-11").mkdir()
    (out / "checkpoint-11" / "model.safetensors").write_bytes(b"half")
    assert last_checkpoint(out) == out / "checkpoint-10"
    shutil.rmtree(out / "checkpoint-11")
    assert announce_resume(out, 12) == out / "checkpoint-10"
    assert capfd.readouterr().out == "resuming from checkpoint-10 (step 10 of 12)\n"

    for step in (9, 10):
        (out / f"checkpoint-{step}" / "optimizer.pt").unlink()
    assert announce_resume(out, 12) == out / "checkpoint-8"
    asides = sorted(p.name for p in out.glob("damaged-*"))
    assert capfd.readouterr().out == (
        f"checkpoint-10 is damaged (optimizer.pt is missing); moved aside to {asides[0]}; "
        f"checkpoint-9 is damaged (optimizer.pt is missing); moved aside to {asides[1]}; "
        "checkpoint-8 has no manifest (an earlier version's): its files' structure checked; "
        "resuming from checkpoint-8 (step 8 of 12)\n"
    )
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-8"]


HOLDER = """
import sys, time
from darling_nemo.run_folder import acquire
acquire(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_run_into_a_held_folder_is_refused_naming_the_first(tmp_path, monkeypatch, capfd):
    trl_run = importlib.import_module("darling_nemo.trl.run")  # the module, not `run`

    out = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    real_build_task = trl_run.build_task

    def too_early(cfg):
        raise AssertionError("the data and the judge were loaded before the lock was taken")

    try:
        assert first.stdout.readline().strip() == "held"
        monkeypatch.setattr(trl_run, "build_task", too_early)  # the lock comes before it
        with pytest.raises(RunLocked, match=rf"is in use by another run \(pid {first.pid} on "):
            run(chat_config(tmp_path, out, steps=1))
        assert not (out / "config.yaml").exists()  # refused before writing anything
    finally:
        first.kill()
        first.wait()
        monkeypatch.setattr(trl_run, "build_task", real_build_task)
    # A crashed holder's lock file is left behind; the kernel released its lock: taken over,
    # in one line naming whose it was.
    record = (out / ".darling-run.lock").read_text()
    assert record.startswith('{"pid": ' + str(first.pid))
    started = json.loads(record)["started"]
    capfd.readouterr()
    assert run(chat_config(tmp_path, out, steps=1))["global_step"] == 1
    assert (
        f"{out}: taking over the run lock of a run that ended without releasing it "
        f"(pid {first.pid} on {socket.gethostname()}, started {started}: -c {out})\n"
        in capfd.readouterr().out
    )
    assert (out / ".darling-run.lock").read_text() == ""  # released: emptied, no holder
