"""Modelled durations for the CPU rehearsal's stand-ins (`python -m darling_nemo.bench.step_time`).

When DARLING_STEP_TIME_MODEL names a JSON file {"real_s_per_simulated_s": x, "phases":
{phase: simulated seconds}}, a paced call takes at least its phase's modelled duration
times x: it runs, then sleeps what is left. Phases: generation, logprobs,
reference_logprobs, training (the GPU worker stand-ins, each Ray worker in parallel, so
the phase lasts its duration) and judge (DARLING's judge and core, once per step, in the
driver). Without the variable (every other run) nothing is paced.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

MODEL_ENV = "DARLING_STEP_TIME_MODEL"
PHASES = ("generation", "logprobs", "reference_logprobs", "training", "judge")
F = TypeVar("F", bound=Callable[..., Any])


def _model(path: str) -> tuple[float, dict[str, float]]:
    spec = json.loads(Path(path).read_text())
    unknown = set(spec["phases"]) - set(PHASES)
    if unknown:
        raise ValueError(f"{path}: unknown phases {sorted(unknown)}; known: {PHASES}")
    return float(spec["real_s_per_simulated_s"]), {k: float(v) for k, v in spec["phases"].items()}


def phase_seconds(phase: str) -> float:
    """Real seconds a `phase` call must last (0 when no model is set). The file is read at
    every call: the benchmark rewrites it between runs, whose Ray workers may be reused."""
    path = os.environ.get(MODEL_ENV)
    if not path:
        return 0.0
    scale, phases = _model(path)
    return phases.get(phase, 0.0) * scale


def pace_remaining(phase: str, started: float) -> None:
    """Sleep until `phase`'s modelled duration has passed since `started` (perf_counter)."""
    left = phase_seconds(phase) - (time.perf_counter() - started)
    if left > 0:
        time.sleep(left)


def paced(phase: str) -> Callable[[F], F]:
    """Decorator: the call lasts at least the phase's modelled duration."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                pace_remaining(phase, started)

        return call  # type: ignore[return-value]

    return wrap
