"""TRL checkpoints that are all or nothing, and resumes that say what they do.

Transformers' Trainer writes `checkpoint-N` file by file in place: a kill or a full disk
mid-save leaves a folder with some files (say optimizer.pt only) under the final name.
`all_or_nothing(GRPOTrainer)` saves each checkpoint under `output_dir/.saving/checkpoint-N`
and renames it to `output_dir/checkpoint-N` once every file is written (a rename within
one filesystem is atomic), so a `checkpoint-N` is always complete; its `manifest.json`
(darling_nemo/manifest.py) is written last, before the rename. A save that ran out of
space removes its half and ends with `DiskFull` (one line: folder, size needed, last
complete checkpoint, the same command resumes); one stopped by Ctrl-C or SIGTERM removes
its half too. A resume checks the newest checkpoint against its manifest first: a damaged
one is moved aside and the next older one tried, all said in one line.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from darling_nemo.manifest import check, damaged_words, write_manifest
from darling_nemo.run_folder import (
    DiskFull,
    disk_full,
    disk_full_message,
    folder_size,
    last_complete,
)

STAGING = ".saving"  # where a checkpoint is written before it gets its name
STATE_FILE = "trainer_state.json"  # written last by the Trainer: a complete checkpoint has it


def checkpoint_step(path: Path) -> int:
    """N of a `checkpoint-N` directory."""
    return int(path.name.removeprefix("checkpoint-"))


def _numbered(folder: Path) -> list[Path]:
    return [p for p in folder.glob("checkpoint-*") if p.name.removeprefix("checkpoint-").isdigit()]


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete `checkpoint-N` directory (it has a trainer state), or None."""
    found = [p for p in _numbered(output_dir) if (p / STATE_FILE).is_file()]
    return max(found, key=checkpoint_step) if found else None


def incomplete_checkpoints(output_dir: Path) -> list[Path]:
    """Saves that did not finish: anything left under `.saving/`, and `checkpoint-N` folders
    without a trainer state (written in place by an earlier version or by hand)."""
    staged = sorted((output_dir / STAGING).glob("*")) if (output_dir / STAGING).is_dir() else []
    unfinished = [p for p in _numbered(output_dir) if not (p / STATE_FILE).is_file()]
    return [*staged, *sorted(unfinished, key=checkpoint_step)]


def announce_resume(
    output_dir: Path, max_steps: int, damaged: Sequence[tuple[Path, str]] = (), lead: str = ""
) -> Path | None:
    """Name every incomplete checkpoint (a staged half is removed: it is only ever a partial
    copy); then, in one line, each damaged checkpoint (the folders in `damaged`, and newest
    first each `checkpoint-N` whose files differ from its manifest: moved aside, never
    deleted) and the newest intact one the run resumes from; returns it (None: a fresh
    start). `lead` opens that line."""
    for path in incomplete_checkpoints(output_dir):
        where = path.relative_to(output_dir)
        if path.parent.name == STAGING:
            shutil.rmtree(path, ignore_errors=True)
            print(f"skipping incomplete {where} (a save that did not finish): removed", flush=True)
        else:
            print(f"skipping incomplete {where} (no {STATE_FILE}): left as it is", flush=True)
    words = [damaged_words(folder, problem) for folder, problem in damaged]
    resume_from = None
    complete = [p for p in _numbered(output_dir) if (p / STATE_FILE).is_file()]
    for candidate in sorted(complete, key=checkpoint_step, reverse=True):
        verdict = check(candidate)
        if verdict.problem:
            words.append(damaged_words(candidate, verdict.problem))
            continue
        if verdict.legacy:
            words.append(
                f"{candidate.name} has no manifest (an earlier version's): its files' "
                "structure checked"
            )
        step = checkpoint_step(candidate)
        words.append(f"resuming from {candidate.name} (step {step} of {max_steps})")
        resume_from = candidate
        break
    else:
        if words:
            words.append("no intact checkpoint is left: training starts from step 0")
    if words:
        print(lead + "; ".join(words), flush=True)
    return resume_from


def _tied_keys(model: Any) -> set[str]:
    """The parameter names a model ties to another (saved once, so "missing" on load)."""
    if not getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        return set()
    tied = getattr(model, "_tied_weights_keys", None) or ()
    return set(tied.keys() if isinstance(tied, dict) else tied)


def all_or_nothing(trainer_class: type) -> type:
    """`trainer_class` (a transformers Trainer) whose checkpoints are staged and renamed
    when complete, and whose resume does not warn about the tied weights it restores."""
    from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

    class AllOrNothingTrainer(trainer_class):  # type: ignore[misc, valid-type]
        _staging = False

        def _get_output_dir(self, trial: Any) -> str:
            real = super()._get_output_dir(trial)
            return os.path.join(real, STAGING) if self._staging else real

        def _save_checkpoint(self, model: Any, trial: Any) -> None:
            real = Path(super()._get_output_dir(trial))
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            staged = real / STAGING / name
            shutil.rmtree(staged, ignore_errors=True)
            self._staging = True
            try:
                super()._save_checkpoint(model, trial)
                write_manifest(staged)  # last: a checkpoint with it was written whole
            except BaseException as err:  # a full disk, Ctrl-C, SIGTERM: no half is kept
                shutil.rmtree(staged, ignore_errors=True)  # a half is worth nothing: free it
                if not (isinstance(err, Exception) and disk_full(err)):
                    raise
                last = last_checkpoint(real)
                needed = folder_size(last) if last else None
                raise DiskFull(
                    disk_full_message(
                        real, name, needed, last_complete(last.name if last else None)
                    )
                ) from None
            finally:
                self._staging = False
            target = real / name
            if target.exists():  # an incomplete one of an earlier version, or a rerun
                shutil.rmtree(target)
            os.replace(staged, target)
            with contextlib.suppress(OSError):  # nothing staged is left over
                staged.parent.rmdir()
            self._rotate(real)

        def _rotate(self, real: Path) -> None:
            """save_total_limit, applied to the real folder (the Trainer's own rotation ran
            in the staging folder, which holds one checkpoint)."""
            try:
                from transformers.trainer_utils import rotate_checkpoints
            except ImportError:  # transformers 4: a Trainer method
                self._rotate_checkpoints(use_mtime=True, output_dir=str(real))
                return
            rotate_checkpoints(
                output_dir=str(real),
                save_total_limit=self.args.save_total_limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

        def _issue_warnings_after_load(self, load_result: Any) -> None:
            # A tied output layer is saved once, as the embedding: on resume it is reported
            # missing (`missing keys ['lm_head.weight']`), which reads like a corrupt
            # checkpoint. It is expected; tie it again and warn only about anything else.
            missing = set(load_result.missing_keys)
            if missing and missing <= _tied_keys(self.model):
                self.model.tie_weights()
                load_result.missing_keys.clear()
            super()._issue_warnings_after_load(load_result)

    return AllOrNothingTrainer
