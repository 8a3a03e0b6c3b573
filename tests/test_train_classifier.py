"""recipes/train_classifier.py end to end at tiny scale: a tiny checkpoint trained for a few
steps on synthetic pairs, resumed, evaluated on its held-out split, saved, and loaded back by
the cross-encoder judge; plus the shipped YAML validating."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from darling_nemo.config import load_config
from darling_nemo.judges import make_judge
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import ClassifierTrainConfig, validate_darling

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "train_classifier.py"


def run_recipe(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(RECIPE), "--config", str(REPO / "conf/classifier/minilm_noveltybench.yaml"), *overrides],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def pair_file(tmp_path_factory):
    """40 pairs over 20 prompts: similar = the same words reordered, different = new words."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "pairs.jsonl"
    rows = []
    for k in range(40):
        words = rng.sample(WORDS, 12)
        similar = k % 3 == 0
        other = rng.sample(words, 12) if similar else rng.sample(WORDS, 12)
        row = {"q": f"prompt {k // 2}", "x": " ".join(words), "y": " ".join(other), "same": similar}
        rows.append(json.dumps(row))
    path.write_text("\n".join(rows) + "\n")
    return path


def test_shipped_config_validates():
    cfg = ClassifierTrainConfig.model_validate(
        load_config(REPO / "conf/classifier/minilm_noveltybench.yaml")
    )
    assert cfg.truncation == "tokens" and cfg.both_orders and cfg.class_weighting
    assert (REPO / cfg.data).exists() or not (REPO.parent / "shared").exists()


def test_bad_override_is_a_clear_error():
    result = run_recipe("epochz=3")
    assert result.returncode != 0
    assert "unknown key 'epochz'" in result.stderr


def test_recipe_trains_resumes_and_saves_a_loadable_classifier(tmp_path, pair_file):
    base = save_tiny_classifier(tmp_path / "base", "bert")
    out = tmp_path / "clf"
    common = [
        f"data={pair_file}", "text_a=x", "text_b=y", "label=same", "split_key=q",
        "heldout_fraction=0.25", f"base_model={base}", f"output_dir={out}",
        "batch_size=4", "checkpoint_every_steps=2", "embedding_baseline=false",
    ]  # fmt: skip
    first = run_recipe(*common, "max_steps=2")
    assert first.returncode == 0, first.stderr[-3000:]
    # 40 pairs, 20 prompts: whole prompts go to held-out until >= 10 pairs
    assert "train 30 / held-out 10" in first.stdout
    state = torch.load(out / "checkpoint-last" / "training_state.pt", weights_only=False)
    assert state["step"] == 2

    second = run_recipe(*common, "max_steps=4")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"resumed from {out / 'checkpoint-last'} at step 2" in second.stdout
    card = json.loads((out / "darling_classifier.json").read_text())
    metrics = card["metrics"]
    assert metrics["train_steps"] == 4 and metrics["heldout_pairs"] == 10
    for key in ("accuracy_at_0.5", "accuracy_at_calibrated_threshold", "accuracy_cross_fitted"):
        assert 0 <= metrics["cross_encoder"][key] <= 1
    assert (
        metrics["cross_encoder"]["accuracy_at_calibrated_threshold"] >= metrics["majority_accuracy"]
    )  # calibration can always predict the majority class

    # held-out lines are whole prompts the training never saw
    heldout = set(json.loads((out / "split.json").read_text())["heldout_lines"])
    lines = pair_file.read_text().splitlines()
    prompts = {json.loads(lines[k - 1])["q"] for k in heldout}
    train_prompts = {json.loads(line)["q"] for k, line in enumerate(lines, 1) if k not in heldout}
    assert len(heldout) == 10 and not prompts & train_prompts

    # the saved checkpoint loads through the judge's loading code, as the card says
    judge = make_judge(validate_darling({"judge": card["judge"]}).judge)
    probs = judge([("the cat sat", "a dog ran"), ("one two three", "three two one")])
    assert all(0 <= p <= 1 for p in probs)
    assert judge.classifier.id2label == {0: "different", 1: "similar"}
