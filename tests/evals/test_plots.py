"""Plots and report from several runs' summaries: PNGs opened and checked for content, the
Markdown table checked for the numbers, and the command-line entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO
from PIL import Image

from darling_nemo.evals.creative import summarize_creative
from darling_nemo.evals.math import summarize_math
from darling_nemo.evals.noveltybench import summarize_noveltybench
from darling_nemo.evals.plots import load_summaries, make_report, markdown_table
from darling_nemo.evals.records import write_json
from darling_nemo.evals.schema import RubricConfig

C0 = np.array([31, 119, 180])  # matplotlib's first line colour (#1f77b4)


def math_summary(run: str, correct_per_problem: list[int], n: int = 8) -> dict:
    records = [
        {
            "benchmark": bench,
            "id": str(i),
            "n": n,
            "num_correct": c,
            "correct": [True] * c + [False] * (n - c),
            "preds": ["1"] * n,
            "num_tokens": [100] * n,
            "truncated": [False] * n,
        }
        for bench in ("aime25", "hmmt")
        for i, c in enumerate(correct_per_problem)
    ]
    totals = {"aime25": len(correct_per_problem), "hmmt": len(correct_per_problem)}
    return summarize_math(records, ["aime25", "hmmt"], None, totals, {"run_name": run})


def nb_summary(
    run: str, distinct: list[int], quality: list[float], mode: str | None = "upstream"
) -> dict:
    scored = [
        # Made-up utilities, apart so that the table cannot swap them.
        {"distinct": d, "utility": q * d / 10, "utility_darling": q * d / 20, "quality": q}
        for d, q in zip(distinct, quality, strict=True)
    ]
    meta = {
        "run_name": run,
        "n": 10,
        "judge": {"description": "embedding > 0.8", "is_reference": False},
    }
    if mode is not None:  # None: a summary written before NoveltyBench had modes
        meta["mode"] = mode
    return summarize_noveltybench(scored, len(scored), meta)


@pytest.fixture
def run_dirs(tmp_path):
    runs = {
        # Correct samples (of 8) per problem, then NoveltyBench distinct and quality per prompt.
        "base": (math_summary("base", [0, 1, 2]), nb_summary("base", [5, 6], [6.0, 7.0])),
        "grpo": (math_summary("grpo", [0, 4, 6]), nb_summary("grpo", [2, 2], [7.5, 7.5])),
        "darling": (math_summary("darling", [1, 4, 6]), nb_summary("darling", [6, 5], [8.0, 7.0])),
    }
    dirs = []
    for name, (math_s, nb_s) in runs.items():
        write_json(tmp_path / name / "math" / "summary.json", math_s)
        write_json(tmp_path / name / "noveltybench" / "summary.json", nb_s)
        dirs.append(tmp_path / name)
    return dirs


def assert_not_blank(path: Path) -> np.ndarray:
    pixels = np.asarray(Image.open(path).convert("RGB")).astype(float)
    assert pixels.shape[0] > 200 and pixels.shape[1] > 300
    assert pixels.std() > 10  # not a flat image
    assert (pixels.sum(axis=2) < 600).mean() > 0.01  # more than a few non-white pixels
    return pixels


def test_report_plots_and_table(run_dirs, tmp_path):
    written = make_report(run_dirs, tmp_path / "plots")
    names = sorted(p.name for p in written["pngs"])
    assert names == [
        "pass_at_k_aime25.png",
        "pass_at_k_average.png",
        "pass_at_k_hmmt.png",
        "quality_vs_diversity.png",
    ]
    for png in written["pngs"]:
        pixels = assert_not_blank(png)
        # The first run's colour is really drawn (a line or a point, not only axes).
        assert (np.abs(pixels - C0).sum(axis=2) < 30).sum() > 30, png.name

    table = written["table"]
    # darling, aime25: c = 1, 4, 6 of 8 -> pass@1 = 11/24 = 45.8 %; pass@8 = 100 %.
    assert "| darling | 45.8 / 100.0 (8) | 45.8 / 100.0 (8) | 45.8 / 100.0 (8) |" in table
    # base: c = 0, 1, 2 -> pass@1 = 3/24 = 12.5 %; pass@8 = 2/3 = 66.7 %.
    assert "| base | 12.5 / 66.7 (8)" in table
    # NoveltyBench: grpo distinct (2+2)/2 = 2.00, quality 7.50, utility 7.5*2/10 = 1.50,
    # utility_darling 7.5*2/20 = 0.75; every number of the row names its mode.
    row = (
        "| grpo | upstream | 2.00 (of 10, upstream) | 1.50 (upstream) | 0.75 (upstream) | 7.50 "
        "| 2/2 | embedding > 0.8 (stand-in) |"
    )
    assert row in table
    assert "not comparable across modes" not in table  # all three runs are upstream
    report = (tmp_path / "plots" / "report.md").read_text()
    assert "![quality_vs_diversity](quality_vs_diversity.png)" in report and table in report


def test_creative_rows_and_incomplete_runs():
    rubric = RubricConfig(criteria=["A", "B"], negative_criteria=[])
    judged = [
        {
            "status": "ok",
            "scores": {"A": 10.0, "B": 14.0},
            "score": 12.0,
            "attempts": 1,
            "key": "x#0",
        },
        {"status": "failed", "scores": None, "score": None, "attempts": 4, "key": "y#0"},
    ]
    s = summarize_creative(judged, 3, rubric, {"run_name": "c"})
    table = markdown_table([s])
    # rubric 12.00 (x5 = 60.0), no Elo, 1 judged, 1 failed, 3 retries; 1 never judged.
    assert "| c | 12.00 | 60.0 | - | 1 | 1 | 3 |" in table
    assert "Incomplete (still running or stopped early): c" in table
    assert s["not_judged"] == 1 and s["per_criterion"] == {"A": 10.0, "B": 14.0}


def test_load_summaries_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no summary\.json"):
        load_summaries([tmp_path])
    (tmp_path / "summary.json").write_text('{"x": 1}')
    with pytest.raises(ValueError, match="not an evaluation summary"):
        load_summaries([tmp_path / "summary.json"])


def test_plot_command(run_dirs, tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "recipes/plot_runs.py"),
            *map(str, run_dirs),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MPLBACKEND": "Agg"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "wrote" in proc.stdout and "| darling |" in proc.stdout
    assert_not_blank(out / "pass_at_k_average.png")
    assert_not_blank(out / "quality_vs_diversity.png")


def test_duplicate_run_names_are_refused_and_a_file_given_twice_is_read_once(run_dirs, tmp_path):
    # The same folder twice, and a folder with its subfolder: each file is read once.
    again = load_summaries([run_dirs[0], run_dirs[0] / "math", run_dirs[0] / "math/summary.json"])
    assert [(s["eval"], s["run_name"]) for s in again] == [
        ("math", "base"),
        ("noveltybench", "base"),
    ]
    # A second evaluation that kept the name "base" (the default is the checkpoint folder's
    # name, so step_200 of two runs collide): refused, naming both files.
    copy = tmp_path / "other" / "base"
    write_json(copy / "math" / "summary.json", math_summary("base", [8, 8, 8]))
    with pytest.raises(ValueError, match=r"two math summaries have run_name 'base': .*other"):
        make_report([run_dirs[0], copy], tmp_path / "plots")


def test_quality_diversity_shows_the_papers_utility(run_dirs):
    import matplotlib.pyplot as plt

    from darling_nemo.evals.plots import quality_diversity_figure

    fig = quality_diversity_figure(load_summaries(run_dirs))
    points = {
        ax.get_ylabel().split(" ")[0].rstrip(":"): [
            float(v) for c in ax.collections for v in c.get_offsets()[0]
        ]
        for ax in fig.axes
    }
    plt.close(fig)
    # Per run (base, grpo, darling) x = mean distinct: (5+6)/2, (2+2)/2, (6+5)/2.
    # utility_darling = mean of q*d/20: base (6*5 + 7*6)/40 = 1.8, grpo 7.5*2/20 = 0.75,
    # darling (8*6 + 7*5)/40 = 2.075. utility (q*d/10) is twice that.
    # Flattened (x, y) of base, grpo, darling.
    assert points["utility_darling"] == pytest.approx([5.5, 1.8, 2.0, 0.75, 5.5, 2.075])
    assert points["utility"] == pytest.approx([5.5, 3.6, 2.0, 1.5, 5.5, 4.15])
    assert points["quality"] == pytest.approx([5.5, 6.5, 2.0, 7.5, 5.5, 7.5])


def creative_run(folder: Path, name: str, games: list[tuple[str, str, float]]) -> Path:
    """A creative run's summary.json and pairwise.jsonl holding `games` (a, b, score_a)."""
    from darling_nemo.evals.records import JsonlWriter
    from darling_nemo.evals.schema import PairwiseConfig

    records = [
        {"key": f"g{i}", "a": a, "b": b, "item": f"p{i}#0", "status": "ok", "score_a": score}
        | {"plus_a": None, "plus_b": None, "attempts": 1, "errors": [], "reply": None}
        for i, (a, b, score) in enumerate(games)
    ]
    records.append({**records[0], "key": "lost", "status": "failed", "score_a": None})
    with JsonlWriter(folder / "pairwise.jsonl") as writer:
        for r in records:
            writer.write(r)
    judged = [{"status": "ok", "scores": {"A": 10.0}, "score": 10.0, "attempts": 1, "key": "x"}]
    rubric = RubricConfig(criteria=["A"], negative_criteria=[])
    summary = summarize_creative(
        judged, 1, rubric, {"run_name": name}, records, PairwiseConfig(enabled=True)
    )
    write_json(folder / "summary.json", summary)
    return folder


def test_creative_elo_is_one_fit_over_all_runs_games(tmp_path):
    # Run A beat B in 3 of 4 games; run C beat B in 1 of 4. Each run's own fit (one virtual
    # draw per pair): A: 3.5 of 5 wins -> A - B = 400 log10(3.5/1.5) = 147.2, centred on 1000:
    # A 1073.6; C: 1.5 of 5 -> C 926.4. In the same fit B sits between them: A - B and
    # B - C are both 147.2 (a chain decouples), so A 1147.2, B 1000, C 852.8.
    a = creative_run(tmp_path / "A", "A", [("A", "B", 1.0)] * 3 + [("B", "A", 1.0)])
    c = creative_run(tmp_path / "C", "C", [("C", "B", 1.0)] + [("B", "C", 1.0)] * 3)
    per_run = load_summaries([a, c])
    assert per_run[0]["elo"]["ratings"]["A"] == pytest.approx(1073.6, abs=0.05)
    assert per_run[1]["elo"]["ratings"]["C"] == pytest.approx(926.4, abs=0.05)

    table = markdown_table(per_run)
    assert "Elo (one fit, 8 games)" in table  # the failed comparison is not a game
    assert "| A | 10.00 | 50.0 | 1147 |" in table
    assert "| C | 10.00 | 50.0 | 853 |" in table

    # Without the games (summaries copied alone) the column says what it holds.
    (a / "pairwise.jsonl").unlink()
    table = markdown_table(load_summaries([a, c]))
    assert "Elo (per-run fit, not comparable across rows)" in table
    assert "| A | 10.00 | 50.0 | 1074 |" in table and "| C | 10.00 | 50.0 | 926 |" in table


def test_noveltybench_rows_of_different_modes_are_flagged():
    runs = [
        nb_summary("leaderboard", [5, 6], [6.0, 7.0]),
        nb_summary("paper", [5, 6], [6.0, 7.0], mode="darling"),
        nb_summary("old", [2, 2], [7.5, 7.5], mode=None),  # before modes: 512 tokens, darling
    ]
    table = markdown_table(runs)
    assert "| paper | darling | 5.50 (of 10, darling) |" in table
    assert "| old | darling | 2.00 (of 10, darling) |" in table
    assert "| leaderboard | upstream | 5.50 (of 10, upstream) |" in table
    assert "different modes (darling, upstream): distinct and utility are not comparable" in table
