"""One builder per training mode: the model, the loss of a batch of training examples, the
evaluation of the saved judge on the held-out split, and the judge settings it is saved with.

mode cross_encoder: a sequence classifier on `CLS a SEP b SEP`, built exactly as the judges
build it (`PairFormatter`, the tokenizer's own special tokens, as vLLM does), so the
checkpoint sees at inference the input it was trained on; loaded by the cross_encoder judge,
the classify_server and `vllm serve --task classify`. Its threshold is calibrated on the
held-out split (reported with a cross-fitted accuracy that never scores a pair with a
threshold calibrated on it).
mode bi_encoder: fine-tunes the embedding judge's sentence-transformers model with a
contrastive loss on cos(embed(a), embed(b)); the threshold is calibrated on the training
part only, so the held-out accuracy at it is an honest estimate. Loaded by the embedding
judge.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from darling_nemo.judges.cross_encoder import sequence_logits
from darling_nemo.judges.pairdata import (
    LabelledPair,
    accuracy,
    calibrate_threshold,
    cross_fitted_accuracy,
)
from darling_nemo.judges.registry import kind_of
from darling_nemo.judges.templates import PairFormatter
from darling_nemo.schema import ClassifierTrainConfig, CrossEncoderJudgeConfig, EmbeddingJudgeConfig

# A training example: the two texts in the order the model reads them, and the 0/1 label.
Example = tuple[tuple[str, str], int]


def contrastive_loss(cos: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """Per pair: similar pairs pulled to cosine 1, different ones pushed below `margin`."""
    labels = labels.float()
    return labels * (1 - cos) ** 2 + (1 - labels) * torch.clamp(cos - margin, min=0) ** 2


class PairTraining(ABC):
    """What the recipe needs of a mode. A subclass's `load` builds `model` (seeded by the
    caller), sets `max_length` and `inputs`, and returns its training examples."""

    model: torch.nn.Module
    max_length: int  # tokens a model input is cut to
    inputs: str  # how a pair reaches the model, for the log
    # what `evaluate` scored, by part ("heldout", and "train" where it scores it): the pairs
    # and their scores, written to scores.jsonl so folds' runs can be compared pair by pair
    scores: dict[str, tuple[list[LabelledPair], np.ndarray]]

    def __init__(
        self,
        cfg: ClassifierTrainConfig,
        source: str,
        device: torch.device,
        train: list[LabelledPair],
    ):
        self.cfg = cfg
        self.device = device
        self.oriented = examples = self.load(source, train)
        self.labels = torch.tensor([y for _, y in examples])
        counts = torch.bincount(self.labels, minlength=2).float()
        weight = (counts.sum() / (2 * counts)) if cfg.class_weighting else torch.ones(2)
        self.class_weight = weight.to(device)  # inverse class frequency, or 1 for both

    @property
    def examples(self) -> int:
        return len(self.oriented)

    @abstractmethod
    def load(self, source: str, train: list[LabelledPair]) -> list[Example]:
        """Build the model from `source` onto `self.device`; the training examples."""

    @abstractmethod
    def save(self, path: str) -> None:
        """The model as its judge loads it (plus the tokenizer where it has one)."""

    @abstractmethod
    def batch_loss(self, rows: list[int]) -> torch.Tensor:
        """The class-weighted mean loss of training examples `rows`."""

    @abstractmethod
    def evaluate(
        self, out_dir: Path, train: list[LabelledPair], heldout: list[LabelledPair]
    ) -> tuple[float, dict[str, float]]:
        """(the judge's threshold, this mode's metrics) of the model saved in `out_dir`."""

    @abstractmethod
    def judge_settings(self, out_dir: Path, threshold: float) -> dict[str, Any]:
        """The `judge:` settings that load the saved model as a run would."""


class CrossEncoderTraining(PairTraining):
    """mode cross_encoder (module docstring); trains on both orders when `both_orders`."""

    def load(self, source: str, train: list[LabelledPair]) -> list[Example]:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        cfg = self.cfg

        self.tokenizer = AutoTokenizer.from_pretrained(source)
        self.model = AutoModelForSequenceClassification.from_pretrained(
            source,
            num_labels=2,
            id2label={0: "different", 1: "similar"},
            label2id={"different": 0, "similar": 1},
        )
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if self.model.config.pad_token_id is None:
            self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.model.to(self.device)
        self.formatter = PairFormatter(cfg.template, cfg.max_length, cfg.truncation, self.tokenizer)
        self.max_length = self.formatter.max_length
        self.inputs = f"{cfg.template} template, {cfg.truncation} truncation"
        oriented = [((p.a, p.b), p.label) for p in train]
        if cfg.both_orders:
            oriented += [((p.b, p.a), p.label) for p in train]
        self.train_ids = self.encode([x for x, _ in oriented])
        return oriented

    def encode(self, pairs: list[tuple[str, str]]) -> list[list[int]]:
        texts = [self.formatter.text(a, b) for a, b in pairs]
        return self.tokenizer(
            texts, add_special_tokens=True, truncation=True, max_length=self.max_length
        )["input_ids"]

    def pad(self, ids: list[list[int]]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer.pad({"input_ids": ids}, return_tensors="pt")
        return {k: v.to(self.device) for k, v in batch.items()}

    @torch.inference_mode()
    def predict(self, ids: list[list[int]], desc: str) -> np.ndarray:
        """P(similar) (the last label) per input, in batches padded to their longest input."""
        self.model.eval()
        out = np.zeros(len(ids))
        order = sorted(range(len(ids)), key=lambda k: len(ids[k]))
        batch_size = self.cfg.eval_batch_size
        for start in tqdm(range(0, len(order), batch_size), desc=desc, leave=False):
            rows = order[start : start + batch_size]
            logits = sequence_logits(self.model, self.pad([ids[k] for k in rows]))
            out[rows] = torch.softmax(logits.float(), dim=-1)[:, -1].cpu().numpy()
        return out

    def save(self, path: str) -> None:
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)

    def batch_loss(self, rows: list[int]) -> torch.Tensor:
        labels = self.labels[rows].to(self.device)
        logits = sequence_logits(self.model, self.pad([self.train_ids[k] for k in rows]))
        return torch.nn.functional.cross_entropy(logits.float(), labels, weight=self.class_weight)

    def evaluate(
        self, out_dir: Path, train: list[LabelledPair], heldout: list[LabelledPair]
    ) -> tuple[float, dict[str, float]]:
        labels = [p.label for p in heldout]
        probs = self.predict(self.encode([(p.a, p.b) for p in heldout]), "held-out")
        self.scores = {"heldout": (heldout, probs)}
        threshold, calibrated_acc = calibrate_threshold(probs, labels)
        return threshold, {
            "accuracy_at_0.5": accuracy(probs, labels, 0.5),
            "calibrated_threshold": threshold,
            "accuracy_at_calibrated_threshold": calibrated_acc,
            "accuracy_cross_fitted": cross_fitted_accuracy(probs, labels, seed=self.cfg.split_seed),
        }

    def judge_settings(self, out_dir: Path, threshold: float) -> dict[str, Any]:
        return {
            "kind": kind_of(CrossEncoderJudgeConfig),
            "model": str(out_dir),
            "template": self.cfg.template,
            "truncation": self.cfg.truncation,
            "max_length": self.max_length,
            "threshold": threshold,
        }


class BiEncoderTraining(PairTraining):
    """mode bi_encoder (module docstring); cos(a, b) = cos(b, a): one order is both orders."""

    def load(self, source: str, train: list[LabelledPair]) -> list[Example]:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(source, device=str(self.device))
        if self.cfg.max_length:
            self.model.max_seq_length = self.cfg.max_length
        self.max_length = self.model.max_seq_length
        self.inputs = "each text embedded alone"
        return [((p.a, p.b), p.label) for p in train]

    def save(self, path: str) -> None:
        self.model.save(path)

    def batch_loss(self, rows: list[int]) -> torch.Tensor:
        labels = self.labels[rows].to(self.device)
        texts = [t for k in rows for t in self.oriented[k][0]]  # a0 b0 a1 b1 ...
        features = {
            k: v.to(self.device) if torch.is_tensor(v) else v
            for k, v in self.model.tokenize(texts).items()
        }
        emb = self.model(features)["sentence_embedding"].float()
        cos = torch.nn.functional.cosine_similarity(emb[0::2], emb[1::2])
        weight = self.class_weight[labels]  # the weighted mean, as cross_entropy takes it
        loss = contrastive_loss(cos, labels, self.cfg.contrastive_margin)
        return (weight * loss).sum() / weight.sum()

    def evaluate(
        self, out_dir: Path, train: list[LabelledPair], heldout: list[LabelledPair]
    ) -> tuple[float, dict[str, float]]:
        """Through the embedding judge loading the saved model: what a run will compute."""
        from darling_nemo.judges.embedding import EmbeddingJudge

        tuned = EmbeddingJudge(
            EmbeddingJudgeConfig(
                model=str(out_dir),
                head="cosine",  # the fine-tuned embeddings are read by their cosine
                batch_size=self.cfg.eval_batch_size,
                device=self.cfg.device,
            )
        )
        labels = [p.label for p in heldout]
        train_cos = tuned([(p.a, p.b) for p in tqdm(train, desc="embed train", leave=False)])
        cos = tuned([(p.a, p.b) for p in tqdm(heldout, desc="embed held-out", leave=False)])
        self.scores = {"train": (train, train_cos), "heldout": (heldout, cos)}
        threshold, train_acc = calibrate_threshold(train_cos, [p.label for p in train])
        return threshold, {
            "threshold_calibrated_on_train": threshold,
            "accuracy_on_train": train_acc,
            "accuracy_at_train_threshold": accuracy(cos, labels, threshold),
            "accuracy_at_heldout_threshold": calibrate_threshold(cos, labels)[1],
            "accuracy_cross_fitted": cross_fitted_accuracy(cos, labels, seed=self.cfg.split_seed),
        }

    def judge_settings(self, out_dir: Path, threshold: float) -> dict[str, Any]:
        return {
            "kind": kind_of(EmbeddingJudgeConfig),
            "model": str(out_dir),
            "head": "cosine",
            "threshold": threshold,
        }


MODES: dict[str, type[PairTraining]] = {
    "cross_encoder": CrossEncoderTraining,
    "bi_encoder": BiEncoderTraining,
}


def build_mode(
    cfg: ClassifierTrainConfig, source: str, device: torch.device, train: list[LabelledPair]
) -> PairTraining:
    """The training of `cfg.mode`, its model loaded from `source` onto `device`."""
    return MODES[cfg.mode](cfg, source, device, train)
