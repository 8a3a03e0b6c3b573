"""Cross-encoder judge: a Hugging Face sequence-classification checkpoint in this process.

P(similar) = softmax(logits)[-1], the probability of the last label, as the reference reads
`probs[-1]` from vLLM. Pairs are formatted by `templates.PairFormatter` (the reference text
`CLS a SEP b SEP`), tokenized once, sorted by length and run in batches padded only to the
longest input of each batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from darling_nemo.judges.templates import UNBOUNDED_MODEL_LENGTH, PairFormatter
from darling_nemo.schema import CrossEncoderJudgeConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(device: str) -> torch.device:
    """ "auto" -> cuda when available, else cpu; anything else is passed to torch."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """ "auto" -> bfloat16 on cuda (what vLLM's --dtype auto picks for bf16 checkpoints),
    float32 on cpu (bf16 matmuls on CPU are slow and lose accuracy for no gain)."""
    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[dtype]


class SequenceClassifier:
    """A sequence-classification checkpoint: texts -> class probabilities.

    Shared by the cross-encoder judge, the Ray actors and `darling_nemo.classify_server`.
    """

    def __init__(self, model: str, device: str = "auto", dtype: str = "auto") -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.name = model
        self.device = resolve_device(device)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            net = AutoModelForSequenceClassification.from_pretrained(model)
        except (OSError, ValueError) as err:
            raise ValueError(
                f"cannot load the classifier {model!r} (a local path or hub name of a "
                f"sequence-classification checkpoint): {err}"
            ) from err
        if net.config.num_labels < 2:
            raise ValueError(
                f"{model!r} has {net.config.num_labels} label(s); a pair classifier needs >= 2 "
                "(P(similar) is the probability of the last label)"
            )
        if self.tokenizer.pad_token is None:  # decoder tokenizers (Qwen3): pad with EOS
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if net.config.pad_token_id is None:  # last-token pooling finds the end by the pad id
            net.config.pad_token_id = self.tokenizer.pad_token_id
        self.model = net.to(self.device, resolve_dtype(dtype, self.device)).eval()
        self.num_labels = int(net.config.num_labels)
        self.id2label = {int(k): str(v) for k, v in net.config.id2label.items()}
        self.max_length = self._model_limit()

    def _model_limit(self) -> int:
        """Longest input the model takes: the tokenizer's limit, else the position table."""
        limit = getattr(self.tokenizer, "model_max_length", None) or UNBOUNDED_MODEL_LENGTH
        if limit >= UNBOUNDED_MODEL_LENGTH:
            limit = getattr(self.model.config, "max_position_embeddings", None) or limit
        return int(limit)

    def encode(self, texts: Sequence[str], max_length: int | None = None) -> list[list[int]]:
        """Token ids with the tokenizer's own special tokens, as vLLM tokenizes a request.

        max_length None: no truncation (the server rejects over-long inputs, like vLLM).
        """
        if max_length is None:
            return self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]
        return self.tokenizer(
            list(texts), add_special_tokens=True, truncation=True, max_length=max_length
        )["input_ids"]

    @torch.inference_mode()
    def probs_from_ids(self, ids: Sequence[Sequence[int]], batch_size: int) -> np.ndarray:
        """Class probabilities (len(ids), num_labels), batches sorted by length."""
        out = np.zeros((len(ids), self.num_labels), dtype=np.float64)
        order = sorted(range(len(ids)), key=lambda k: len(ids[k]))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            batch = self.tokenizer.pad(
                {"input_ids": [list(ids[k]) for k in rows]}, padding=True, return_tensors="pt"
            )
            batch = {k: v.to(self.device) for k, v in batch.items()}
            logits = self.model(**batch).logits.float()
            out[rows] = torch.softmax(logits, dim=-1).cpu().numpy()
        return out

    def probs(
        self, texts: Sequence[str], batch_size: int, max_length: int | None = None
    ) -> np.ndarray:
        return self.probs_from_ids(self.encode(texts, max_length), batch_size)


class CrossEncoderJudge:
    """PairJudge: pairs -> P(similar) from a sequence-classification checkpoint."""

    def __init__(self, cfg: CrossEncoderJudgeConfig) -> None:
        self.cfg = cfg
        self.classifier = SequenceClassifier(cfg.model, cfg.device, cfg.dtype)
        self.formatter = PairFormatter(
            cfg.template, cfg.max_length, cfg.truncation, self.classifier.tokenizer
        )
        self.max_length = min(self.formatter.max_length, self.classifier.max_length)

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        texts = [self.formatter.text(a, b) for a, b in pairs]
        probs = self.classifier.probs(texts, self.cfg.batch_size, self.max_length)
        return probs[:, -1].tolist()
