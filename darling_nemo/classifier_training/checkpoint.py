"""The resumable checkpoint of a classifier run (`output_dir/checkpoint-last`): swapped in
atomically with its manifest written last, recovered after a kill, checked against its
manifest before it is trusted (a damaged one is moved aside, never deleted), refused when
the settings under it changed."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from darling_nemo.manifest import check, damaged_words, write_manifest
from darling_nemo.resume import changed_settings
from darling_nemo.run_folder import (
    DiskFull,
    disk_full,
    disk_full_message,
    folder_size,
    last_complete,
)
from darling_nemo.schema import ClassifierTrainConfig, ConfigError

STATE_FILE = "training_state.pt"

# Keys a resumed run may change: they do not touch the weights of the steps already taken
# (max_steps extends or shortens a run; the learning-rate schedule follows the new length).
RESUMABLE_CHANGES = {
    "max_steps", "device", "num_threads", "eval_batch_size", "embedding_baseline",
    "output_dir", "checkpoint_every_steps", "resume",
}  # fmt: skip
# Keys added after checkpoints were saved without them: read there as their defaults.
ADDED_KEYS = ("cv_folds", "cv_fold")


def save_atomically(save_model: Callable[[str], None], state: dict, target: Path) -> None:
    """Write a checkpoint to `target.tmp`, move the old one aside to `target.old`, swap the
    new one in, then delete the old: at every instant one complete checkpoint exists on
    disk, which `recover_checkpoint` puts back in place after a kill."""
    tmp = target.with_name(target.name + ".tmp")
    aside = target.with_name(target.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save_model(str(tmp))
        torch.save(state, tmp / STATE_FILE)
        write_manifest(tmp)  # last: a checkpoint with it was written whole
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)  # a half is worth nothing: free its space
        if not disk_full(err):
            raise
        kept = f"{target.name} (step {saved_step(target)})" if target.exists() else None
        raise DiskFull(
            disk_full_message(
                target.parent,
                f"{target.name} at step {state['step']}",
                folder_size(target) or None,
                last_complete(kept),
            )
        ) from None
    if target.exists():
        shutil.rmtree(aside, ignore_errors=True)
        target.rename(aside)
    tmp.rename(target)
    shutil.rmtree(aside, ignore_errors=True)


def saved_step(target: Path) -> int | None:
    """The step a complete checkpoint reached (None: none there)."""
    if not (target / STATE_FILE).is_file():
        return None
    return torch.load(target / STATE_FILE, weights_only=False, map_location="cpu")["step"]


def recover_checkpoint(target: Path) -> None:
    """Finish a swap that a kill interrupted: with no `target` but a `target.old`, the old
    checkpoint goes back (the half-swapped `.tmp` is rewritten by the next save)."""
    aside = target.with_name(target.name + ".old")
    if aside.exists() and not (target / STATE_FILE).exists():
        shutil.rmtree(target, ignore_errors=True)
        aside.rename(target)
    shutil.rmtree(aside, ignore_errors=True)


def resume_state(last: Path, cfg: ClassifierTrainConfig) -> dict[str, Any] | None:
    """The training state to continue from (None: a fresh run, also when the checkpoint is
    damaged: said in one line and moved aside); a checkpoint trained with other settings
    than `RESUMABLE_CHANGES` allows is a ConfigError listing each key."""
    if not (cfg.resume and (last / STATE_FILE).exists()):
        return None
    problem = check(last).problem
    if problem:
        print(
            f"{damaged_words(last, problem)}; no intact checkpoint is left: training starts "
            "from step 0",
            flush=True,
        )
        return None
    state = torch.load(last / STATE_FILE, weights_only=False, map_location="cpu")
    # a checkpoint saved before the cross-validation keys was trained on the plain split
    added = {key: ClassifierTrainConfig.model_fields[key].default for key in ADDED_KEYS}
    saved = {**added, **state["config"]}
    changed = changed_settings(saved, cfg.model_dump(mode="json"), RESUMABLE_CHANGES)
    if changed:
        raise ConfigError(
            f"{last} was trained with other settings:\n  "
            + "\n  ".join(changed)
            + "\nuse the same settings, another output_dir, or resume=false"
        )
    return state


def training_state(
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    step: int,
    cfg: ClassifierTrainConfig,
) -> dict[str, Any]:
    """What a checkpoint holds beside the weights: enough to continue bit for bit."""
    return {
        "optimizer": optimizer.state_dict(),
        "schedule": schedule.state_dict(),
        "rng": torch.get_rng_state(),
        "step": step,
        "config": cfg.model_dump(mode="json"),
    }


def restore(
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    state: dict[str, Any],
) -> int:
    """Put a checkpoint's optimiser, schedule and RNG back; returns the step it reached."""
    optimizer.load_state_dict(state["optimizer"])
    schedule.load_state_dict(state["schedule"])
    torch.set_rng_state(state["rng"])  # dropout continues as in an uninterrupted run
    return state["step"]
