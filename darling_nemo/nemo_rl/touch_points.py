"""Every name darling-nemo replaces inside NeMo-RL v0.4.0, and the guard that checks them.

NeMo-RL v0.4.0 has no hook for a reward transform, so the adapter replaces functions where
`grpo_train` looks them up at call time (the way NeMo-RL's own tests patch it). Such a
replacement is silent if the function changed: on another NeMo-RL it would fail late, deep
inside a 24-hour job, or not at all. `check_touch_points` runs before Ray starts and fails
naming the function whose signature is not v0.4.0's; `replaced` is the one way the adapter
(adapter.py, overlap.py) swaps a module's attribute and puts it back.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

NEMO_RL_VERSION = "0.4.0"

# "module:attribute[.method]" -> its parameters in NeMo-RL v0.4.0 (read from its source).
TOUCH_POINTS: dict[str, tuple[str, ...]] = {
    # The DARLING hook: called after every rollout, before the baseline.
    "nemo_rl.algorithms.grpo:scale_rewards": ("repeated_batch", "reward_scaling_cfg"),
    # grpo_train's per-step timer (subclassed to label the judge's time).
    "nemo_rl.algorithms.grpo:Timer.time": ("self", "label"),
    # Validation rollouts are not judged during generation.
    "nemo_rl.algorithms.grpo:validate": (
        "policy_generation",
        "val_dataloader",
        "tokenizer",
        "val_task_to_env",
        "step",
        "master_config",
    ),
    # Each finished sample of the async engine goes to the judge stream.
    "nemo_rl.experience.rollouts:run_sample_multi_turn_rollout": (
        "sample_idx",
        "initial_sample_state",
        "policy_generation",
        "tokenizer",
        "task_to_env",
        "max_seq_len",
        "max_rollout_turns",
        "greedy",
    ),
    # The Policy grpo_train trains waits for the judge when it runs beside the log-probs.
    "nemo_rl.models.policy.lm_policy:Policy.train": (
        "self",
        "data",
        "loss_fn",
        "eval_mode",
        "gbs",
        "mbs",
    ),
    # darling.prefix_judging: VllmGeneration builds its workers through this name, looked
    # up at call time; the async worker's class path is mapped to prefix_worker.py's.
    "nemo_rl.models.generation.vllm.vllm_generation:RayWorkerBuilder": (
        "ray_actor_class_fqn",
        "args",
        "kwargs",
    ),
    # --smoke's memory probe (memory_probe.py) reads each worker's peak around these.
    "nemo_rl.models.policy.lm_policy:Policy.get_logprobs": ("self", "data"),
    "nemo_rl.models.policy.lm_policy:Policy.get_reference_policy_logprobs": (
        "self",
        "data",
        "micro_batch_size",
    ),
}


class TouchPointError(RuntimeError):
    """NeMo-RL is not the version whose functions the adapter replaces."""


def _resolve(point: str, import_module: Callable[[str], Any]) -> Any:
    module_name, attribute = point.split(":")
    target: Any = import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    return target


def check_touch_points(
    version: str,
    import_module: Callable[[str], Any] = importlib.import_module,
    points: dict[str, tuple[str, ...]] = TOUCH_POINTS,
) -> None:
    """Raise TouchPointError naming every replaced function that is missing or whose
    parameters differ from NeMo-RL v0.4.0's, and a version other than 0.4.0."""
    problems = []
    if version != NEMO_RL_VERSION:
        problems.append(
            f"NeMo-RL v{version} is installed; darling-nemo supports v{NEMO_RL_VERSION}"
        )
    for point, expected in points.items():
        name = point.replace(":", ".")
        try:
            found = tuple(inspect.signature(_resolve(point, import_module)).parameters)
        except (ImportError, AttributeError) as err:
            problems.append(f"{name}: not found ({err})")
            continue
        if found != expected:
            problems.append(
                f"{name}: parameters ({', '.join(found)}), expected ({', '.join(expected)}) as "
                f"in v{NEMO_RL_VERSION}"
            )
    if problems:
        raise TouchPointError(
            "the DARLING adapter replaces NeMo-RL functions by name and cannot run on this "
            "NeMo-RL:\n" + "\n".join(f"  {p}" for p in problems)
        )


@contextmanager
def replaced(module: Any, **replacements: Any) -> Iterator[None]:
    """Set `module.<name> = value` for each replacement (names from TOUCH_POINTS), and put
    the originals back on the way out, whatever happens inside."""
    declared = {
        point.split(":")[1].split(".")[0]
        for point in TOUCH_POINTS
        if point.startswith(f"{module.__name__}:")
    }
    undeclared = sorted(set(replacements) - declared)
    if undeclared:
        raise ValueError(f"{module.__name__}: {undeclared} are not declared in TOUCH_POINTS")
    originals = {name: getattr(module, name) for name in replacements}
    for name, value in replacements.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in originals.items():
            setattr(module, name, value)
