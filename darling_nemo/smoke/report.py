"""The smoke's comparison with the plan: measured GPU memory per phase against `darling-plan`,
the step's phase times, and the judge's share of the step against the simulated figure.

Pure (no torch, no NeMo-RL): it reads a memory report (JSON lines, written on GPUs by
darling_nemo/nemo_rl/memory_probe.py, or any file of the same form given with
`--memory-report`, which is how the CPU tests inject one) and NeMo-RL's TensorBoard scalars
as a dict, and returns the lines to print.

Memory report lines: {"phase": "training", "step": 1, "peak_gib": 41.2, "workers": 64}
(the largest torch.cuda.max_memory_allocated of the phase over the policy's workers, reset
before the phase). The plan's figure compared with it is the part of the phase torch
allocates: the phase's total less its fixed terms (CUDA context, NCCL, a sleeping vLLM),
which live outside torch's allocator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from darling_nemo import tasks
from darling_nemo.judges.cost import SIMULATED_JUDGE_SHARE
from darling_nemo.plan.terms import GIB, Phase
from darling_nemo.schema import ConfigError

WARN_FRACTION = 0.15  # a phase more than 15% off the plan is worth a look before the long run
MEMORY_PHASES = ("training", "logprobs")  # what the probe can measure (vLLM reserves its own)


@dataclass(frozen=True)
class Row:
    phase: str
    plan_gib: float
    measured_gib: float | None

    @property
    def difference(self) -> float | None:
        """(measured - plan) / plan; None when the phase was not measured."""
        if self.measured_gib is None or self.plan_gib <= 0:
            return None
        return (self.measured_gib - self.plan_gib) / self.plan_gib

    @property
    def off(self) -> bool:
        return self.difference is not None and abs(self.difference) > WARN_FRACTION


def read_memory_report(path: Path) -> dict[str, float]:
    """Phase -> the largest peak (GiB) over the report's lines. Bad lines: ConfigError naming
    path:line."""
    if not path.is_file():
        raise ConfigError(f"{path}: no memory report here (--memory-report names a file)")
    peaks: dict[str, float] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            phase, peak = str(row["phase"]), float(row["peak_gib"])
        except (ValueError, KeyError, TypeError) as err:
            raise ConfigError(
                f"{path}:{number}: expected a JSON object with phase and peak_gib ({err})"
            ) from None
        if not peak >= 0:
            raise ConfigError(f"{path}:{number}: peak_gib must be >= 0, got {peak}")
        peaks[phase] = max(peak, peaks.get(phase, 0.0))
    return peaks


def torch_allocated(phase: Phase) -> float:
    """GiB of the plan's phase that torch's allocator holds (fixed runtime terms left out)."""
    fixed = ("runtime", "asleep")
    return sum(t.bytes for t in phase.terms if not any(w in t.label for w in fixed)) / GIB


def compare(plan_phases: list[Phase], measured: dict[str, float]) -> list[Row]:
    """One row per phase the probe measures, in the plan's order; a phase the plan has on
    several GPUs (first and last pipeline stage) is its largest, as the probe's figure is
    the largest over the workers."""
    rows: dict[str, float] = {}
    for phase in plan_phases:
        if phase.name in MEMORY_PHASES:
            rows[phase.name] = max(torch_allocated(phase), rows.get(phase.name, 0.0))
    return [Row(name, plan, measured.get(name)) for name, plan in rows.items()]


def memory_lines(rows: list[Row], source: str) -> list[str]:
    lines = [
        f"memory per phase (GiB per GPU; plan: darling-plan's torch-allocated terms; "
        f"measured: {source})",
        f"  {'phase':<10} {'plan':>8} {'measured':>9} {'difference':>11}",
    ]
    for row in rows:
        measured = "-" if row.measured_gib is None else f"{row.measured_gib:.2f}"
        diff = "not measured" if row.difference is None else f"{row.difference:+.0%}"
        lines.append(f"  {row.phase:<10} {row.plan_gib:>8.2f} {measured:>9} {diff:>11}")
    for row in rows:
        if row.off:
            lines.append(
                f"warning: {row.phase} measured {row.measured_gib:.2f} GiB, plan "
                f"{row.plan_gib:.2f} GiB ({row.difference:+.0%}, more than "
                f"{WARN_FRACTION:.0%} off): check the plan's assumptions for this phase "
                "before the long run"
            )
    return lines


def judge_mode(overlap: bool, streamed: bool) -> str:
    if not overlap:
        return "sync"
    return "overlap+stream" if streamed else "overlap"


def step_times(scalars: dict[str, dict[int, float]], step: int) -> dict[str, float]:
    """NeMo-RL's top-level timers of `step` in seconds (its sub-timers and rates left out)."""
    prefix = "timing/train/"
    return {
        name[len(prefix) :]: values[step]
        for name, values in scalars.items()
        if name.startswith(prefix)
        and "/" not in name[len(prefix) :]
        and "per_sec" not in name
        and step in values
    }


def simulated_judge_overhead(task: str, mode: str) -> float | None:
    """The task's judge share at the paper's scale in `mode` (docs/judge-cost.md, "Measured":
    darling_judge / (step - darling_judge) of the paced CPU simulation, one 8-GPU classifier
    node), as judges/cost.py records it; None where none was measured."""
    entry = tasks.task(task)
    setting = next((n for n in (entry.name, *entry.aliases) if n in SIMULATED_JUDGE_SHARE), "")
    return SIMULATED_JUDGE_SHARE.get(setting, {}).get(mode)


def time_lines(scalars: dict[str, dict[int, float]], step: int, task: str, mode: str) -> list[str]:
    """The step's phase times (NeMo-RL's timing/train/* of `step`) and the judge's share."""
    times = step_times(scalars, step)
    lines = [f"phase times of step {step} (s, NeMo-RL's timers)"]
    for name, seconds in sorted(times.items(), key=lambda kv: -kv[1]):
        lines.append(f"  {name:<40} {seconds:>9.1f}")
    total, judge = times.get("total_step_time"), times.get("darling_judge")
    simulated = simulated_judge_overhead(task, mode)
    if total is None or judge is None:
        lines.append("judge share: not computed (total_step_time or darling_judge not logged)")
        return lines
    rest = total - judge
    measured = f"{judge / rest:.1%}" if rest > 0 else "n/a"
    beside = (
        f"simulated {simulated:.1%} (docs/judge-cost.md, {task}, {mode}, 8 classifier GPUs)"
        if simulated is not None
        else "no simulated figure for this mode"
    )
    lines.append(
        f"judge share: darling_judge {judge:.1f} s of a {total:.1f} s step = {measured} "
        f"overhead (darling_judge / rest of the step); {beside}"
    )
    return lines


def write_report(path: Path, lines: list[str], data: dict[str, Any]) -> None:
    """The report as printed (smoke_report.txt) and its figures (smoke_report.json)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "smoke_report.txt").write_text("\n".join(lines) + "\n")
    (path / "smoke_report.json").write_text(json.dumps(data, indent=2) + "\n")
