"""The judge figures of docs/calibrated-judge.md: the shipped head's error rates out of fold,
the threshold by the partition it makes, a fine-tuned judge's paired comparison, and the
cross-validation folds a classifier run trains on (numpy and the shipped table only)."""

from __future__ import annotations

import io
import json
import re
from contextlib import redirect_stdout

import numpy as np
import pytest

from darling_nemo.bench import judge_cv, judge_operating_point
from darling_nemo.classifier_training.data import load_split
from darling_nemo.judges import calibrate
from darling_nemo.judges.calibrated import error_rates, grouped_folds
from darling_nemo.schema import ClassifierTrainConfig, ConfigError, validate_section

TABLE = calibrate.read_table(calibrate.SHIPPED_TABLE)


def printed(main, argv: list[str]) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        main(argv)
    return out.getvalue()


def test_error_rates_by_hand():
    rates = error_rates([0, 0, 0, 0, 1, 1], [True, False, False, False, False, True])
    assert rates == {"false_similar": 0.25, "false_different": 0.5}
    with pytest.raises(ValueError, match="both labels"):
        error_rates([1, 1], [True, False])


def test_the_shipped_heads_error_rates_out_of_fold_are_the_recorded_ones():
    text = printed(judge_operating_point.main, ["--groups", "50"])
    # docs/calibrated-judge.md and conf/mini/judge_rates.yaml quote these
    assert "| all (pooled) | 1000 (327 similar) | 71.3% | 71.1% | 28.2% (190/673) " in text
    assert "| 29.7% (97/327) |" in text
    assert text.count("| fold ") == 5


def test_class_sizes_and_a_perfect_judges_partition_by_hand():
    linked = np.zeros((4, 4), dtype=bool)
    linked[0, 1] = linked[1, 0] = linked[1, 2] = linked[2, 1] = True  # 0-1-2 chained, 3 alone
    assert judge_operating_point.class_sizes(linked).tolist() == [3, 3, 3, 1]
    y = np.array([0] * 50 + [1] * 50)
    perfect = judge_operating_point.partition_errors(y, y.astype(float), 0.3, 200, 0)
    assert (perfect["mae"] == 0).all()  # every threshold in (0, 1) splits 0 from 1
    merging = judge_operating_point.partition_errors(y, np.ones(100), 0.3, 200, 0)
    assert (merging["bias"] < 0).all()  # a judge that says "similar" to all: no diversity


def test_cv_folds_are_the_benchmarks_folds():
    _, y, groups, rows = TABLE
    folds = grouped_folds(groups, 5, 0)
    for k in (0, 3):
        cfg = ClassifierTrainConfig(cv_folds=5, cv_fold=k)
        pairs, train, heldout = load_split(cfg, calibrate.SHIPPED_PAIRS)
        lines = np.array([r["line"] for r in rows])
        assert sorted(p.line for p in heldout) == sorted(lines[folds == k].tolist())
        assert len(train) + len(heldout) == len(pairs) == y.size
    with pytest.raises(ConfigError, match=r"cv_fold=5 must be < cv_folds=5"):
        validate_section(ClassifierTrainConfig, {"cv_folds": 5, "cv_fold": 5}, "classifier")


def write_fold_runs(root, score: str, folds: np.ndarray, held_shift: int = 0) -> str:
    """Fold runs whose `scores.jsonl` scores every pair with the table's column `score`."""
    _, _, _, rows = TABLE
    for k in range(5):
        run = root / f"fold{k}"
        run.mkdir()
        held = (folds + held_shift) % 5 == k
        lines = [
            {"line": r["line"], "part": "heldout" if held[i] else "train", "score": r[score]}
            for i, r in enumerate(rows)
        ]
        (run / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(root / "fold{k}")


def test_the_paired_comparison_of_a_judge_with_itself_is_zero(tmp_path):
    folds = grouped_folds(TABLE[2], 5, 0)
    runs = write_fold_runs(tmp_path, "cos", folds)  # "fine-tuned" = the shipped cosine
    text = printed(judge_cv.main, [runs, "--resamples", "200"])
    # the head over that cosine is the shipped head: every paired difference is exactly 0
    head = text.split("calibrated head over the fine-tuned cosine minus")[1]
    numbers = re.findall(r"[+-]\d+\.\d", head.split("|---|---|---|---|")[1])
    assert len(numbers) == 18 and set(numbers) == {"+0.0"}  # 3 metrics x 6 figures
    # the bare cosine at a balanced threshold from its training folds: docs' cross-fitted row
    assert "| fine-tuned score | 69.1% | 68.6% | 0.752 |" in text


def test_a_run_of_another_fold_is_refused(tmp_path):
    folds = grouped_folds(TABLE[2], 5, 0)
    runs = write_fold_runs(tmp_path, "cos", folds, held_shift=1)
    with pytest.raises(SystemExit, match="fold 0's held-out pairs are not fold 0"):
        judge_cv.main([runs, "--resamples", "10"])


def test_the_start_up_figures_are_the_benchmarks_on_the_shipped_table():
    """The figures a run prints at start-up (judges/figures.py) are what the benchmarks
    recompute from the shipped feature table (numpy only: the same on any machine), and the
    default threshold is the one part 2's rule picks."""
    from darling_nemo.judges.calibrated import classification_metrics
    from darling_nemo.judges.figures import SHIPPED
    from darling_nemo.schema import EmbeddingJudgeConfig

    y, _, scores, said = judge_operating_point.out_of_fold(0, 5)
    assert judge_operating_point.part_two_choice(y, scores, 4000, 0) == 0.74
    cosine = TABLE[0][:, calibrate.columns(["cos"])[0]]
    decided = {
        "calibrated_partition": (scores, scores > 0.74, {}),
        "calibrated_balanced": (scores, said, {"operating_point": "balanced"}),
        "cosine": (cosine, cosine > 0.89, {"head": "cosine"}),
    }
    for key, (p, decisions, config) in decided.items():
        figures = SHIPPED[key]
        metrics = classification_metrics(p, y, decisions)
        assert round(metrics["accuracy"], 3) == figures.accuracy
        assert round(metrics["balanced_accuracy"], 3) == figures.balanced_accuracy
        rates = error_rates(y, decisions)
        assert rates["false_similar"] == pytest.approx(figures.false_similar, abs=1e-12)
        assert rates["false_different"] == pytest.approx(figures.false_different, abs=1e-12)
        assert round(EmbeddingJudgeConfig(**config).threshold, 3) == figures.threshold


def test_the_start_up_line_names_the_judge_and_its_figures_or_says_they_do_not_apply():
    from darling_nemo.judges.figures import judge_startup_lines
    from darling_nemo.schema import validate_darling

    def lines(judge: dict) -> list[str]:
        return judge_startup_lines(validate_darling({"judge": judge}).judge)

    (line,) = lines({"kind": "embedding"})
    assert line.startswith("darling judge: embedding judge, calibrated head over the shipped ")
    assert "(operating point: partition), threshold 0.740" in line
    assert "false similar 5.2%, false different 72.5%" in line
    assert "training diversity on the routes task at these rates 0.80 (exact judge 0.83)" in line
    (balanced,) = lines({"kind": "embedding", "operating_point": "balanced"})
    assert "threshold 0.516" in balanced and "false similar 28.2%" in balanced
    (moved,) = lines({"kind": "embedding", "threshold": 0.6})
    assert moved.endswith("at threshold 0.74 only (this run's differs)")
    assert "false similar" not in moved
    assert lines({"kind": "embedding", "head": "cosine", "model": "/m"}) == []  # not shipped
    served = {"kind": "served", "endpoints": ["http://127.0.0.1:1"], "fallback": {}}
    (fallback,) = lines({**served, "fallback": {"kind": "embedding"}})
    assert fallback.startswith("darling judge's fallback (if the servers fail): embedding")
    assert judge_startup_lines(None) == []


def test_the_speed_part_times_another_encoder_beside_the_heads(monkeypatch, tmp_path):
    from darling_nemo.bench import calibrated_judge
    from darling_nemo.judges import embedding

    built = []

    class Timed:  # stands in for the real MiniLM: counts the texts a call would embed
        def __init__(self, cfg):
            built.append((cfg.head, cfg.model))
            self.texts_embedded, self.seen = 0, set()

        def __call__(self, pairs):
            new = {t for pair in pairs for t in pair} - self.seen
            self.seen |= new
            self.texts_embedded += len(new)
            return [0.5] * len(pairs)

    monkeypatch.setattr(embedding, "EmbeddingJudge", Timed)
    rows = calibrated_judge.speed_rows(20, str(tmp_path))
    assert built == [("cosine", None), ("calibrated", None), ("cosine", str(tmp_path))]
    assert len(rows) == 3 and rows[2].startswith(f"| cosine, {tmp_path} |")
    assert all("(8 texts embedded)" in row for row in rows)
