"""Modelled durations for the CPU rehearsal's stand-ins (`python -m darling_nemo.bench.step_time`).

When DARLING_STEP_TIME_MODEL names a JSON file {"real_s_per_simulated_s": x, "phases":
{phase: simulated seconds}, "capped_fraction": c, "settle_fraction": s (optional, 1)}, a
paced call takes at least its modelled duration times x: it runs, then sleeps what is left.
Without the variable (every other run) nothing is paced. The model:
- vLLM stand-ins: a synchronous `generate` call lasts generation + generation_decode (its
  longest response reaches the cap); with the async engine each response lasts generation +
  generation_decode * its length / the cap, the lengths following the response-length model
  of `length_fraction` (a share c of responses reach the cap, the others spread evenly);
  the words the judge reads of a response are settled at generation + generation_decode *
  min(its length, s) / the cap (s: the judge's words in tokens / the cap).
- Policy stand-ins: logprobs, reference_logprobs, training per call (every Ray worker in
  parallel, so the phase lasts its duration).
- DARLING's judge (in the driver): judge_call per call + judge_pair per pair sent.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from darling_nemo.judge_stream import prefix_words

MODEL_ENV = "DARLING_STEP_TIME_MODEL"
PHASES = (
    "generation",
    "generation_decode",
    "logprobs",
    "reference_logprobs",
    "training",
    "judge_call",
    "judge_pair",
)
F = TypeVar("F", bound=Callable[..., Any])


GOLDEN = 0.6180339887498949  # consecutive calls spread evenly over [0, 1)


def settle_fraction() -> float:
    """The model's `settle_fraction` (1 without a model or the key: settled at the end)."""
    path = os.environ.get(MODEL_ENV)
    return float(json.loads(Path(path).read_text()).get("settle_fraction", 1.0)) if path else 1.0


def _model(path: str) -> tuple[float, dict[str, float], float]:
    spec = json.loads(Path(path).read_text())
    missing = {"real_s_per_simulated_s", "phases", "capped_fraction"} - set(spec)
    if missing:
        raise ValueError(f"{path}: missing {sorted(missing)}")
    unknown = set(spec["phases"]) - set(PHASES)
    if unknown:
        raise ValueError(f"{path}: unknown phases {sorted(unknown)}; known: {PHASES}")
    phases = {k: float(v) for k, v in spec["phases"].items()}
    return float(spec["real_s_per_simulated_s"]), phases, float(spec["capped_fraction"])


def _current() -> tuple[float, dict[str, float], float] | None:
    """The model in effect, read at every call (the benchmark rewrites the file between
    runs, whose Ray workers are reused); None when no model is set."""
    path = os.environ.get(MODEL_ENV)
    return _model(path) if path else None


def phase_seconds(phase: str, count: float = 1.0) -> float:
    """Real seconds `count` units of `phase` must last (0 when no model is set)."""
    model = _current()
    return model[1].get(phase, 0.0) * count * model[0] if model else 0.0


def length_fraction(call: int, capped: float) -> float:
    """Length / cap of a worker's `call`-th response under the response-length model: the
    golden-ratio sequence u (even spread, any window of calls) mapped to 1 below the capped
    share, else to (u - capped) / (1 - capped)."""
    u = (call * GOLDEN) % 1.0
    return 1.0 if u < capped else (u - capped) / (1.0 - capped)


def response_seconds(call: int) -> float:
    """Real seconds the async engine's `call`-th response of a worker must last."""
    model = _current()
    if model is None:
        return 0.0
    scale, phases, capped = model
    decode = phases.get("generation_decode", 0.0) * length_fraction(call, capped)
    return (phases.get("generation", 0.0) + decode) * scale


def settle_seconds(call: int) -> float | None:
    """Real seconds after which the async engine's `call`-th response of a worker has its
    judged words settled; None when no model is set."""
    model = _current()
    if model is None:
        return None
    scale, phases, capped = model
    fraction = min(length_fraction(call, capped), settle_fraction())
    return (phases.get("generation", 0.0) + phases.get("generation_decode", 0.0) * fraction) * scale


def seconds_left(seconds: float, started: float) -> float:
    """What is left of `seconds` since `started` (perf_counter), never below 0."""
    return max(0.0, seconds - (time.perf_counter() - started))


def paced(*phases: str) -> Callable[[F], F]:
    """Decorator: the call lasts at least the sum of the phases' modelled durations."""

    def wrap(method: F) -> F:
        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                time.sleep(seconds_left(sum(phase_seconds(p) for p in phases), started))

        return call  # type: ignore[return-value]

    return wrap


class PacedJudge:
    """A pair judge whose calls last judge_call + judge_pair * pairs (the classifier node)."""

    def __init__(self, judge: Callable[[Any], Any]) -> None:
        self.judge = judge

    def __call__(self, pairs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.judge(pairs)
        finally:
            modelled = phase_seconds("judge_call") + phase_seconds("judge_pair", len(pairs))
            time.sleep(seconds_left(modelled, started))

    @property
    def prefix_words(self) -> int | None:  # judge_stream.prefix_words of the wrapped judge
        return prefix_words(self.judge)

    @property
    def stats(self) -> Any:  # the wrapped judge's counters (metrics.judge_usage)
        return getattr(self.judge, "stats", None)


def paced_judge(judge: Any) -> Any:
    """The judge, paced when the benchmark's model is set (`judge` itself otherwise)."""
    return PacedJudge(judge) if judge is not None and os.environ.get(MODEL_ENV) else judge
