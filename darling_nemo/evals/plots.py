"""Turn the summary.json files of several runs into PNG plots and a Markdown table.

    uv run recipes/plot_runs.py results/base results/grpo results/darling --out results/plots

Each path is a summary.json or a folder searched for them (math, NoveltyBench and creative
summaries are told apart by their `eval` field and grouped by `run_name`). Writes:
    pass_at_k_<benchmark>.png   pass@k against k (log axis), one line per run
    quality_vs_diversity.png    NoveltyBench distinct vs quality, utility and utility_darling
                                (the DARLING paper's number), a point per run
    report.md                   the tables below and the plots
Creative-writing Elo is one Bradley-Terry fit over the pairwise games of all runs given (read
from each run's pairwise.jsonl), so the ratings in one report are on one scale.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt

from darling_nemo.evals.creative import fit_elo
from darling_nemo.evals.records import latest_records
from darling_nemo.evals.schema import PairwiseConfig
from darling_nemo.jsonl import read_json


def load_summaries(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every summary.json under the given files or folders, in a stable order.

    A file reached twice (a folder and its subfolder both given) is read once. Two different
    summaries of the same kind with the same run_name are refused: their rows, lines and
    points would be indistinguishable.
    """
    summaries: list[dict[str, Any]] = []
    seen_files: set[Path] = set()
    seen_names: dict[tuple[str, str], Path] = {}
    for path in map(Path, paths):
        files = sorted(path.rglob("summary.json")) if path.is_dir() else [path]
        if not files or not files[0].exists():
            raise FileNotFoundError(f"no summary.json at or under {path}")
        for file in files:
            if file.resolve() in seen_files:
                continue
            seen_files.add(file.resolve())
            summary = read_json(file)
            if summary.get("eval") not in ("math", "noveltybench", "creative"):
                raise ValueError(f"{file}: not an evaluation summary (no known `eval` field)")
            name = (summary["eval"], summary["run_name"])
            if name in seen_names:
                raise ValueError(
                    f"two {name[0]} summaries have run_name {name[1]!r}: {seen_names[name]} "
                    f"and {file}. Give the runs different run_name=... (or edit run_name in "
                    "one summary.json) so that the report can tell them apart."
                )
            seen_names[name] = file
            summaries.append({**summary, "_path": str(file)})
    return summaries


def _of(summaries: Sequence[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [s for s in summaries if s["eval"] == kind]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def _math_table(runs: list[dict[str, Any]]) -> str:
    names = list(dict.fromkeys(b for s in runs for b in s["benchmarks"]))
    columns = [*names, "average"]

    def curve(s: dict[str, Any], col: str) -> dict[str, float]:
        if col == "average":
            return s["average"]["pass_at_k"]
        return s["benchmarks"].get(col, {}).get("pass_at_k", {})

    head = ["run", *[f"{c} pass@1 / pass@max (max k)" for c in columns]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        cells = [s["run_name"]]
        for col in columns:
            c = curve(s, col)
            if not c:
                cells.append("-")
                continue
            kmax = max(c, key=int)
            cells.append(f"{_pct(c.get('1'))} / {_pct(c[kmax])} ({kmax})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# Summaries written before NoveltyBench had modes were partitioned with 512 tokens per
# response: the DARLING fork's input.
MODE_BEFORE_MODES = "darling"


def noveltybench_mode(summary: dict[str, Any]) -> str:
    return summary.get("mode", MODE_BEFORE_MODES)


def _noveltybench_table(runs: list[dict[str, Any]]) -> str:
    # Every number of a row is in the row's mode: a truncation (128 or 512 tokens) changes
    # the partition, so distinct and both utilities differ between modes.
    head = ["run", "mode", "distinct (of n)", "utility (NoveltyBench)", "utility (DARLING paper)"]
    head += ["quality (1-10)", "prompts", "partition judge"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        judge = s["judge"]["description"] + ("" if s["judge"]["is_reference"] else " (stand-in)")
        mode = noveltybench_mode(s)
        lines.append(
            f"| {s['run_name']} | {mode} | {s['mean_distinct']:.2f} (of {s['n']}, {mode}) | "
            f"{s['mean_utility']:.2f} ({mode}) | {s['mean_utility_darling']:.2f} ({mode}) | "
            f"{s['mean_quality']:.2f} | {s['prompts_done']}/{s['prompts_total']} | {judge} |"
        )
    modes = sorted({noveltybench_mode(s) for s in runs})
    if len(modes) > 1:
        lines.append(
            f"\nNoveltyBench rows in different modes ({', '.join(modes)}): distinct and utility "
            "are not comparable across modes (docs/noveltybench-modes.md)."
        )
    return "\n".join(lines)


def pooled_elo(runs: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """One Bradley-Terry fit over the pairwise games of every given creative run.

    Each creative summary fits only its own games (centred on elo_mean), so ratings from two
    summaries are on different scales. The games are in pairwise.jsonl next to each
    summary.json; pooling them puts every player on one scale (PairwiseConfig's elo_scale,
    elo_mean and prior_games). None when a run with Elo has no pairwise.jsonl (summaries
    passed in memory, or copied without their files).
    """
    files = []
    for s in runs:
        if "elo" not in s:
            continue
        games_file = Path(s.get("_path", "")).parent / "pairwise.jsonl"
        if "_path" not in s or not games_file.exists():
            return None
        files.append(games_file.resolve())
    if not files:
        return None
    games = [
        (r["a"], r["b"], r["score_a"])
        for f in dict.fromkeys(files)
        for r in latest_records(f, "key", repair=False).values()
        if r["status"] == "ok"
    ]
    defaults = PairwiseConfig()
    ratings = fit_elo(games, defaults.elo_scale, defaults.elo_mean, defaults.prior_games)
    return {"ratings": ratings, "games": len(games)}


def _creative_table(runs: list[dict[str, Any]]) -> str:
    pooled = pooled_elo(runs)
    if pooled is not None:
        elo_head = f"Elo (one fit, {pooled['games']} games)"
    elif any("elo" in s for s in runs):
        elo_head = "Elo (per-run fit, not comparable across rows)"
    else:
        elo_head = "Elo"
    head = ["run", "rubric (0-20)", "x5 (0-100)", elo_head, "judged", "failed", "judge retries"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        ratings = pooled["ratings"] if pooled is not None else s.get("elo", {}).get("ratings", {})
        elo = ratings.get(s["run_name"])
        score = s["rubric_score"]
        lines.append(
            f"| {s['run_name']} | {'-' if score is None else f'{score:.2f}'} | "
            f"{'-' if score is None else f'{5 * score:.1f}'} | "
            f"{'-' if elo is None else f'{elo:.0f}'} | {s['judged']} | {s['failed']} | "
            f"{s['retries']} |"
        )
    return "\n".join(lines)


def markdown_table(summaries: Sequence[dict[str, Any]]) -> str:
    """One Markdown table per kind of evaluation present (pass@k in percent)."""
    parts = []
    for kind, title, table in (
        ("math", "Math (pass@k, %)", _math_table),
        ("noveltybench", "NoveltyBench", _noveltybench_table),
        ("creative", "Creative writing", _creative_table),
    ):
        runs = _of(summaries, kind)
        if runs:
            parts.append(f"### {title}\n\n{table(runs)}")
    incomplete = [s["run_name"] for s in summaries if not s.get("complete", True)]
    if incomplete:
        parts.append(f"Incomplete (still running or stopped early): {', '.join(incomplete)}")
    return "\n\n".join(parts)


# ---------------------------------------------------------------------------------------------
# Plots
# ---------------------------------------------------------------------------------------------


def plot_pass_at_k(summaries: Sequence[dict[str, Any]], out_dir: str | Path) -> list[Path]:
    """One PNG per benchmark (and the average): pass@k (%) against k on a log2 axis."""
    runs = _of(summaries, "math")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(b for s in runs for b in s["benchmarks"]))
    written = []
    for name in [*names, "average"]:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        all_ks: set[int] = set()
        for s in runs:
            curve = s["average"] if name == "average" else s["benchmarks"].get(name)
            if not curve or not curve["pass_at_k"]:
                continue
            ks = sorted(map(int, curve["pass_at_k"]))
            all_ks.update(ks)
            ax.plot(
                ks, [100 * curve["pass_at_k"][str(k)] for k in ks], marker="o", label=s["run_name"]
            )
        if not all_ks:
            plt.close(fig)
            continue
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted(all_ks), [str(k) for k in sorted(all_ks)])
        ax.set_xlabel("k (samples)")
        ax.set_ylabel("pass@k (%)")
        ax.set_title(f"pass@k: {name}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = out_dir / f"pass_at_k_{name}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)
    return written


# (summary key, axis label) of each panel of the quality-vs-diversity figure.
QUALITY_DIVERSITY_PANELS = (
    ("mean_quality", "quality: mean rating of all generations (1-10)"),
    ("mean_utility", "utility (NoveltyBench: patience 0.8, repeats 0)"),
    ("mean_utility_darling", "utility_darling (the DARLING paper's: sum / n)"),
)


def quality_diversity_figure(summaries: Sequence[dict[str, Any]]) -> Any:
    """NoveltyBench plane: distinct classes (x) against quality, utility and the paper's
    utility_darling (y), one panel each; None without NoveltyBench summaries."""
    runs = _of(summaries, "noveltybench")
    if not runs:
        return None
    fig, axes = plt.subplots(1, len(QUALITY_DIVERSITY_PANELS), figsize=(15, 4.2))
    for ax, (key, label) in zip(axes, QUALITY_DIVERSITY_PANELS, strict=True):
        for s in runs:
            ax.scatter(s["mean_distinct"], s[key], s=60)
            ax.annotate(
                f"{s['run_name']} ({noveltybench_mode(s)})",
                (s["mean_distinct"], s[key]),
                fontsize=8,
                xytext=(4, 4),
                textcoords="offset points",
            )
        ax.set_xlabel("distinct (mean classes per prompt)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
    fig.suptitle("NoveltyBench: quality vs diversity")
    fig.tight_layout()
    return fig


def plot_quality_diversity(summaries: Sequence[dict[str, Any]], out_dir: str | Path) -> Path | None:
    """quality_vs_diversity.png (see quality_diversity_figure), or None."""
    fig = quality_diversity_figure(summaries)
    if fig is None:
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "quality_vs_diversity.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def make_report(paths: Sequence[str | Path], out_dir: str | Path) -> dict[str, Any]:
    """Plots + report.md for the runs under `paths`; returns what was written."""
    summaries = load_summaries(paths)
    out_dir = Path(out_dir)
    pngs = plot_pass_at_k(summaries, out_dir)
    plane = plot_quality_diversity(summaries, out_dir)
    if plane is not None:
        pngs.append(plane)
    table = markdown_table(summaries)
    images = "\n".join(f"![{p.stem}]({p.name})" for p in pngs)
    report = out_dir / "report.md"
    report.write_text(f"# Evaluation report\n\n{table}\n\n{images}\n")
    return {"report": report, "pngs": pngs, "table": table}
