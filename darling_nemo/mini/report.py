"""The miniature's report: the side-by-side table and the PNG curves, from run directories.

Every number is read back from what the runs wrote (`eval_history.jsonl`,
`train_log.jsonl`, `final_metrics.json`), so a report can be rebuilt without training.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def read_records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def arm_summary(run_dir: Path, ks: Sequence[int]) -> dict[str, Any]:
    """Final held-out metrics of one arm, plus its training diversity averaged over steps."""
    evals = read_records(run_dir / "eval_history.jsonl")
    train = read_records(run_dir / "train_log.jsonl")
    if not evals:
        raise FileNotFoundError(f"{run_dir}/eval_history.jsonl is missing or empty: did the run finish?")
    final = evals[-1]
    diversity = [r["darling/diversity_mean"] for r in train if "darling/diversity_mean" in r]
    return {
        "step": final["step"],
        **{f"pass@{k}": final[f"pass@{k}"] for k in ks},
        "distinct_correct": final["distinct_correct"],
        "distinct_all": final["distinct_all"],
        "train_diversity_mean": sum(diversity) / len(diversity) if diversity else float("nan"),
    }


def format_table(rows: dict[str, dict[str, Any]], columns: Sequence[str]) -> str:
    """A Markdown table: one row per arm (the dict order), the given columns."""
    lines = ["| arm | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, row in rows.items():
        cells = []
        for col in columns:
            value = row.get(col, "")
            cells.append(f"{value:.3f}" if isinstance(value, float) else str(value))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(run_dirs: dict[str, Path], path: Path) -> None:
    """Four panels over training steps: held-out pass@1 and distinct correct answers,
    training correct fraction and mean DARLING diversity of the sampled groups."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("eval_history.jsonl", "pass@1", "held-out pass@1"),
        ("eval_history.jsonl", "distinct_correct", "held-out distinct correct answers / prompt"),
        ("train_log.jsonl", "darling/correct_fraction", "training: fraction correct"),
        ("train_log.jsonl", "darling/diversity_mean", "training: mean diversity of a group"),
    ]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (file, key, title) in zip(axes.flat, panels, strict=True):
        for name, run_dir in run_dirs.items():
            records = [r for r in read_records(run_dir / file) if key in r]
            ax.plot([r["step"] for r in records], [r[key] for r in records], label=name, marker="." if file.startswith("eval") else None)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_pass_at_k(summaries: dict[str, dict[str, Any]], ks: Sequence[int], path: Path) -> None:
    """Final held-out pass@k against k (log scale), one line per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, summary in summaries.items():
        ax.plot(list(ks), [summary[f"pass@{k}"] for k in ks], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k")
    ax.set_ylabel("held-out pass@k")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
