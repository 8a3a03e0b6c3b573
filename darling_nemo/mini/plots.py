"""The miniature's figures: training curves and held-out pass@k, readable without the code.

Each figure carries a title naming the task and the run's settings, and its legend says what
the shaded band or error bar is: ± one sample std over seeds, the spread the comparison
table prints. The warm start (the policy every arm starts from, evaluated at step 0) is
drawn as a reference in every held-out panel.

What is drawn is computed first (`curve_bands`, `pass_at_k_bands`), so tests check the
plotted numbers, the k values and the warm-start reference without comparing pixels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from darling_nemo.mini.report import WARM_START_ROW, read_records, spread_over_seeds

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from darling_nemo.schema import MiniConfig

BAND_LABEL = "± 1 std over seeds"  # the table's "m ± s" is the same sample std


@dataclass(frozen=True)
class Band:
    """One curve: at each x, the mean and sample std over `seeds` runs."""

    x: list[int]
    mean: np.ndarray
    std: np.ndarray
    seeds: int


def band(series: Sequence[Mapping[int, float]]) -> Band:
    """Mean and std over seeds at the x values every seed has (one {x: value} per seed)."""
    if not series:
        raise ValueError("band: no seeds")
    xs = sorted(set.intersection(*(set(s) for s in series)))
    mean, std = spread_over_seeds(np.array([[s[x] for x in xs] for s in series], dtype=float))
    return Band(xs, mean, std, len(series))


# (log file, key, panel title); the eval_history panels start at step 0 = the warm start.
PANELS = (
    ("eval_history.jsonl", "pass@1", "held-out pass@1"),
    ("eval_history.jsonl", "distinct_correct", "held-out distinct correct answers / prompt"),
    ("train_log.jsonl", "darling/correct_fraction", "training batches: fraction correct"),
    ("train_log.jsonl", "darling/diversity_mean", "training batches: mean DARLING diversity"),
)


def curve_bands(run_dirs: Mapping[str, Sequence[Path]], file: str, key: str) -> dict[str, Band]:
    """Per arm, `key` of `file` over training steps, across that arm's seed directories."""
    return {
        name: band([{r["step"]: r[key] for r in read_records(d / file) if key in r} for d in dirs])
        for name, dirs in run_dirs.items()
    }


def pass_at_k_bands(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]],
    warm: Mapping[int, Mapping[str, float]],
    ks: Sequence[int],
) -> dict[str, Band]:
    """Final held-out pass@k at exactly the measured `ks`: the warm start first, then each arm."""
    curves = {WARM_START_ROW: warm, **per_arm}
    return {
        name: band([{k: summary[f"pass@{k}"] for k in ks} for summary in per_seed.values()])
        for name, per_seed in curves.items()
    }


def figure_title(cfg: MiniConfig, task_line: str) -> str:
    """Two lines: the task (`task_line`), then the settings every arm shares."""
    trainer, evaluation = cfg.trainer, cfg.evaluation
    return (
        f"{task_line}\n"
        f"{len(cfg.seeds)} seeds, {trainer.max_steps} RL steps of {trainer.prompts_per_step} "
        f"prompts x {trainer.group_size} samples at T = {trainer.temperature:g}; "
        f"held-out: {evaluation.num_samples} samples / prompt at T = {evaluation.temperature:g}"
    )


def plot_curves(run_dirs: Mapping[str, Sequence[Path]], path: Path, title: str) -> Figure:
    """Four panels over training steps: mean over seeds, band ± 1 std; saved to `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    for ax, (file, key, panel_title) in zip(axes.flat, PANELS, strict=True):
        bands = curve_bands(run_dirs, file, key)
        start = next(iter(bands.values()))
        evaluated = file == "eval_history.jsonl"  # a point every evaluation.every_steps
        if evaluated and start.x and start.x[0] == 0:
            # Every arm is evaluated at step 0 on the same warm start: one reference line.
            ax.axhline(start.mean[0], color="0.4", linestyle=":", label=WARM_START_ROW)
        for name, curve in bands.items():
            (line,) = ax.plot(
                curve.x, curve.mean, marker="o" if evaluated else None, markersize=3,
                label=f"{name} (mean of {curve.seeds} seeds)",
            )  # fmt: skip
            ax.fill_between(
                curve.x, curve.mean - curve.std, curve.mean + curve.std, alpha=0.18, lw=0,
                color=line.get_color(),
            )  # fmt: skip
        ax.set_title(panel_title)
        ax.set_xlabel("RL training step")
        ax.grid(alpha=0.3)
        ax.legend(title=f"shaded: {BAND_LABEL}", fontsize="small", title_fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, path)


def plot_pass_at_k(
    per_arm: Mapping[str, Mapping[int, Mapping[str, float]]],
    warm: Mapping[int, Mapping[str, float]],
    ks: Sequence[int],
    path: Path,
    title: str,
) -> Figure:
    """Final held-out pass@k at the measured k: mean over seeds, error bars ± 1 std."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bands = pass_at_k_bands(per_arm, warm, ks)
    fig, ax = plt.subplots(figsize=(7.5, 5.5))
    for i, (name, curve) in enumerate(bands.items()):
        # Nudge each curve sideways (by a factor, the axis is logarithmic) so bars stay apart.
        nudge = 2.0 ** (0.06 * (i - (len(bands) - 1) / 2))
        warm_start = name == WARM_START_ROW
        ax.errorbar(
            [k * nudge for k in curve.x], curve.mean, yerr=curve.std, capsize=3,
            marker="s" if warm_start else "o", linestyle="--" if warm_start else "-",
            color="0.4" if warm_start else None, label=f"{name} (mean of {curve.seeds} seeds)",
        )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(ks), [str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k (only the k the run measured)")
    ax.set_ylabel("held-out pass@k of the final policy")
    ax.grid(alpha=0.3)
    ax.legend(title=f"error bars: {BAND_LABEL}", fontsize="small", title_fontsize="small")
    ax.set_title(title, fontsize="small")
    fig.tight_layout()
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Figure:
    """Write the PNG and release pyplot's hold on the figure (it stays inspectable)."""
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig
