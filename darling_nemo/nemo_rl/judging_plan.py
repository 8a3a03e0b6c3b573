"""The judging plan: where a run's pair judge works, decided once from the config and the engine.

Pure (no NeMo-RL import). Four choices, each with its reason:

    log_probs   darling.overlap: the judge runs while NeMo-RL computes log-probabilities
    generation  darling.judge_during_generation: pairs are judged as their responses finish
    prefix      darling.prefix_judging: a response joins once the words the judge reads
                are settled
    fallback    the judging none of those takes runs in the reward hook, before the baseline

`judging_plan` decides; the NeMo-RL adapter prints the plan once (`JudgingPlan.lines`: what
is on, and each reason that stops an option that is on) and passes it down to the overlap
code; the rehearsal's phase checks and the smoke read the same plan of the config they ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from darling_nemo.judges.registry import prefix_fallbacks
from darling_nemo.nemo_rl.checks import overlap_fallbacks, stream_fallbacks
from darling_nemo.schema import DarlingConfig

OVERLAP_ON = "darling.overlap: the judge runs while NeMo-RL computes log-probabilities"
STREAM_ON = "darling.judge_during_generation: pairs are judged as their responses finish"
PREFIX_ON = (
    "darling.prefix_judging: a response joins the judge stream once the words the judge "
    "reads are settled"
)
TRL_ENGINE = "engine trl: the judge runs in TRL's reward function, after each generation"


@dataclass(frozen=True)
class Choice:
    """One decision. `stops`: what stops an option the config turns on (each printed, with
    `instead`: what runs in its place); `reason`: why it is on or off, in words."""

    key: str
    on: bool
    reason: str
    stops: tuple[str, ...] = ()
    instead: str = ""
    on_line: str = ""

    def lines(self) -> list[str]:
        """What the start-up prints for it."""
        stopped = [f"{self.key}=true: {self.instead} because {stop}" for stop in self.stops]
        return [*stopped, *([self.on_line] if self.on and self.on_line else [])]


@dataclass(frozen=True)
class JudgingPlan:
    engine: str
    log_probs: Choice
    generation: Choice
    prefix: Choice
    fallback: Choice

    def lines(self) -> list[str]:
        """The plan as the start-up prints it, once."""
        return [*self.log_probs.lines(), *self.generation.lines(), *self.prefix.lines()]


def _choice(
    key: str, wanted: bool, stops: list[str], instead: str, on_line: str, unavailable: str = ""
) -> Choice:
    """On when the config asks for it, nothing stops it and it is available here."""
    if not wanted:
        return Choice(key, False, f"{key} is false")
    if stops:
        return Choice(key, False, "; ".join(stops), tuple(stops), instead)
    if unavailable:
        return Choice(key, False, unavailable)
    return Choice(key, True, f"{key} is true and nothing in the config stops it", (), "", on_line)


def judging_plan(
    cfg: dict[str, Any], darling: DarlingConfig, engine: str = "nemo_rl", policy: bool = True
) -> JudgingPlan:
    """The plan for this config (`cfg`: the whole config, NeMo-RL's keys included) and
    engine; `policy`: the NeMo-RL Policy is at hand to overlap with (False: the hook alone,
    as the adapter's tests run it)."""
    if engine != "nemo_rl":
        off = [Choice(key, False, TRL_ENGINE) for key in _KEYS]
        return JudgingPlan(engine, *off, Choice("fallback", True, TRL_ENGINE))
    log_probs = _choice(
        "darling.overlap",
        darling.overlap,
        overlap_fallbacks(cfg),
        "judging synchronously",
        OVERLAP_ON,
        "" if policy else "no NeMo-RL Policy to overlap with: the hook judges alone",
    )
    generation = _choice(
        "darling.judge_during_generation",
        darling.judge_during_generation,
        stream_fallbacks(cfg, darling),
        "not streaming",
        STREAM_ON,
    )
    prefix = _choice(
        "darling.prefix_judging",
        darling.prefix_judging,
        prefix_fallbacks(darling.judge) if generation.on else [],
        "responses join the judge stream when they finish",
        PREFIX_ON,
        "" if generation.on else "no judging during generation to join early",
    )
    if log_probs.on:
        fallback = Choice("fallback", False, "the rest is judged while log-probabilities run")
    else:
        rest = "the rest of the pairs" if generation.on else "every pair"
        fallback = Choice("fallback", True, f"{rest} judged in the reward hook: {log_probs.reason}")
    return JudgingPlan(engine, log_probs, generation, prefix, fallback)


_KEYS = ("darling.overlap", "darling.judge_during_generation", "darling.prefix_judging")
