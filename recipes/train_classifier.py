"""Fine-tune a cross-encoder pair classifier (P(similar)) on human-labelled pairs.

    uv run recipes/train_classifier.py --config conf/classifier/minilm_noveltybench.yaml \
        output_dir=/tmp/darling-clf
    # then: darling-score groups.jsonl --judge cross_encoder \
    #     --judge-set model=/tmp/darling-clf --judge-set truncation=tokens \
    #     --judge-set threshold=<the calibrated threshold it prints>

Reads top to bottom: config -> data and held-out split -> model -> training (progress bar,
resumable checkpoints every `checkpoint_every_steps`) -> evaluation on the held-out split
(accuracy at 0.5, the threshold calibrated on that split, and a cross-fitted accuracy that
never scores a pair with a threshold calibrated on it) -> the embedding-cosine baseline on
the same split -> a Hugging Face checkpoint that the cross_encoder judge, the
classify_server and `vllm serve --task classify` load, with `darling_classifier.json`
(template, truncation, calibrated threshold, metrics) and `split.json` (held-out lines).

Inputs are built exactly as the judges build them (`PairFormatter`: `CLS a SEP b SEP`,
tokenized with the tokenizer's own special tokens, as vLLM does), so the checkpoint sees at
inference the input it was trained on. Settings: `ClassifierTrainConfig` in schema.py.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import torch
from pydantic import ValidationError
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from a checkout

from darling_nemo.config import apply_overrides, load_config  # noqa: E402
from darling_nemo.judges.pairdata import (  # noqa: E402
    accuracy,
    calibrate_threshold,
    cross_fitted_accuracy,
    load_pairs,
    split_pairs,
)
from darling_nemo.judges.templates import PairFormatter  # noqa: E402
from darling_nemo.schema import (  # noqa: E402
    ClassifierTrainConfig,
    ConfigError,
    EmbeddingJudgeConfig,
    format_validation_error,
)


def parse_config(argv: list[str] | None) -> ClassifierTrainConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", help="YAML of ClassifierTrainConfig keys")
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    raw = ClassifierTrainConfig().model_dump(mode="json")
    if args.config:
        raw |= load_config(args.config)
    raw = apply_overrides(raw, args.overrides)
    try:
        return ClassifierTrainConfig.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(format_validation_error(err)) from None


def in_repo(path: str) -> Path:
    """Relative paths are read from the repository root, wherever the recipe runs from."""
    p = Path(path)
    return p if p.is_absolute() else REPO / p


def encode(tokenizer, formatter: PairFormatter, pairs, max_length: int) -> list[list[int]]:
    texts = [formatter.text(a, b) for a, b in pairs]
    return tokenizer(texts, add_special_tokens=True, truncation=True, max_length=max_length)[
        "input_ids"
    ]


def pad(tokenizer, ids: list[list[int]], device: torch.device) -> dict[str, torch.Tensor]:
    batch = tokenizer.pad({"input_ids": ids}, return_tensors="pt")
    return {k: v.to(device) for k, v in batch.items()}


@torch.inference_mode()
def predict(model, tokenizer, ids: list[list[int]], batch_size: int, desc: str) -> np.ndarray:
    """P(similar) (the last label) per input, in batches padded to their longest input."""
    model.eval()
    out = np.zeros(len(ids))
    order = sorted(range(len(ids)), key=lambda k: len(ids[k]))
    for start in tqdm(range(0, len(order), batch_size), desc=desc, leave=False):
        rows = order[start : start + batch_size]
        logits = model(**pad(tokenizer, [ids[k] for k in rows], model.device)).logits
        out[rows] = torch.softmax(logits.float(), dim=-1)[:, -1].cpu().numpy()
    return out


def save_atomically(model, tokenizer, state: dict, target: Path) -> None:
    """Write a checkpoint next to `target`, then swap it in (a kill never leaves half)."""
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    torch.save(state, tmp / "training_state.pt")
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)


def main(argv: list[str] | None = None) -> int:
    # -- 1. config --------------------------------------------------------------------------
    try:
        cfg = parse_config(argv)
    except ConfigError as err:
        print(f"train_classifier: {err}", file=sys.stderr)
        return 2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from darling_nemo.judges.cross_encoder import resolve_device
    from darling_nemo.judges.embedding import shipped_minilm_path

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out_dir = in_repo(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    last = out_dir / "checkpoint-last"
    resuming = cfg.resume and (last / "training_state.pt").exists()
    (out_dir / "train_config.json").write_text(cfg.model_dump_json(indent=2))

    # -- 2. data and the held-out split -----------------------------------------------------
    pairs = load_pairs(in_repo(cfg.data), cfg.text_a, cfg.text_b, cfg.label, cfg.split_key)
    train, heldout = split_pairs(pairs, cfg.heldout_fraction, cfg.split_seed)
    (out_dir / "split.json").write_text(
        json.dumps({"data": cfg.data, "heldout_lines": [p.line for p in heldout]})
    )
    print(
        f"data: {len(pairs)} pairs -> train {len(train)} / held-out {len(heldout)} "
        f"(split by {cfg.split_key!r}, seed {cfg.split_seed}); similar share "
        f"{np.mean([p.label for p in train]):.3f} / {np.mean([p.label for p in heldout]):.3f}"
    )

    # -- 3. model ---------------------------------------------------------------------------
    base = cfg.base_model or shipped_minilm_path()
    source = str(last) if resuming else base
    torch.manual_seed(cfg.seed)  # the new classification head
    tokenizer = AutoTokenizer.from_pretrained(source)
    model = AutoModelForSequenceClassification.from_pretrained(
        source,
        num_labels=2,
        id2label={0: "different", 1: "similar"},
        label2id={"different": 0, "similar": 1},
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    device = resolve_device(cfg.device)
    model.to(device)
    formatter = PairFormatter(cfg.template, cfg.max_length, cfg.truncation, tokenizer)
    max_length = formatter.max_length
    print(
        f"model: {base} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters) "
        f"on {device}, {cfg.template} template, {cfg.truncation} truncation, "
        f"max {max_length} tokens"
    )

    # -- 4. training examples ---------------------------------------------------------------
    oriented = [((p.a, p.b), p.label) for p in train]
    if cfg.both_orders:
        oriented += [((p.b, p.a), p.label) for p in train]
    train_ids = encode(tokenizer, formatter, [x for x, _ in oriented], max_length)
    train_labels = torch.tensor([y for _, y in oriented])
    counts = torch.bincount(train_labels, minlength=2).float()
    class_weight = (counts.sum() / (2 * counts)) if cfg.class_weighting else torch.ones(2)
    loss_fn = torch.nn.CrossEntropyLoss(weight=class_weight.to(device))
    steps_per_epoch = math.ceil(len(train_ids) / cfg.batch_size)
    total_steps = cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch)
    warmup = int(cfg.warmup_fraction * total_steps)

    # -- 5. optimiser, schedule, resume -----------------------------------------------------
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0},
        ],
        lr=cfg.lr,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / max(warmup, 1)
            if s < warmup
            else max(0.0, (total_steps - s) / max(total_steps - warmup, 1))
        ),
    )
    step = 0
    if resuming:
        state = torch.load(last / "training_state.pt", weights_only=False, map_location=device)
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        step = state["step"]
        torch.manual_seed(cfg.seed + step)  # dropout: a resumed run differs only in dropout
        print(f"resumed from {last} at step {step}")

    # -- 6. train ---------------------------------------------------------------------------
    model.train()
    started = time.monotonic()
    bar = tqdm(total=total_steps, initial=step, desc="train", unit="step")
    running = []
    while step < total_steps:
        epoch, offset = divmod(step, steps_per_epoch)
        order = torch.randperm(
            len(train_ids), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        ).tolist()
        rows = order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size]
        logits = model(**pad(tokenizer, [train_ids[k] for k in rows], device)).logits
        loss = loss_fn(logits.float(), train_labels[rows].to(device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        running = [*running[-19:], loss.item()]
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(running):.3f}", epoch=f"{step / steps_per_epoch:.2f}")
        if step % cfg.checkpoint_every_steps == 0 or step == total_steps:
            state = {
                "optimizer": optimizer.state_dict(),
                "schedule": schedule.state_dict(),
                "step": step,
            }
            save_atomically(model, tokenizer, state, last)
    bar.close()
    train_minutes = (time.monotonic() - started) / 60

    # -- 7. evaluate on the held-out split --------------------------------------------------
    labels = [p.label for p in heldout]
    heldout_ids = encode(tokenizer, formatter, [(p.a, p.b) for p in heldout], max_length)
    probs = predict(model, tokenizer, heldout_ids, cfg.eval_batch_size, "held-out")
    threshold, calibrated_acc = calibrate_threshold(probs, labels)
    metrics = {
        "heldout_pairs": len(heldout),
        "heldout_similar_share": float(np.mean(labels)),
        "majority_accuracy": float(max(np.mean(labels), 1 - np.mean(labels))),
        "cross_encoder": {
            "accuracy_at_0.5": accuracy(probs, labels, 0.5),
            "calibrated_threshold": threshold,
            "accuracy_at_calibrated_threshold": calibrated_acc,
            "accuracy_cross_fitted": cross_fitted_accuracy(probs, labels, seed=cfg.split_seed),
        },
        "train_steps": step,
        "train_minutes_this_run": round(train_minutes, 2),
    }

    # -- 8. the embedding-cosine baseline on the same split ---------------------------------
    if cfg.embedding_baseline:
        from darling_nemo.judges.embedding import EmbeddingJudge

        judge = EmbeddingJudge(EmbeddingJudgeConfig(device=cfg.device))
        train_cos = judge([(p.a, p.b) for p in train])
        cos = judge([(p.a, p.b) for p in heldout])
        train_threshold, _ = calibrate_threshold(train_cos, [p.label for p in train])
        held_threshold, held_acc = calibrate_threshold(cos, labels)
        metrics["embedding_cosine"] = {
            "threshold_calibrated_on_train": train_threshold,
            "accuracy_at_train_threshold": accuracy(cos, labels, train_threshold),
            "threshold_calibrated_on_heldout": held_threshold,
            "accuracy_at_heldout_threshold": held_acc,
            "accuracy_cross_fitted": cross_fitted_accuracy(cos, labels, seed=cfg.split_seed),
        }

    # -- 9. save the classifier -------------------------------------------------------------
    model.save_pretrained(str(out_dir))
    tokenizer.save_pretrained(str(out_dir))
    card = {
        "judge": {
            "kind": "cross_encoder",
            "model": str(out_dir),
            "template": cfg.template,
            "truncation": cfg.truncation,
            "max_length": max_length,
            "threshold": threshold,
        },
        "base_model": base,
        "metrics": metrics,
    }
    (out_dir / "darling_classifier.json").write_text(json.dumps(card, indent=2))
    print(json.dumps(metrics, indent=2))
    print(
        f"saved {out_dir}\njudge: --judge cross_encoder --judge-set model={out_dir} "
        f"--judge-set template={cfg.template} --judge-set truncation={cfg.truncation} "
        f"--judge-set threshold={threshold:.4f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
