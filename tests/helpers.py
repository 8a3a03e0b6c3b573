"""Plain helpers several test modules share (fixtures live in conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
# One torch thread: on a small shared CI machine, thread oversubscription makes a tiny
# model's generate() hundreds of times slower.
RECIPE_ENV = {
    **os.environ,
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
}


def run_python(
    *args: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python *args` in a fresh interpreter (this one's executable) from the repository root,
    stdout and stderr captured as text; `env` replaces the environment when given."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_recipe(script: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`recipes/<script>` as a user runs it: a fresh interpreter, from the repository root,
    offline. With `check`, a non-zero exit fails the test with the end of its stderr."""
    proc = run_python(str(REPO / "recipes" / script), *args, env=RECIPE_ENV, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def nemo_config(darling: dict | None = None, **grpo) -> dict:
    """The NeMo-RL keys that nemo_rl.checks reads, consistent with DARLING's defaults;
    `grpo` keys and `darling` settings override them."""
    return {
        "grpo": {
            "normalize_rewards": False,
            "use_leave_one_out_baseline": False,
            "num_generations_per_prompt": 8,
            "async_grpo": {"enabled": False},
            "reward_shaping": {"enabled": False},
            **grpo,
        },
        "loss_fn": {"token_level_loss": True},
        "darling": {"judge": {"kind": "lexical"}, **(darling or {})},
    }


def scale_rewards_and_baseline(cfg: dict, batch, input_ids) -> tuple:
    """grpo_train v0.4.0's first lines after the rollout: scale_rewards (where the DARLING
    hook sits), then NeMo-RL's group baseline and std; returns (batch, baseline, std)."""
    import torch
    from nemo_rl.algorithms import grpo
    from nemo_rl.algorithms.utils import calculate_baseline_and_std_per_prompt

    batch = grpo.scale_rewards(batch, cfg["grpo"]["reward_scaling"])
    rewards = batch["total_reward"]
    baseline, std = calculate_baseline_and_std_per_prompt(
        input_ids,
        rewards,
        torch.ones_like(rewards),
        leave_one_out_baseline=cfg["grpo"]["use_leave_one_out_baseline"],
    )
    return batch, baseline, std


def start_local_ray(**init_kwargs: Any) -> None:
    """`ray.init(**init_kwargs)` for a test's own local cluster, tried up to three times.

    Ray waits a fixed 30 s for its raylet to register (ray/_private/node.py); on a 2-core
    machine at a load average of 20 (measured: three suites at once beside two busy loops)
    that wait ran out in 3 setups of one fresh-clone run. Only that start-up timeout is
    retried; any other error is the test's to report."""
    import ray

    for attempt in range(3):
        try:
            ray.init(**init_kwargs)
            return
        except Exception as err:  # ray raises a bare Exception for this one
            if "timed out during startup" not in str(err) or attempt == 2:
                raise
            ray.shutdown()


def mount_tmpfs(folder: Path, size: str) -> str | None:
    """Mount a real tmpfs of `size` (e.g. "3m") on `folder`, for a test of a full disk;
    returns why not where mounting is not allowed (not root, a container without the
    capability), None when mounted. Unmount with `unmount(folder)`."""
    folder.mkdir(parents=True, exist_ok=True)
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
        capture_output=True,
        text=True,
    )
    return None if made.returncode == 0 else (made.stderr.strip() or "mount failed")


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)
