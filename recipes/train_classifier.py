"""Fine-tune a pair judge (P(similar)) on human-labelled pairs: a cross-encoder, or a bi-encoder.

    uv run recipes/train_classifier.py --config conf/classifier/minilm_noveltybench.yaml \
        output_dir=/tmp/darling-clf
    # then: darling-score groups.jsonl --judge cross_encoder \
    #     --judge-set model=/tmp/darling-clf --judge-set truncation=tokens \
    #     --judge-set threshold=<the calibrated threshold it prints>
    uv run recipes/train_classifier.py --config conf/classifier/minilm_biencoder_noveltybench.yaml \
        output_dir=/tmp/darling-emb
    # then: --judge embedding --judge-set model=/tmp/darling-emb --judge-set threshold=<printed>

Reads top to bottom: config -> data and held-out split -> model -> training (progress bar,
resumable checkpoints every `checkpoint_every_steps`) -> evaluation on the held-out split
-> the embedding-cosine baseline on the same split -> a checkpoint a judge loads, with
`darling_classifier.json` (the judge settings, calibrated threshold, metrics) and
`split.json` (held-out lines).

mode cross_encoder: a sequence classifier on `CLS a SEP b SEP`, built as the judges build it,
its threshold calibrated on the held-out split; mode bi_encoder: the embedding judge's model
tuned with a contrastive loss, its threshold calibrated on the training part. The steps live
in `darling_nemo/classifier_training/` (one builder per mode in `modes.py`); settings:
`ClassifierTrainConfig` in schema/classifier.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from a checkout
from darling_nemo.interrupt import quiet_start

quiet_start(__name__, "train_classifier")  # before the heavy imports below

import torch

from darling_nemo.classifier_training.checkpoint import (
    recover_checkpoint,
    restore,
    resume_state,
    save_atomically,
)
from darling_nemo.classifier_training.data import load_split, write_split
from darling_nemo.classifier_training.loop import StepPlan, make_optimizer, train
from darling_nemo.classifier_training.modes import build_mode
from darling_nemo.classifier_training.report import (
    embedding_baseline,
    split_metrics,
    write_card,
    write_scores,
)
from darling_nemo.config import (
    RESUMES,
    check_model_path,
    check_output_dir,
    exits_on_config_error,
    parse_config,
)
from darling_nemo.judges.cross_encoder import resolve_device
from darling_nemo.judges.embedding import shipped_minilm_path
from darling_nemo.resume import write_json
from darling_nemo.run_folder import acquire
from darling_nemo.schema import ClassifierTrainConfig


def in_repo(path: str) -> Path:
    """Relative paths are read from the repository root, wherever the recipe runs from."""
    p = Path(path)
    return p if p.is_absolute() else REPO / p


@exits_on_config_error("train_classifier", on_interrupt=RESUMES)
def main(argv: list[str] | None = None) -> int:
    # 1. Config and data: both accepted before anything is written.
    cfg = parse_config(__doc__, argv, ClassifierTrainConfig, config_required=False)
    check_output_dir(in_repo(cfg.output_dir))
    check_model_path(cfg.base_model, "base_model")
    pairs, train_pairs, heldout = load_split(cfg, in_repo(cfg.data))
    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)

    # 2. Output folder: finish a checkpoint swap a kill interrupted; refuse changed settings.
    out_dir = in_repo(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    acquire(out_dir)  # one run per folder, until the command ends (exits_on_config_error)
    last = out_dir / "checkpoint-last"
    recover_checkpoint(last)
    state = resume_state(last, cfg)  # None: a fresh run
    write_json(out_dir / "train_config.json", cfg.model_dump(mode="json"))

    # 3. The held-out split.
    write_split(out_dir, cfg, pairs, train_pairs, heldout)

    # 4. Model and training examples, built by the mode.
    base = cfg.base_model or shipped_minilm_path()
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)  # the new classification head
    mode = build_mode(cfg, base if state is None else str(last), device, train_pairs)
    print(
        f"model: {base} ({sum(p.numel() for p in mode.model.parameters()) / 1e6:.1f}M "
        f"parameters) as a {cfg.mode} on {device}, {mode.inputs}, max {mode.max_length} tokens"
    )

    # 5. Optimiser, schedule, resume.
    plan = StepPlan.of(mode.examples, cfg)
    optimizer, schedule = make_optimizer(mode.model, cfg, plan.total_steps)
    step = 0
    if state is not None:
        step = restore(optimizer, schedule, state)
        print(f"resuming from {last.name} (step {step} of {plan.total_steps})", flush=True)

    # 6. Train, checkpointing into checkpoint-last.
    step, minutes = train(
        mode, cfg, optimizer, schedule, plan, step,
        checkpoint=lambda new_state: save_atomically(mode.save, new_state, last),
    )  # fmt: skip

    # 7. Save the judge's model, evaluate it on the held-out split.
    mode.save(str(out_dir))
    metrics = split_metrics(heldout, step, minutes)
    threshold, metrics[cfg.mode] = mode.evaluate(out_dir, train_pairs, heldout)
    write_scores(out_dir, mode.scores)

    # 8. The embedding-cosine baseline on the same split.
    if cfg.embedding_baseline:
        metrics["embedding_cosine"] = embedding_baseline(cfg, train_pairs, heldout)

    # 9. The judge card, and the flags that load it.
    write_card(out_dir, mode.judge_settings(out_dir, threshold), base, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
