"""recipes/train_classifier.py end to end at tiny scale: a tiny checkpoint trained for a few
steps on synthetic pairs, resumed, evaluated on its held-out split, saved, and loaded back by
the cross-encoder judge (or, in bi_encoder mode, by the embedding judge); the checkpoint swap
surviving a kill; a resumed run equal to an uninterrupted one; the shipped YAMLs validating."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
from pathlib import Path

import helpers
import numpy as np
import pytest
import torch
from helpers import REPO
from safetensors.torch import load_file

from darling_nemo.classifier_training.modes import contrastive_loss
from darling_nemo.config import load_config
from darling_nemo.judges import make_judge
from darling_nemo.judges.pairdata import accuracy, calibrate_threshold, load_pairs
from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.schema import ClassifierTrainConfig, validate_darling

RECIPE = REPO / "recipes" / "train_classifier.py"


def load_recipe():
    spec = importlib.util.spec_from_file_location("train_classifier", RECIPE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_recipe(*overrides: str) -> subprocess.CompletedProcess:
    config = str(REPO / "conf/classifier/minilm_noveltybench.yaml")
    return helpers.run_recipe("train_classifier.py", "--config", config, *overrides, check=False)


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


def test_shipped_configs_validate():
    cfg = ClassifierTrainConfig.model_validate(
        load_config(REPO / "conf/classifier/minilm_noveltybench.yaml")
    )
    assert cfg.mode == "cross_encoder" and cfg.truncation == "tokens" and cfg.both_orders
    assert (REPO / cfg.data).is_file()
    cfg = ClassifierTrainConfig.model_validate(
        load_config(REPO / "conf/classifier/minilm_biencoder_noveltybench.yaml")
    )
    assert cfg.mode == "bi_encoder" and cfg.base_model is None and cfg.max_length is None


def test_contrastive_loss_by_hand():
    loss = contrastive_loss
    cos = torch.tensor([1.0, 0.5, 0.8, 0.3])
    labels = torch.tensor([1, 1, 0, 0])
    # similar: (1 - 1)^2 = 0, (1 - 0.5)^2 = 0.25; different, margin 0.5:
    # max(0, 0.8 - 0.5)^2 = 0.09, max(0, 0.3 - 0.5)^2 = 0
    assert torch.allclose(loss(cos, labels, 0.5), torch.tensor([0.0, 0.25, 0.09, 0.0]))


def test_checkpoint_swap_survives_a_kill_between_delete_and_rename(tmp_path, monkeypatch):
    """A kill while the new checkpoint is renamed into place must leave a resumable one: the
    old code deleted checkpoint-last first, so the run restarted from step 0."""
    recipe = load_recipe()
    last = tmp_path / "checkpoint-last"

    def save_model(path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "weights.txt").write_text(str(len(list(tmp_path.iterdir()))))

    recipe.save_atomically(save_model, {"step": 1}, last)
    real_rename = Path.rename

    def killed_at_swap_in(self, target):
        if self.name.endswith(".tmp"):
            raise KeyboardInterrupt("killed")  # the process dies here, before the rename
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", killed_at_swap_in)
    with pytest.raises(KeyboardInterrupt):
        recipe.save_atomically(save_model, {"step": 2}, last)
    monkeypatch.undo()
    recipe.recover_checkpoint(last)  # what the next run does first
    assert torch.load(last / "training_state.pt", weights_only=False)["step"] == 1
    assert not (tmp_path / "checkpoint-last.old").exists()
    # an uninterrupted swap replaces it and leaves no aside copy behind
    recipe.save_atomically(save_model, {"step": 2}, last)
    assert torch.load(last / "training_state.pt", weights_only=False)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint-last"]


def test_a_damaged_classifier_checkpoint_is_moved_aside_and_training_starts_over(tmp_path, capsys):
    """checkpoint-last records its files (manifest.json, written last); one whose weights
    differ from it is said in one line, moved aside, never loaded."""
    recipe = load_recipe()
    cfg = ClassifierTrainConfig.model_validate(
        load_config(REPO / "conf/classifier/minilm_noveltybench.yaml")
    )
    last = tmp_path / "checkpoint-last"

    def save_model(path: str) -> None:
        Path(path).mkdir(parents=True)
        (Path(path) / "weights.txt").write_text("12345")

    recipe.save_atomically(save_model, training_state_of(cfg), last)
    assert recipe.resume_state(last, cfg)["step"] == 1  # intact: trusted
    (last / "weights.txt").write_text("123")
    assert recipe.resume_state(last, cfg) is None
    (aside,) = tmp_path.glob("damaged-checkpoint-last-*")
    assert capsys.readouterr().out == (
        f"checkpoint-last is damaged (weights.txt: 3 bytes, manifest says 5); moved aside to "
        f"{aside.name}; no intact checkpoint is left: training starts from step 0\n"
    )
    assert not last.exists() and (aside / "training_state.pt").is_file()


def training_state_of(cfg: ClassifierTrainConfig) -> dict:
    """A real optimiser's and schedule's state after one step, as a run saves it."""
    from darling_nemo.classifier_training.checkpoint import training_state

    weight = torch.nn.Parameter(torch.zeros(2))
    optimizer = torch.optim.AdamW([weight])
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return training_state(optimizer, schedule, 1, cfg)


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
    assert "resuming from checkpoint-last (step 2 of 4)" in second.stdout
    # a training setting changed under a checkpoint is refused, naming the key
    changed = run_recipe(*common, "max_steps=4", "lr=0.001")
    assert changed.returncode == 2 and "lr: 0.0001 -> 0.001" in changed.stderr
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
    # scores.jsonl: the saved model's score of every held-out pair, by line
    scored = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines()]
    assert {row["line"] for row in scored if row["part"] == "heldout"} == heldout
    assert len(scored) == 10 and all(0 <= row["score"] <= 1 for row in scored)

    # the saved checkpoint loads through the judge's loading code, as the card says
    judge = make_judge(validate_darling({"judge": card["judge"]}).judge)
    probs = judge([("the cat sat", "a dog ran"), ("one two three", "three two one")])
    assert all(0 <= p <= 1 for p in probs)
    assert judge.classifier.id2label == {0: "different", 1: "similar"}


def test_a_full_disk_is_one_line_exit_2_and_leaves_no_half_checkpoint(tmp_path, pair_file, capsys):
    # A real full disk: output_dir on a 64 KiB tmpfs; the tiny classifier's checkpoint
    # (weights, optimizer state) does not fit.
    base = save_tiny_classifier(tmp_path / "base", "bert")
    out = tmp_path / "small-disk"
    why_not = helpers.mount_tmpfs(out, "64k")
    if why_not:
        pytest.skip(f"cannot mount a tmpfs here: {why_not}")
    try:
        capsys.readouterr()
        code = load_recipe().main([*tiny_args(pair_file, base, out), "checkpoint_every_steps=2"])
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("train_classifier:")]
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert f"disk full: checkpoint-last at step 2 did not fit in {out}" in lines[0]
        assert "no complete one was saved yet" in lines[0]
        assert "run the same command again to resume" in lines[0]
        assert not (out / "checkpoint-last.tmp").exists()
    finally:
        helpers.unmount(out)


def tiny_args(pair_file: Path, base: Path, out: Path) -> list[str]:
    return [
        "--config", str(REPO / "conf/classifier/minilm_noveltybench.yaml"),
        f"data={pair_file}", "text_a=x", "text_b=y", "label=same", "split_key=q",
        "heldout_fraction=0.25", f"base_model={base}", f"output_dir={out}",
        "batch_size=4", "embedding_baseline=false", "max_steps=4", "num_threads=1",
    ]  # fmt: skip


@pytest.mark.parametrize("mode", ["cross_encoder", "bi_encoder"])
def test_resumed_run_equals_an_uninterrupted_one(tmp_path, pair_file, monkeypatch, mode):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    recipe = load_recipe()
    base = save_tiny_classifier(tmp_path / "base", "bert")
    args = [f"mode={mode}", "checkpoint_every_steps=2"]
    assert recipe.main(tiny_args(pair_file, base, tmp_path / "whole") + args) == 0

    real_save = recipe.save_atomically

    def killed_after_step_2(save_model, state, target):
        real_save(save_model, state, target)
        if state["step"] == 2:
            raise KeyboardInterrupt("killed")

    monkeypatch.setattr(recipe, "save_atomically", killed_after_step_2)
    # Ctrl-C ends the command with exit code 130 and one line (config.report_interrupt).
    assert recipe.main(tiny_args(pair_file, base, tmp_path / "resumed") + args) == 130
    monkeypatch.setattr(recipe, "save_atomically", real_save)
    assert recipe.main(tiny_args(pair_file, base, tmp_path / "resumed") + args) == 0

    # both sides: every tensor of the saved weights, bit for bit (CPU, one thread)
    whole = load_file(tmp_path / "whole" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "model.safetensors")
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    card = json.loads((tmp_path / "resumed" / "darling_classifier.json").read_text())
    assert card["metrics"]["train_steps"] == 4


def test_bi_encoder_mode_saves_an_embedding_judge_calibrated_on_train(tmp_path, pair_file):
    base = save_tiny_classifier(tmp_path / "base", "bert")
    out = tmp_path / "emb"
    result = run_recipe(*tiny_args(pair_file, base, out)[2:], "mode=bi_encoder")
    assert result.returncode == 0, result.stderr[-3000:]
    card = json.loads((out / "darling_classifier.json").read_text())
    assert card["judge"]["kind"] == "embedding" and card["judge"]["model"] == str(out)
    metrics = card["metrics"]["bi_encoder"]

    # the card's judge, loaded the way a run loads it, reproduces the recorded threshold
    # from the 30 training pairs alone, and the held-out accuracy at it
    judge = make_judge(validate_darling({"judge": card["judge"]}).judge)
    heldout_lines = set(json.loads((out / "split.json").read_text())["heldout_lines"])
    pairs = load_pairs(pair_file, "x", "y", "same", "q")
    train = [p for p in pairs if p.line not in heldout_lines]
    heldout = [p for p in pairs if p.line in heldout_lines]
    assert (len(train), len(heldout)) == (30, 10)
    train_cos = judge([(p.a, p.b) for p in train])
    threshold, train_acc = calibrate_threshold(train_cos, [p.label for p in train])
    assert threshold == pytest.approx(card["judge"]["threshold"], abs=1e-6)
    assert train_acc == pytest.approx(metrics["accuracy_on_train"])
    held_cos = judge([(p.a, p.b) for p in heldout])
    held_acc = accuracy(held_cos, [p.label for p in heldout], threshold)
    assert held_acc == pytest.approx(metrics["accuracy_at_train_threshold"])
    # fine-tuning moved the embeddings: the tuned cosines differ from the base model's
    base_judge = make_judge(
        validate_darling(
            {"judge": {"kind": "embedding", "model": str(base), "head": "cosine"}}
        ).judge
    )
    assert not np.allclose(base_judge([(p.a, p.b) for p in heldout]), held_cos)


def test_missing_or_bad_data_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys):
    recipe = load_recipe()
    out = tmp_path / "out"
    missing = tmp_path / "none.jsonl"
    assert recipe.main([f"data={missing}", f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err == f"train_classifier: data: pair data not found: {missing}\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"generation_0": "a", "generation_1": "b"}\n')
    assert recipe.main([f"data={bad}", f"output_dir={out}"]) == 2
    assert (
        f"data: malformed pair data:\n  {bad}:1: missing field(s) similar"
        in capsys.readouterr().err
    )
    assert recipe.main(["--config", str(tmp_path / "no.yaml"), f"output_dir={out}"]) == 2
    assert "config file not found" in capsys.readouterr().err
    assert not out.exists()  # nothing written before the config and the data are accepted
