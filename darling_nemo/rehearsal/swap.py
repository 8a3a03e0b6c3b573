"""Swap NeMo-RL's GPU worker classes for the CPU stand-ins, in every process of a rehearsal
(and pace DARLING's judge when the step-time benchmark sets its duration model; elsewhere,
check that judging during generation changed no DARLING reward).

NeMo-RL builds its workers from class-path strings (`RayWorkerBuilder(class_path, ...)`) in
the driver and, for the reward model, inside the RewardModelEnvironment actor, then imports
them inside other Ray actors. `install()` patches `RayWorkerBuilder` to map those class paths
to darling_nemo/rehearsal/standins.py and points their Python at this interpreter
(`ACTOR_ENVIRONMENT_REGISTRY`), right after NeMo-RL's modules are imported. It runs in
every Python process the rehearsal starts: site/sitecustomize.py calls it when
DARLING_REHEARSAL_DIR is set, and the rehearsal puts that folder first on PYTHONPATH, which
Ray hands to every worker it starts.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from darling_nemo.metrics import judge_usage
from darling_nemo.rehearsal import PATCHED_MODULES
from darling_nemo.rehearsal.pacing import MODEL_ENV, paced_judge
from darling_nemo.rehearsal.phases import STREAMED_CHECK_SKIPPED, STREAMED_EQUALS_SYNCHRONOUS
from darling_nemo.rehearsal.standins import STAND_INS


def _patch_worker_builder(module: ModuleType) -> None:
    builder = module.RayWorkerBuilder
    original_init = builder.__init__
    if getattr(original_init, "_rehearsal", False):
        return

    def init(self: Any, ray_actor_class_fqn: str, *args: Any, **kwargs: Any) -> None:
        original_init(
            self, STAND_INS.get(ray_actor_class_fqn, ray_actor_class_fqn), *args, **kwargs
        )

    init._rehearsal = True  # type: ignore[attr-defined]
    builder.__init__ = init


def _patch_registry(module: ModuleType) -> None:
    from nemo_rl.distributed.virtual_cluster import PY_EXECUTABLES

    for class_path in (*STAND_INS, *STAND_INS.values()):
        module.ACTOR_ENVIRONMENT_REGISTRY[class_path] = PY_EXECUTABLES.SYSTEM


def _pace_the_judge(module: ModuleType) -> None:
    """The benchmark's duration model (bench.step_time) reaches DARLING's judge from here, so
    the production transform never imports the rehearsal: `paced_judge` is the judge itself
    unless the model's variable is set."""
    transform = module.DarlingRewardTransform
    original_init = transform.__init__
    if getattr(original_init, "_rehearsal", False):
        return

    def init(self: Any, darling: Any, judge: Any) -> None:
        original_init(self, darling, paced_judge(judge))

    init._rehearsal = True  # type: ignore[attr-defined]
    transform.__init__ = init


def _check_streamed_verdicts(module: ModuleType) -> None:
    """Every rollout judged during generation is judged again without the stream's verdicts
    (the synchronous path), and the rehearsal stops unless rewards, diversity and classes
    are the same bit for bit. Not in the step-time benchmark (its judge is paced), and not
    once a served judge's fallback has answered (the drills kill the server on purpose)."""
    transform = module.DarlingRewardTransform
    original = transform.compute
    if getattr(original, "_rehearsal", False):
        return

    def compute(self: Any, rows: Any) -> Any:
        stream = self.stream
        outcome = original(self, rows)
        if stream is None or os.environ.get(MODEL_ENV):
            return outcome
        kept_batches = len(self._batches)
        self.stream = None
        try:
            synchronous = original(self, rows)
        finally:
            self.stream = stream
            del self._batches[kept_batches:]  # the check's own batch is not the step's
        fallback = judge_usage(self.judge).get("judge_fallback_pairs", 0.0)
        if fallback:  # a server failed: its fallback's verdicts differ from it by design
            print(f"{STREAMED_CHECK_SKIPPED} ({fallback:.0f} pairs by the fallback)", flush=True)
            return outcome
        same = np.array_equal(outcome.reward, synchronous.reward) and np.array_equal(
            outcome.diversity, synchronous.diversity
        )
        if outcome.result is not None and synchronous.result is not None:
            same = same and np.array_equal(outcome.result.class_ids, synchronous.result.class_ids)
        if not same:
            rows_differ = np.flatnonzero(outcome.reward != synchronous.reward).tolist()
            raise RuntimeError(
                "rehearsal check: the verdicts judged during generation changed the DARLING "
                f"reward (rows {rows_differ}); darling.judge_during_generation / "
                "darling.prefix_judging must not change a class"
            )
        print(f"{STREAMED_EQUALS_SYNCHRONOUS} ({len(outcome.reward)} rows)", flush=True)
        return outcome

    compute._rehearsal = True  # type: ignore[attr-defined]
    transform.compute = compute


def _patch_transform(module: ModuleType) -> None:
    _pace_the_judge(module)
    _check_streamed_verdicts(module)


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "nemo_rl.distributed.worker_groups": _patch_worker_builder,
    "nemo_rl.distributed.ray_actor_environment_registry": _patch_registry,
    "darling_nemo.nemo_rl.transform": _patch_transform,
}


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps the loader of the modules in PATCHES so the patch runs
    right after the module executes."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in PATCHES:
            return None
        for finder in sys.meta_path:
            if finder is self:
                continue
            spec = getattr(finder, "find_spec", lambda *a: None)(name, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_then_patch(module: ModuleType, _exec: Any = exec_module) -> None:
                    _exec(module)
                    PATCHES[name](module)

                spec.loader.exec_module = exec_then_patch  # type: ignore[method-assign]
                return spec
        return None


if set(PATCHES) != set(PATCHED_MODULES):  # sitecustomize installs this module by those names
    raise ImportError(f"swap.PATCHES {sorted(PATCHES)} != PATCHED_MODULES {PATCHED_MODULES}")


def install() -> None:
    """Patch now what is already imported, and the rest when it is."""
    for name, patch in PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
    if not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())


def patched_spec(name: str, path: Any, target: Any = None) -> Any:
    """The spec of `name` (one of PATCHES), its module patched once it executes: for an
    import already under way when install() ran (site/sitecustomize.py)."""
    finder = next(f for f in sys.meta_path if isinstance(f, _PatchAfterImport))
    return finder.find_spec(name, path, target)
