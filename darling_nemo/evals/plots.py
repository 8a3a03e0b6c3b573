"""Turn the summary.json files of several runs into PNG plots and a Markdown table.

    uv run recipes/plot_runs.py results/base results/grpo results/darling --out results/plots

Each path is a summary.json or a folder searched for them (math, NoveltyBench and creative
summaries are told apart by their `eval` field and grouped by `run_name`). Writes:
    pass_at_k_<benchmark>.png   pass@k against k (log axis), one line per run
    quality_vs_diversity.png    NoveltyBench distinct vs quality (and utility), a point per run
    report.md                   the tables below and the plots
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; never a window
import matplotlib.pyplot as plt


def load_summaries(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every summary.json under the given files or folders, in a stable order."""
    summaries = []
    for path in map(Path, paths):
        files = sorted(path.rglob("summary.json")) if path.is_dir() else [path]
        if not files or not files[0].exists():
            raise FileNotFoundError(f"no summary.json at or under {path}")
        for file in files:
            summary = json.loads(file.read_text())
            if summary.get("eval") not in ("math", "noveltybench", "creative"):
                raise ValueError(f"{file}: not an evaluation summary (no known `eval` field)")
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


def _noveltybench_table(runs: list[dict[str, Any]]) -> str:
    head = ["run", "distinct (of n)", "utility", "utility (DARLING paper)", "quality (1-10)"]
    head += ["prompts", "partition judge"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        judge = s["judge"]["description"] + ("" if s["judge"]["is_reference"] else " (stand-in)")
        lines.append(
            f"| {s['run_name']} | {s['mean_distinct']:.2f} (of {s['n']}) | "
            f"{s['mean_utility']:.2f} | {s['mean_utility_darling']:.2f} | {s['mean_quality']:.2f} | "
            f"{s['prompts_done']}/{s['prompts_total']} | {judge} |"
        )
    return "\n".join(lines)


def _creative_table(runs: list[dict[str, Any]]) -> str:
    head = ["run", "rubric (0-20)", "x5 (0-100)", "Elo", "judged", "failed", "judge retries"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in runs:
        elo = s.get("elo", {}).get("ratings", {}).get(s["run_name"])
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


def plot_quality_diversity(summaries: Sequence[dict[str, Any]], out_dir: str | Path) -> Path | None:
    """NoveltyBench plane: distinct classes (x) against mean quality and utility (y)."""
    runs = _of(summaries, "noveltybench")
    if not runs:
        return None
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, key, label in (
        (axes[0], "mean_quality", "quality: mean rating of all generations (1-10)"),
        (axes[1], "mean_utility", "utility (patience-discounted, repeats score 0)"),
    ):
        for s in runs:
            ax.scatter(s["mean_distinct"], s[key], s=60)
            ax.annotate(
                s["run_name"],
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
