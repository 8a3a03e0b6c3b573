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

mode cross_encoder: a sequence classifier on `CLS a SEP b SEP`, built exactly as the judges
build it (`PairFormatter`, the tokenizer's own special tokens, as vLLM does), so the
checkpoint sees at inference the input it was trained on; loaded by the cross_encoder judge,
the classify_server and `vllm serve --task classify`. Its threshold is calibrated on the
held-out split (reported with a cross-fitted accuracy that never scores a pair with a
threshold calibrated on it).
mode bi_encoder: fine-tunes the embedding judge's sentence-transformers model with a
contrastive loss on cos(embed(a), embed(b)); the threshold is calibrated on the training
part only, so the held-out accuracy at it is an honest estimate. Loaded by the embedding
judge. Settings: `ClassifierTrainConfig` in darling_nemo/schema/classifier.py.
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script from a checkout

from darling_nemo.config import (  # noqa: E402
    config_parser,
    exits_on_config_error,
    load_validated,
)
from darling_nemo.judges.cross_encoder import sequence_logits  # noqa: E402
from darling_nemo.judges.pairdata import (  # noqa: E402
    accuracy,
    calibrate_threshold,
    cross_fitted_accuracy,
    load_pairs,
    split_pairs,
)
from darling_nemo.judges.templates import PairFormatter  # noqa: E402
from darling_nemo.resume import changed_settings, write_json  # noqa: E402
from darling_nemo.schema import (  # noqa: E402
    ClassifierTrainConfig,
    ConfigError,
    EmbeddingJudgeConfig,
)


def parse_config(argv: list[str] | None) -> ClassifierTrainConfig:
    args = config_parser(__doc__, config_required=False).parse_args(argv)
    return load_validated(args.config, args.overrides, ClassifierTrainConfig)[0]


def load_split(cfg: ClassifierTrainConfig) -> tuple[list, list, list]:
    """(all pairs, train, held-out); a missing or malformed file is a ConfigError naming
    the config key and the file, raised before anything is written."""
    try:
        pairs = load_pairs(in_repo(cfg.data), cfg.text_a, cfg.text_b, cfg.label, cfg.split_key)
    except ValueError as err:
        raise ConfigError(f"data: {err}") from None
    train, heldout = split_pairs(pairs, cfg.heldout_fraction, cfg.split_seed)
    return pairs, train, heldout


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
        logits = sequence_logits(model, pad(tokenizer, [ids[k] for k in rows], model.device))
        out[rows] = torch.softmax(logits.float(), dim=-1)[:, -1].cpu().numpy()
    return out


def save_atomically(save_model: Callable[[str], None], state: dict, target: Path) -> None:
    """Write a checkpoint to `target.tmp`, move the old one aside to `target.old`, swap the
    new one in, then delete the old: at every instant one complete checkpoint exists on
    disk, which `recover_checkpoint` puts back in place after a kill."""
    tmp = target.with_name(target.name + ".tmp")
    aside = target.with_name(target.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(str(tmp))
    torch.save(state, tmp / "training_state.pt")
    if target.exists():
        shutil.rmtree(aside, ignore_errors=True)
        target.rename(aside)
    tmp.rename(target)
    shutil.rmtree(aside, ignore_errors=True)


def recover_checkpoint(target: Path) -> None:
    """Finish a swap that a kill interrupted: with no `target` but a `target.old`, the old
    checkpoint goes back (the half-swapped `.tmp` is rewritten by the next save)."""
    aside = target.with_name(target.name + ".old")
    if aside.exists() and not (target / "training_state.pt").exists():
        shutil.rmtree(target, ignore_errors=True)
        aside.rename(target)
    shutil.rmtree(aside, ignore_errors=True)


# Keys a resumed run may change: they do not touch the weights of the steps already taken
# (max_steps extends or shortens a run; the learning-rate schedule follows the new length).
RESUMABLE_CHANGES = {
    "max_steps", "device", "num_threads", "eval_batch_size", "embedding_baseline",
    "output_dir", "checkpoint_every_steps", "resume",
}  # fmt: skip


def contrastive_loss(cos: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """Per pair: similar pairs pulled to cosine 1, different ones pushed below `margin`."""
    labels = labels.float()
    return labels * (1 - cos) ** 2 + (1 - labels) * torch.clamp(cos - margin, min=0) ** 2


@exits_on_config_error("train_classifier")
def main(argv: list[str] | None = None) -> int:
    # -- 1. config and data: both accepted before anything is written -----------------------
    cfg = parse_config(argv)
    pairs, train, heldout = load_split(cfg)
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from darling_nemo.judges.cross_encoder import resolve_device
    from darling_nemo.judges.embedding import EmbeddingJudge, shipped_minilm_path

    if cfg.num_threads:
        torch.set_num_threads(cfg.num_threads)
    out_dir = in_repo(cfg.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    last = out_dir / "checkpoint-last"
    recover_checkpoint(last)
    resuming = cfg.resume and (last / "training_state.pt").exists()
    state = {}
    if resuming:
        state = torch.load(last / "training_state.pt", weights_only=False, map_location="cpu")
        changed = changed_settings(state["config"], cfg.model_dump(mode="json"), RESUMABLE_CHANGES)
        if changed:
            raise ConfigError(
                f"{last} was trained with other settings:\n  "
                + "\n  ".join(changed)
                + "\nuse the same settings, another output_dir, or resume=false"
            )
    write_json(out_dir / "train_config.json", cfg.model_dump(mode="json"))

    # -- 2. the held-out split --------------------------------------------------------------
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
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)  # the new classification head
    if cfg.mode == "cross_encoder":
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
        model.to(device)
        formatter = PairFormatter(cfg.template, cfg.max_length, cfg.truncation, tokenizer)
        max_length = formatter.max_length
        inputs = f"{cfg.template} template, {cfg.truncation} truncation"

        def save_model(path: str) -> None:
            model.save_pretrained(path)
            tokenizer.save_pretrained(path)

    else:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(source, device=str(device))
        if cfg.max_length:
            model.max_seq_length = cfg.max_length
        max_length = model.max_seq_length
        inputs = "each text embedded alone"
        save_model = model.save
    print(
        f"model: {base} ({sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters) "
        f"as a {cfg.mode} on {device}, {inputs}, max {max_length} tokens"
    )

    # -- 4. training examples and the loss --------------------------------------------------
    if cfg.mode == "cross_encoder":
        oriented = [((p.a, p.b), p.label) for p in train]
        if cfg.both_orders:
            oriented += [((p.b, p.a), p.label) for p in train]
        train_ids = encode(tokenizer, formatter, [x for x, _ in oriented], max_length)
    else:  # cos(a, b) = cos(b, a): one order is both orders
        oriented = [((p.a, p.b), p.label) for p in train]
    train_labels = torch.tensor([y for _, y in oriented])
    counts = torch.bincount(train_labels, minlength=2).float()
    class_weight = (counts.sum() / (2 * counts)) if cfg.class_weighting else torch.ones(2)
    class_weight = class_weight.to(device)

    def batch_loss(rows: list[int]) -> torch.Tensor:
        labels = train_labels[rows].to(device)
        if cfg.mode == "cross_encoder":
            logits = sequence_logits(model, pad(tokenizer, [train_ids[k] for k in rows], device))
            return torch.nn.functional.cross_entropy(logits.float(), labels, weight=class_weight)
        texts = [t for k in rows for t in oriented[k][0]]  # a0 b0 a1 b1 ...
        features = {
            k: v.to(device) if torch.is_tensor(v) else v for k, v in model.tokenize(texts).items()
        }
        emb = model(features)["sentence_embedding"].float()
        cos = torch.nn.functional.cosine_similarity(emb[0::2], emb[1::2])
        weight = class_weight[labels]  # the weighted mean, as cross_entropy takes it
        loss = contrastive_loss(cos, labels, cfg.contrastive_margin)
        return (weight * loss).sum() / weight.sum()

    steps_per_epoch = math.ceil(len(oriented) / cfg.batch_size)
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
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["rng"])  # dropout continues as in an uninterrupted run
        step = state["step"]
        print(f"resumed from {last} at step {step}")

    # -- 6. train ---------------------------------------------------------------------------
    model.train()
    started = time.monotonic()
    bar = tqdm(total=total_steps, initial=step, desc="train", unit="step")
    running = []
    while step < total_steps:
        epoch, offset = divmod(step, steps_per_epoch)
        order = torch.randperm(
            len(oriented), generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        ).tolist()
        loss = batch_loss(order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size])
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
                "rng": torch.get_rng_state(),
                "step": step,
                "config": cfg.model_dump(mode="json"),
            }
            save_atomically(save_model, state, last)
            model.train()  # sentence-transformers' save leaves the model in eval mode
    bar.close()
    train_minutes = (time.monotonic() - started) / 60

    # -- 7. save the judge's model, evaluate it on the held-out split -----------------------
    save_model(str(out_dir))
    labels = [p.label for p in heldout]
    metrics = {
        "heldout_pairs": len(heldout),
        "heldout_similar_share": float(np.mean(labels)),
        "majority_accuracy": float(max(np.mean(labels), 1 - np.mean(labels))),
        "train_steps": step,
        "train_minutes_this_run": round(train_minutes, 2),
    }
    if cfg.mode == "cross_encoder":
        heldout_ids = encode(tokenizer, formatter, [(p.a, p.b) for p in heldout], max_length)
        probs = predict(model, tokenizer, heldout_ids, cfg.eval_batch_size, "held-out")
        threshold, calibrated_acc = calibrate_threshold(probs, labels)
        metrics["cross_encoder"] = {
            "accuracy_at_0.5": accuracy(probs, labels, 0.5),
            "calibrated_threshold": threshold,
            "accuracy_at_calibrated_threshold": calibrated_acc,
            "accuracy_cross_fitted": cross_fitted_accuracy(probs, labels, seed=cfg.split_seed),
        }
    else:  # the saved model through the embedding judge: what a run will compute
        tuned = EmbeddingJudge(
            EmbeddingJudgeConfig(
                model=str(out_dir), batch_size=cfg.eval_batch_size, device=cfg.device
            )
        )
        train_cos = tuned([(p.a, p.b) for p in tqdm(train, desc="embed train", leave=False)])
        cos = tuned([(p.a, p.b) for p in tqdm(heldout, desc="embed held-out", leave=False)])
        threshold, train_acc = calibrate_threshold(train_cos, [p.label for p in train])
        metrics["bi_encoder"] = {
            "threshold_calibrated_on_train": threshold,
            "accuracy_on_train": train_acc,
            "accuracy_at_train_threshold": accuracy(cos, labels, threshold),
            "accuracy_at_heldout_threshold": calibrate_threshold(cos, labels)[1],
            "accuracy_cross_fitted": cross_fitted_accuracy(cos, labels, seed=cfg.split_seed),
        }

    # -- 8. the embedding-cosine baseline on the same split ---------------------------------
    if cfg.embedding_baseline:
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

    # -- 9. the judge card ------------------------------------------------------------------
    if cfg.mode == "cross_encoder":
        judge_settings = {
            "kind": "cross_encoder",
            "model": str(out_dir),
            "template": cfg.template,
            "truncation": cfg.truncation,
            "max_length": max_length,
            "threshold": threshold,
        }
    else:
        judge_settings = {"kind": "embedding", "model": str(out_dir), "threshold": threshold}
    card = {"judge": judge_settings, "base_model": base, "metrics": metrics}
    (out_dir / "darling_classifier.json").write_text(json.dumps(card, indent=2))
    print(json.dumps(metrics, indent=2))
    flags = " ".join(
        f"--judge-set {k}={v:.4f}" if isinstance(v, float) else f"--judge-set {k}={v}"
        for k, v in judge_settings.items()
        if k not in ("kind", "max_length")
    )
    print(f"saved {out_dir}\njudge: --judge {judge_settings['kind']} {flags}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
