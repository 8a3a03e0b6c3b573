"""A NeMo-RL Megatron run's checkpoint as a Hugging Face folder, converted once and verified.

    python -m darling_nemo.export RESULTS_DIR/RUN_NAME --step latest

RUN_DIR is the run folder (holding checkpoints/), its checkpoints folder, or one step_N folder,
laid out as NeMo-RL v0.4.0's CheckpointManager writes them:

    checkpoints/step_N/{training_info.json, config.yaml, policy/weights, policy/optimizer}

Writes step_N/hf/ (config, tokenizer, safetensors) with NeMo-RL's own converter
(`export_model_from_megatron`, in darling_nemo/nemo_rl/export.py), checks it loads (config,
tokenizer, every weight's shape against the config) and only then marks it done
(hf/darling_export.json, written atomically): a second call reuses it. Run it in the NeMo-RL
image (Megatron-Bridge); a cached export is read anywhere. Errors (one line, exit code 2): no
checkpoint, no such step, a DTensor checkpoint, not enough host memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from darling_nemo.config import command_parser, exits_on_config_error
from darling_nemo.nemo_rl import export as nemo_export
from darling_nemo.plan.architectures import resolve_architecture
from darling_nemo.plan.terms import params_text
from darling_nemo.resume import write_text_atomically
from darling_nemo.run_folder import DiskFull, disk_full, disk_full_message, folder_size
from darling_nemo.schema import ConfigError

HF_DIR = "hf"
MARKER = "darling_export.json"
STEP_RE = re.compile(r"step_(\d+)")
# The step a run is evaluated at unless told: its newest checkpoint. The one default of every
# `step` (this command, run=... in the eval configs, compare_runs.py).
LATEST = "latest"
GIB = 1024**3
# Host memory of the conversion, per parameter: Megatron-Bridge builds the whole model on CPU
# (up to fp32, 4 bytes) and save_hf_pretrained writes it out as bf16 tensors (2 bytes); plus a
# fixed allowance for Python, torch and Megatron's imports.
BYTES_PER_PARAM = 4 + 2
RUNTIME_BYTES = 4 * GIB

# (model_name, weights_path, output_path, tokenizer_name, hf_overrides) -> None
Converter = Callable[[str, Path, Path, str, dict[str, Any]], None]


@dataclass(frozen=True)
class Checkpoint:
    """One finished step of a run, with the training config it was saved with."""

    run_dir: Path  # the folder the user named
    step_dir: Path
    step: int
    config: dict[str, Any]

    @property
    def hf_dir(self) -> Path:
        return self.step_dir / HF_DIR

    @property
    def run_name(self) -> str:
        """RUN_NAME of RESULTS_DIR/RUN_NAME/checkpoints/step_N (else the folder given)."""
        parent = self.step_dir.parent
        return parent.parent.name if parent.name == "checkpoints" else self.run_dir.name

    @property
    def model_name(self) -> str:
        return str(self.config["policy"]["model_name"])

    def source(self) -> dict[str, Any]:
        """What an evaluation summary records about where its model came from."""
        return {
            "run": str(self.run_dir),
            "run_name": self.run_name,
            "step": self.step,
            "checkpoint": str(self.step_dir),
            "training_config": str(self.step_dir / "config.yaml"),
            "model_name": self.model_name,
            "hf_export": str(self.hf_dir),
        }


# ---------------------------------------------------------------------------------------------
# Run folder and step
# ---------------------------------------------------------------------------------------------


def _steps(ckpt_dir: Path) -> dict[int, Path]:
    # NeMo-RL's own rule (get_latest_checkpoint_path): step_<digits> only; tmp_step_N (a save
    # in progress) and old_step_N (being replaced) are not checkpoints.
    found = {}
    for p in ckpt_dir.iterdir() if ckpt_dir.is_dir() else ():
        m = STEP_RE.fullmatch(p.name)
        if m and p.is_dir():
            found[int(m.group(1))] = p
    return found


def find_checkpoint(run_dir: str | Path, step: int | str = LATEST) -> Checkpoint:
    """The step folder of `run_dir` (run folder, checkpoints folder or step folder)."""
    run = Path(run_dir)
    if not run.is_dir():
        raise ConfigError(f"run {run}: no such folder (give RESULTS_DIR/RUN_NAME)")
    if STEP_RE.fullmatch(run.name):
        ckpt_dir, steps = run.parent, {int(run.name.split("_")[1]): run}
    else:
        ckpt_dir = run / "checkpoints" if (run / "checkpoints").is_dir() else run
        steps = _steps(ckpt_dir)
    if not steps:
        raise ConfigError(
            f"run {run}: no checkpoint (no {ckpt_dir}/step_N folder); the run saves them when "
            "checkpointing.enabled is true, every checkpointing.save_period steps"
        )
    if step == LATEST:
        chosen = max(steps)
    else:
        try:
            chosen = int(step)
        except ValueError:
            raise ConfigError(f"step={step!r}: give a step number or 'latest'") from None
        if chosen not in steps:
            have = ", ".join(str(s) for s in sorted(steps))
            raise ConfigError(f"run {run}: no step {chosen}; its checkpoints are steps {have}")
    step_dir = steps[chosen]
    config_file = step_dir / "config.yaml"
    if not config_file.is_file():
        raise ConfigError(f"{config_file}: missing (NeMo-RL saves the run's config there)")
    try:
        config = yaml.safe_load(config_file.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{config_file}: not valid YAML: {err}") from None
    if not isinstance(config, dict) or not isinstance(config.get("policy"), dict):
        raise ConfigError(f"{config_file}: no policy section (not a NeMo-RL config)")
    if "model_name" not in config["policy"]:
        raise ConfigError(f"{config_file}: policy.model_name missing")
    return Checkpoint(run_dir=run, step_dir=step_dir, step=chosen, config=config)


def check_megatron(ckpt: Checkpoint) -> Path:
    """The Megatron weights folder to convert; a DTensor checkpoint is refused."""
    policy = ckpt.config["policy"]
    megatron = bool((policy.get("megatron_cfg") or {}).get("enabled"))
    dtensor = bool((policy.get("dtensor_cfg") or {}).get("enabled"))
    cfg = ckpt.step_dir / "config.yaml"
    if dtensor and not megatron:
        raise ConfigError(
            f"{cfg}: policy.dtensor_cfg.enabled: a DTensor (torch DCP) checkpoint; convert it "
            "with NeMo-RL's DCP converter: python examples/converters/convert_dcp_to_hf.py "
            f"--config {cfg} --dcp-ckpt-path {ckpt.step_dir}/policy/weights "
            f"--hf-ckpt-path {ckpt.hf_dir}"
        )
    if not megatron:
        raise ConfigError(f"{cfg}: neither policy.megatron_cfg nor policy.dtensor_cfg is enabled")
    weights = ckpt.step_dir / "policy" / "weights"
    if not weights.is_dir():
        raise ConfigError(f"{weights}: missing (the step holds no policy weights)")
    # Megatron's save writes weights/iter_NNNNNNN/ (the converter's --megatron-ckpt-path).
    iters = sorted(p for p in weights.iterdir() if re.fullmatch(r"iter_\d+", p.name))
    return iters[-1] if iters else weights


# ---------------------------------------------------------------------------------------------
# Host memory
# ---------------------------------------------------------------------------------------------


def host_memory_needed(model_name: str) -> tuple[int, float]:
    """(bytes, parameters) of a conversion, from the plan's parameter count of the model."""
    params = resolve_architecture(model_name, "policy.model_name").total_params
    return int(params * BYTES_PER_PARAM + RUNTIME_BYTES), float(params)


def host_memory_available() -> int:
    """MemAvailable, capped by this job's cgroup limit (a SLURM --mem allocation)."""
    available = None
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max":
            cap = int(limit) - used
            available = cap if available is None else min(available, cap)
    except (OSError, ValueError):
        pass  # no cgroup v2 view: MemAvailable alone
    if available is None:
        raise ConfigError("/proc/meminfo: no MemAvailable; pass --host-memory-gib")
    return available


def check_host_memory(ckpt: Checkpoint, available: int) -> None:
    need, params = host_memory_needed(ckpt.model_name)
    if need > available:
        raise ConfigError(
            f"export of {ckpt.step_dir}: needs ~{need / GIB:.0f} GiB of host memory "
            f"({params_text(params)} x {BYTES_PER_PARAM} bytes + "
            f"{RUNTIME_BYTES // GIB} GiB), this machine has {available / GIB:.0f} GiB "
            "available; run it on a node with more (sbatch slurm/export_hf.sub)"
        )


# ---------------------------------------------------------------------------------------------
# Verification and the cache
# ---------------------------------------------------------------------------------------------


def verify_hf(hf_dir: Path) -> dict[str, Any]:
    """Config and tokenizer load; every weight file's tensors match the config's shapes."""
    import torch
    from safetensors import safe_open
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    try:
        config = AutoConfig.from_pretrained(hf_dir)
        AutoTokenizer.from_pretrained(hf_dir)
    except (OSError, ValueError) as err:
        raise ConfigError(f"{hf_dir}: does not load: {str(err).splitlines()[0]}") from None
    with torch.device("meta"):  # shapes only: no memory for the weights
        expected = {
            k: tuple(v.shape)
            for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()
        }
    found: dict[str, tuple[int, ...]] = {}
    for file in sorted(hf_dir.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a Mapping)
                found[name] = tuple(f.get_slice(name).get_shape())
    if not found:
        raise ConfigError(f"{hf_dir}: no *.safetensors weights")
    tied = getattr(config, "tie_word_embeddings", False)
    missing = [k for k in expected if k not in found and not (tied and k == "lm_head.weight")]
    extra = [k for k in found if k not in expected]
    wrong = [
        f"{k} {found[k]} != {expected[k]}"
        for k in found
        if k in expected and found[k] != expected[k]
    ]
    for what, names in (("missing", missing), ("unexpected", extra), ("wrong shape", wrong)):
        if names:
            raise ConfigError(f"{hf_dir}: {len(names)} {what} weights, e.g. {names[:3]}")
    return {"tensors": len(found), "model_type": config.model_type}


def _write_atomic(path: Path, data: dict[str, Any]) -> None:
    write_text_atomically(path, json.dumps(data, indent=2) + "\n")


def cached_export(ckpt: Checkpoint) -> Path | None:
    """The step's verified HF folder, or None when it was never (fully) exported."""
    return ckpt.hf_dir if (ckpt.hf_dir / MARKER).is_file() else None


def export_checkpoint(
    ckpt: Checkpoint,
    *,
    converter: Converter | None = None,
    available_bytes: int | None = None,
) -> Path:
    """Convert (once) and verify; returns step_N/hf. `converter` defaults to NeMo-RL's."""
    weights = check_megatron(ckpt)
    hit = cached_export(ckpt)
    if hit is not None:
        verify_hf(hit)  # cheap (no weights read): a folder edited since still fails here
        return hit
    check_host_memory(ckpt, host_memory_available() if available_bytes is None else available_bytes)
    if converter is None:
        converter = nemo_export.megatron_to_hf
    policy = ckpt.config["policy"]
    tokenizer = (policy.get("tokenizer") or {}).get("name") or ckpt.model_name
    partial = ckpt.step_dir / f"{HF_DIR}.partial"
    # A folder without the marker is an export that died half-way: ours to redo.
    for stale in (partial, ckpt.hf_dir):
        shutil.rmtree(stale, ignore_errors=True)
    try:
        converter(ckpt.model_name, weights, partial, tokenizer, policy.get("hf_overrides") or {})
        checked = verify_hf(partial)
        _write_atomic(partial / MARKER, {**ckpt.source(), "weights": str(weights), **checked})
    except Exception as err:
        if not disk_full(err):
            raise
        shutil.rmtree(partial, ignore_errors=True)  # half an export is worth nothing: free it
        raise DiskFull(
            disk_full_message(
                ckpt.step_dir,
                f"the Hugging Face export {HF_DIR}",
                folder_size(weights),  # bf16 weights either way: about the checkpoint's size
                "the checkpoint itself is untouched",
            )
        ) from None
    os.replace(partial, ckpt.hf_dir)
    return ckpt.hf_dir


def export_run(
    run_dir: str | Path,
    step: int | str = LATEST,
    *,
    converter: Converter | None = None,
    available_bytes: int | None = None,
) -> tuple[Checkpoint, Path]:
    ckpt = find_checkpoint(run_dir, step)
    return ckpt, export_checkpoint(ckpt, converter=converter, available_bytes=available_bytes)


def main(argv: Sequence[str] | None = None) -> int:
    @exits_on_config_error("export")
    def run(argv: Sequence[str] | None) -> int:
        parser = command_parser(__doc__, prog="python -m darling_nemo.export")
        parser.add_argument("run_dir", help="RESULTS_DIR/RUN_NAME, its checkpoints/ or a step_N")
        parser.add_argument("--step", default=LATEST, help=f"step number or {LATEST!r}")
        parser.add_argument(
            "--host-memory-gib",
            type=float,
            default=None,
            help="memory this job may use (default: MemAvailable, capped by the cgroup)",
        )
        args = parser.parse_args(argv)
        avail = None if args.host_memory_gib is None else int(args.host_memory_gib * GIB)
        ckpt = find_checkpoint(args.run_dir, args.step)
        was_cached = cached_export(ckpt) is not None
        try:
            hf = export_checkpoint(ckpt, available_bytes=avail)
        except ImportError as err:  # run outside the NeMo-RL image
            raise ConfigError(
                f"converting {ckpt.step_dir} needs NeMo-RL v0.4.0 with Megatron-Bridge "
                f"(missing: {err.name or err}); run it in the NeMo-RL image "
                "(sbatch slurm/export_hf.sub)"
            ) from None
        print(f"{'reused' if was_cached else 'exported'} step {ckpt.step}: {hf}")
        return 0

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
