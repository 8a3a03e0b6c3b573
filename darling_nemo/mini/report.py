"""The miniature's report: the side-by-side table and the PNG curves, from run directories.

Every number is read back from what the runs wrote (`eval_history.jsonl`,
`train_log.jsonl`), so a report can be rebuilt without training. Arms are compared over
the same seeds; the table gives the mean and the spread (sample std) over seeds, and the
per-seed differences to the first arm say whether a gap is consistent or noise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from darling_nemo.jsonl import read_jsonl


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
    }


def mean_and_std(per_seed: Mapping[int, Mapping[str, float]], key: str) -> tuple[float, float]:
    """Mean and sample std (0 for one seed) of `key` over seeds."""
    values = np.array([summary[key] for summary in per_seed.values()], dtype=float)
    return float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0


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


def differences(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]], keys: Sequence[str]
) -> list[str]:
    """For every arm after the first: its per-seed difference to the first arm, per key."""
    names = list(per_arm)
    base = per_arm[names[0]]
    lines = []
    for name in names[1:]:
        for key in keys:
            diffs = [per_arm[name][seed][key] - base[seed][key] for seed in base]
            wins = sum(d > 0 for d in diffs)
            shown = ", ".join(f"{d:+.3f}" for d in diffs)
            lines.append(
                f"{key}: {name} - {names[0]} = {np.mean(diffs):+.3f} on average "
                f"(per seed: {shown}; higher in {wins}/{len(diffs)} seeds)"
            )
    return lines


PANELS = (
    ("eval_history.jsonl", "pass@1", "held-out pass@1"),
    ("eval_history.jsonl", "distinct_correct", "held-out distinct correct answers / prompt"),
    ("train_log.jsonl", "darling/correct_fraction", "training: fraction correct"),
    ("train_log.jsonl", "darling/diversity_mean", "training: mean diversity within a group"),
)


def plot_curves(run_dirs: Mapping[str, Sequence[Path]], path: Path) -> None:
    """Four panels over training steps; a line is the mean over seeds, the band min..max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (file, key, title) in zip(axes.flat, PANELS, strict=True):
        for name, dirs in run_dirs.items():
            series = [{r["step"]: r[key] for r in read_records(d / file) if key in r} for d in dirs]
            steps = sorted(set.intersection(*(set(s) for s in series)))
            values = np.array([[s[step] for step in steps] for s in series])
            ax.plot(steps, values.mean(axis=0), label=f"{name} (mean of {len(dirs)})")
            ax.fill_between(steps, values.min(axis=0), values.max(axis=0), alpha=0.2)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pass_at_k(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]], ks: Sequence[int], path: Path
) -> None:
    """Final held-out pass@k against k (log scale): mean over seeds, one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, per_seed in per_arm.items():
        ax.plot(
            list(ks), [mean_and_std(per_seed, f"pass@{k}")[0] for k in ks], marker="o", label=name
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("held-out pass@k (mean over seeds)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
