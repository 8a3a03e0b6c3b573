"""The miniature's report: the side-by-side table and per-seed differences, from run directories.

Every number is read back from what the runs wrote (`eval_history.jsonl`,
`train_log.jsonl`), so a report can be rebuilt without training. Arms are compared over
the same seeds; the table gives the mean and the spread (sample std) over seeds, and the
per-seed differences to the first arm say whether a gap is consistent or noise. The
figures are drawn from the same numbers by `darling_nemo.mini.plots`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.jsonl import read_jsonl
from darling_nemo.resume import write_json

WARM_START_ROW = "warm start (step 0)"  # the policy every arm starts from, evaluated at step 0


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records of a finished run's log ([] if absent); a bad line raises naming file:line."""
    return read_jsonl(path) if path.is_file() else []


def arm_summary(run_dir: Path, ks: Sequence[int]) -> dict[str, float]:
    """Final held-out metrics of one run, plus its training diversity averaged over steps."""
    evals = read_records(run_dir / "eval_history.jsonl")
    train = read_records(run_dir / "train_log.jsonl")
    if not evals:
        raise FileNotFoundError(
            f"{run_dir}/eval_history.jsonl is missing or empty: did the run finish?"
        )
    final = evals[-1]
    diversity = [r["darling/diversity_mean"] for r in train if "darling/diversity_mean" in r]
    return {
        "step": final["step"],
        **{f"pass@{k}": final[f"pass@{k}"] for k in ks},
        "distinct_correct": final["distinct_correct"],
        "distinct_all": final["distinct_all"],
        "train_diversity_mean": float(np.mean(diversity)) if diversity else float("nan"),
        **{key: value for key, value in final.items() if "/pass@" in key},
    }


def spread_over_seeds(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std (ddof=1; 0 for one seed) over axis 0, one row per seed."""
    std = values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros_like(values[0])
    return values.mean(axis=0), std


def mean_and_std(per_seed: Mapping[int, Mapping[str, float]], key: str) -> tuple[float, float]:
    """Mean and sample std (0 for one seed) of `key` over seeds: the table's "m ± s"."""
    mean, std = spread_over_seeds(np.array([summary[key] for summary in per_seed.values()]))
    return float(mean), float(std)


def format_table(rows: Mapping[str, Mapping[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table, one row per entry of `rows`; (mean, std) cells print as "m ± s"."""
    lines = ["| arm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in rows.items():
        cells = []
        for col in columns:
            value = row.get(col, "")
            if isinstance(value, tuple):
                cells.append(f"{value[0]:.3f} ± {value[1]:.3f}")
            elif isinstance(value, float):
                cells.append(f"{value:.3f}")
            else:
                cells.append(str(value))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_interval(diffs: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """Two-sided t-interval for the mean of paired per-seed differences (needs >= 2 seeds)."""
    from scipy.stats import t

    values = np.asarray(diffs, dtype=float)
    if values.size < 2:
        raise ValueError("a paired interval needs at least 2 seeds")
    half = t.ppf(0.5 + level / 2, df=values.size - 1) * values.std(ddof=1) / np.sqrt(values.size)
    return float(values.mean() - half), float(values.mean() + half)


def differences(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]], keys: Sequence[str]
) -> list[str]:
    """For every arm after the first: its per-seed difference to the first arm, per key,
    with the paired 95% t-interval of the mean difference (from 2 seeds on)."""
    names = list(per_arm)
    base = per_arm[names[0]]
    lines = []
    for name in names[1:]:
        for key in keys:
            diffs = [per_arm[name][seed][key] - base[seed][key] for seed in base]
            wins = sum(d > 0 for d in diffs)
            shown = ", ".join(f"{d:+.3f}" for d in diffs)
            interval = (
                "; paired 95% t-interval [{:+.3f}, {:+.3f}]".format(*paired_interval(diffs))
                if len(diffs) > 1
                else ""
            )
            lines.append(
                f"{key}: {name} - {names[0]} = {np.mean(diffs):+.3f} on average "
                f"(per seed: {shown}; higher in {wins}/{len(diffs)} seeds{interval})"
            )
    return lines


def gains_by_judge_accuracy(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]],
    accuracy: Mapping[str, float | None],
    keys: Sequence[str],
) -> str:
    """The judge sweep's table: one row per arm after the first (the baseline, e.g. GRPO),
    by its training judge's accuracy (highest first; None, an arm that asks no judge, last):
    the mean per-seed gain over the baseline per key, with the paired 95% t-interval from 2
    seeds on."""
    names = list(per_arm)
    base = per_arm[names[0]]
    header = " | ".join(f"{key} gain over {names[0]}" for key in keys)
    lines = [f"| judge accuracy | arm | {header} |", "|---" * (len(keys) + 2) + "|"]
    for name in sorted(names[1:], key=lambda arm: -(accuracy[arm] or -1.0)):
        cells = []
        for key in keys:
            diffs = [per_arm[name][seed][key] - base[seed][key] for seed in base]
            cell = f"{np.mean(diffs):+.3f}"
            if len(diffs) > 1:
                cell += " [{:+.3f}, {:+.3f}]".format(*paired_interval(diffs))
            cells.append(cell)
        shown = "no judge" if accuracy[name] is None else f"{accuracy[name]:.2f}"
        lines.append(f"| {shown} | {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


WALL_TIME = "wall_time.json"  # the run's wall time over all its invocations (a rerun resumes)


class WallTime:
    """The wall time of one output_dir over every invocation that worked on it.

    A rerun that reuses finished arms takes seconds; reporting only those would overwrite
    the measured figure with a meaningless one. So each invocation adds its own seconds to
    what earlier ones saved, and saves again after every finished warm start or arm: a
    killed invocation counts up to its last finished piece (the rest of its time is lost,
    and the note says so).
    """

    def __init__(self, out: Path, started: float) -> None:
        self.path = out / WALL_TIME
        self.started = started
        if self.path.is_file():
            saved = json.loads(self.path.read_text())
            self.earlier_s, self.earlier_runs = float(saved["seconds"]), int(saved["invocations"])
        elif (out / "comparison.json").is_file():  # a report written before this ledger existed
            self.earlier_s = float(
                json.loads((out / "comparison.json").read_text())["wall_seconds"]
            )
            self.earlier_runs = 1
        else:
            self.earlier_s, self.earlier_runs = 0.0, 0

    def save(self, now: float) -> dict[str, float]:
        """Saves (and returns) this invocation's seconds and the total so far."""
        this_s = now - self.started
        write_json(
            self.path, {"seconds": self.earlier_s + this_s, "invocations": self.earlier_runs + 1}
        )
        return {"wall_seconds": self.earlier_s + this_s, "wall_seconds_this_run": this_s}


def wall_time_note(total_s: float, this_s: float, earlier_runs: int) -> str:
    """The wall-time clause of comparison.md: one figure for a run done in one go, both
    figures (this invocation's and the total) for a resumed or reused one."""
    if earlier_runs == 0:
        return f"wall time {this_s:.0f} s"
    return (
        f"resumed: {this_s:.0f} s this run, {total_s:.0f} s total over {earlier_runs + 1} runs "
        "(an interrupted run counted up to its last finished warm start or arm)"
    )
