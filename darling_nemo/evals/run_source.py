"""`run=RUN_DIR [step=N]` in an eval config: the run's checkpoint, as its exported HF folder.

The export (darling_nemo.export) needs NeMo-RL's image; an evaluation elsewhere reads an
export made before (step_N/hf with its marker) and says how to make one when it is missing.
"""

from __future__ import annotations

from typing import Any, TypeVar

from darling_nemo.config import check_model_path
from darling_nemo.evals.schema import EvalSource
from darling_nemo.export import (
    Checkpoint,
    cached_export,
    export_checkpoint,
    find_checkpoint,
    verify_hf,
)
from darling_nemo.schema import ConfigError

Cfg = TypeVar("Cfg", bound=EvalSource)


def _hf_folder(ckpt: Checkpoint) -> str:
    hit = cached_export(ckpt)
    if hit is not None:
        verify_hf(hit)
        return str(hit)
    try:
        return str(export_checkpoint(ckpt))
    except ImportError as err:  # no NeMo-RL / Megatron-Bridge in this environment
        raise ConfigError(
            f"run={ckpt.run_dir} step {ckpt.step}: not exported yet and this environment cannot "
            f"({err.name or err}); export it first in the NeMo-RL image: python -m "
            f"darling_nemo.export {ckpt.run_dir} --step {ckpt.step} (or slurm/export_hf.sub)"
        ) from None


def resolve_run(cfg: Cfg) -> Cfg:
    """With `run` set: generator.model becomes the step's HF export (made or reused), and an
    unset run_name becomes RUN_NAME-step_N. Without it, cfg unchanged, once a generator.model
    written as a path is known to be a folder here (`check_model_path`)."""
    if cfg.run is None:
        check_model_path(cfg.generator.model, "generator.model")  # type: ignore[attr-defined]
        return cfg
    ckpt = find_checkpoint(cfg.run, cfg.step)
    generator = cfg.generator.model_copy(update={"model": _hf_folder(ckpt)})  # type: ignore[attr-defined]
    run_name = cfg.run_name or f"{ckpt.run_name}-step_{ckpt.step}"  # type: ignore[attr-defined]
    return cfg.model_copy(update={"generator": generator, "run_name": run_name})


def source_of(cfg: EvalSource) -> dict[str, Any] | None:
    """The summary's `source`: run, step and training config, or None for a plain model."""
    return None if cfg.run is None else find_checkpoint(cfg.run, cfg.step).source()
