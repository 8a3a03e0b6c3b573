"""The phase checker shared by `--rehearse` (stand-ins, CPU) and `--smoke` (real workers, GPUs).

One function, `verify_run`, says what a run of the recipe must have done, from its log, the
TensorBoard scalars NeMo-RL's logger wrote and the checkpoint folder: setup completed,
exactly the expected steps trained (a resume continues, it does not restart), the DARLING
metrics and the `darling_judge` timer logged at every trained step, the judge fed during
generation where the config asks for it, generation and training agreeing on token
probabilities (the refit), validation where expected, and a checkpoint of the last step.
The two callers differ only in the `Expect` they pass (which steps, how close the refit).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from darling_nemo.nemo_rl.judging_plan import PREFIX_ON, STREAM_ON, JudgingPlan

# The rehearsal's stand-ins refit bit for bit: generation and policy compute the same fp32
# probabilities. On GPUs vLLM (bf16, its own kernels) and Megatron differ by a few percent
# per token; 1.1 is an assumed bound (to be confirmed by the first smoke on GPUs).
REHEARSAL_PROB_ERROR_TOLERANCE = 1e-3
GPU_PROB_ERROR_TOLERANCE = 0.1


class RehearsalFailure(Exception):
    """A phase failed: `<verdict>: FAIL at <phase>: <error>`."""

    def __init__(self, phase: str, error: str) -> None:
        super().__init__(f"{phase}: {error}")
        self.phase, self.error = phase, error


STREAMED_EQUALS_SYNCHRONOUS = (
    "rehearsal check: the DARLING rewards with the verdicts judged during generation equal "
    "the synchronous ones"
)
STREAMED_CHECK_SKIPPED = (
    "rehearsal check: not comparing the verdicts judged during generation with the "
    "synchronous ones: the judge's fallback answered"
)


def check(condition: bool, phase: str, error: str) -> None:
    if not condition:
        raise RehearsalFailure(phase, error)


@dataclass(frozen=True)
class Expect:
    """What one run must show.

    trained: the steps this run trains (run 2 of a resume starts after run 1's last).
    validated: steps at which validation must have run (only where the config validates).
    resume_marker: a log line proving the saved weights were loaded (the stand-ins print
    one; NeMo-RL's real workers print none, so the smoke relies on `trained` alone).
    prob_error_tolerance: |train/token_mult_prob_error - 1| allowed at every trained step.
    stand_in_checks: the rehearsal's own: every streamed step judged again synchronously
    (rehearsal/swap.py) and, with darling.prefix_judging, verdicts on settled words used
    (its responses pass the judge's word budget; a smoke's real ones may not).
    """

    trained: tuple[int, ...]
    validated: tuple[int, ...]
    resumed: bool
    resume_marker: str | None
    prob_error_tolerance: float
    stand_in_checks: bool = False


def logged_scalars(log_dir: Path) -> dict[str, dict[int, float]]:
    """Every scalar NeMo-RL's TensorBoard logger wrote under `log_dir` (name -> step -> value)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, dict[int, float]] = {}
    for events in sorted(log_dir.rglob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events.parent), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out.setdefault(tag, {}).update({e.step: e.value for e in acc.Scalars(tag)})
    return out


def newest_run_scalars(log_root: Path, phase: str) -> dict[str, dict[int, float]]:
    """The scalars of the newest `exp_*` folder NeMo-RL numbered under logger.log_dir."""
    runs = sorted(log_root.glob("exp_*"), key=lambda p: int(p.name.split("_")[-1]))
    check(bool(runs), phase, f"no NeMo-RL log folder under {log_root}")
    return logged_scalars(runs[-1])


def verify_run(
    text: str,
    cfg: dict[str, Any],
    phase: str,
    log_root: Path,
    checkpoint_root: Path,
    expect: Expect,
    plan: JudgingPlan,
) -> dict[str, dict[int, float]]:
    """What one run must have done, read from its log, its TensorBoard scalars and its files,
    `plan`: the judging plan of `cfg` (`judging_plan`, decided once by the caller).
    Raises RehearsalFailure naming the phase; returns the run's scalars."""
    check("SETUP COMPLETE" in text, phase, "NeMo-RL's setup() did not complete")
    if expect.resumed and expect.resume_marker is not None:
        check(expect.resume_marker in text, phase, "the policy did not load the saved weights")
    scalars = newest_run_scalars(log_root, phase)
    trained, wanted = sorted(scalars.get("train/loss", {})), list(expect.trained)
    resumed_right = "(a resume continues, it does not restart)"
    check(trained == wanted, phase, f"trained steps {trained}, expected {wanted} {resumed_right}")
    streamed = plan.generation.on
    if streamed:
        check(STREAM_ON in text, phase, "the rollout did not feed the judge during generation")
    if streamed and expect.stand_in_checks:
        checked = text.count(STREAMED_EQUALS_SYNCHRONOUS) + text.count(STREAMED_CHECK_SKIPPED)
        against = "steps were checked against the synchronous judge (rehearsal/swap.py)"
        check(checked >= len(wanted), phase, f"{checked} of {len(wanted)} {against}")
    prefix = plan.prefix.on
    if prefix:
        check(PREFIX_ON in text, phase, "the generation workers did not report settled words")
    for step in expect.trained:
        names = ["darling/quality_mean", "darling/diversity_mean", "timing/train/darling_judge"]
        if streamed:
            names.append("darling/pairs_judged_during_generation")
        if prefix:
            names.append("darling/pairs_judged_on_settled_words")
        for name in names:
            check(step in scalars.get(name, {}), phase, f"{name} was not logged at step {step}")
        error = scalars["train/token_mult_prob_error"][step]
        check(
            abs(error - 1.0) < expect.prob_error_tolerance,
            phase,
            f"train/token_mult_prob_error={error:.4f} at step {step}: generation and policy "
            "disagree (refit)",
        )
    if prefix and expect.stand_in_checks:
        settled = scalars.get("darling/pairs_judged_on_settled_words", {})
        check(
            sum(settled.values()) > 0,
            phase,
            "no verdict judged on a response's settled words was used "
            "(darling/pairs_judged_on_settled_words is 0 at every step)",
        )
    if cfg["grpo"]["val_period"] > 0:
        for step in expect.validated:
            check(
                step in scalars.get("validation/accuracy", {}),
                phase,
                f"validation did not run at step {step}",
            )
    if cfg["checkpointing"]["enabled"]:
        ckpt = checkpoint_root / f"step_{expect.trained[-1]}"
        check((ckpt / "policy" / "weights").is_dir(), phase, f"no checkpoint at {ckpt}")
    return scalars
