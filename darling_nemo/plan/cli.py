"""The `darling-plan` command line."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from darling_nemo.config import (
    check_output_file,
    exits_on_config_error,
    load_config,
    whole_number,
)
from darling_nemo.plan.estimate import CLASSIFIER_GPU_MEMORY_UTILIZATION, STANDARD_GPUS, make_plan
from darling_nemo.plan.launcher_env import layout_env
from darling_nemo.plan.report import Labelled, render
from darling_nemo.schema import ConfigError


def detect_gpu_memory_gib() -> float | None:
    """memory.total of GPU 0 from nvidia-smi, or None when there is no GPU here."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
        return int(out.split()[0]) / 1024
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="darling-plan",
        description="Estimate per-GPU memory of a NeMo-RL Megatron GRPO config before launch.",
    )
    p.add_argument("config", help="NeMo-RL YAML config (defaults: chains are followed)")
    p.add_argument("overrides", nargs="*", help="a.b=c overrides, as the recipe takes them")
    p.add_argument(
        "--gpu-memory",
        help="GiB per GPU of the target cluster, or 'auto' (nvidia-smi). The report always "
        "also judges 80 GB and 141 GB GPUs.",
    )
    p.add_argument("--check", action="store_true", help="exit 3 if it does not fit the target")
    p.add_argument("--model-config", help="config.json of the policy model (instead of table)")
    p.add_argument("--classifier-model", help="classifier served for darling.judge (name/path)")
    p.add_argument(
        "--classifier-gpu-memory-utilization",
        type=float,
        default=CLASSIFIER_GPU_MEMORY_UTILIZATION,
    )
    p.add_argument(
        "--classifier-max-model-len",
        type=whole_number,
        help="--max-model-len of the classifier servers (default: the model's own)",
    )
    p.add_argument("--layout-env", help="also write the launcher's facts to this file")
    return p.parse_args(argv)


def _target_gpu(gpu_memory: str | None) -> tuple[float | None, str | None]:
    """(GiB, label) of the GPU named by --gpu-memory; (None, None) for the standard sizes."""
    if gpu_memory == "auto":
        target = detect_gpu_memory_gib()
        return target, "this GPU (nvidia-smi)" if target else None
    if gpu_memory is None:
        return None, None
    try:
        target = float(gpu_memory)
    except ValueError:
        raise ConfigError(f"--gpu-memory: expected GiB or 'auto', got {gpu_memory!r}") from None
    if not target > 0:
        raise ConfigError(f"--gpu-memory: a GPU's memory in GiB must be > 0, got {gpu_memory}")
    return target, f"--gpu-memory {target:g}"


@exits_on_config_error("darling-plan")
def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    cfg = load_config(args.config, args.overrides)
    target, target_label = _target_gpu(args.gpu_memory)
    if args.layout_env:
        check_output_file(args.layout_env, "--layout-env")
    utilization = args.classifier_gpu_memory_utilization
    if not 0 < utilization <= 1:
        raise ConfigError(
            f"--classifier-gpu-memory-utilization: a fraction in (0, 1], got {utilization:g}"
        )
    kwargs = dict(
        model_config=args.model_config,
        classifier_model=args.classifier_model,
        classifier_gpu_memory_utilization=utilization,
        classifier_max_model_len=args.classifier_max_model_len,
    )
    standard = [
        Labelled(label, make_plan(cfg, size, **kwargs)) for label, size in STANDARD_GPUS.items()
    ]
    if target is not None:
        main_plan = make_plan(cfg, target, **kwargs)
        others = standard
    else:
        main_plan, others = standard[0].plan, standard[1:]
        target_label = standard[0].label
    if args.layout_env:
        Path(args.layout_env).write_text(layout_env(cfg))
    print(render(main_plan, others, target_label))
    if args.gpu_memory == "auto" and target is None:
        print("note: no nvidia-smi here; judged against the standard GPU sizes only")
    if args.check:
        fits, _ = main_plan.verdict()
        if not fits:
            print(
                f"darling-plan: the config does not fit {target_label}; nothing launched. "
                "Change the parallel layout (policy.megatron_cfg.*, vllm_cfg.*) or set "
                "DARLING_SKIP_PLAN=1 if you know better.",
                file=sys.stderr,
            )
            return 3
    return 0
