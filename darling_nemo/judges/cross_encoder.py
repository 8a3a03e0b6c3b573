"""Cross-encoder judge: a Hugging Face sequence-classification checkpoint in this process.

P(similar) = softmax(logits)[-1], the probability of the last label, as the reference reads
`probs[-1]` from vLLM. Pairs are formatted by `templates.PairFormatter` (the reference text
`CLS a SEP b SEP`), tokenized once, sorted by length and run in batches padded only to the
longest input of each batch.

Each pair gets the input a server gets: the template's word (or token) budget decides the
text, and the token ids are cut only at the model's own limit (vLLM rejects longer inputs;
here they are cut, with a warning). Decoder classifiers (Qwen3, Llama: a `score` head on the
last token) are pooled at the last attended token, as vLLM pools the last token.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch

from darling_nemo.judges.templates import UNBOUNDED_MODEL_LENGTH, PairFormatter
from darling_nemo.schema import CrossEncoderJudgeConfig

log = logging.getLogger(__name__)

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


def sequence_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits (batch, num_labels) of a padded batch, pooled as vLLM pools.

    Decoder classifiers (Qwen3, Llama) put a `score` head on the last token. Hugging Face
    picks "the last token that is not config.pad_token_id", one token early when the
    tokenizer appends its pad id to every input (Qwen3's appends <|endoftext|>, its pad
    token); vLLM pools the last token. So the head is applied here to the last attended
    token. Encoders (BERT, ModernBERT) keep the model's own pooling.
    """
    score = getattr(model, "score", None)
    if not isinstance(score, torch.nn.Linear):
        return model(**batch).logits
    mask = batch["attention_mask"]
    hidden = model.base_model(
        input_ids=batch["input_ids"], attention_mask=mask, use_cache=False
    ).last_hidden_state
    positions = torch.arange(mask.shape[-1], device=mask.device)
    last = (positions * mask).argmax(dim=-1)  # the last attended position, either padding side
    return score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])


class SequenceClassifier:
    """A sequence-classification checkpoint: texts -> class probabilities.

    Shared by the cross-encoder judge, the Ray actors and `darling_nemo.classify_server`.
    """

    def __init__(self, model: str, device: str, dtype: str) -> None:
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
        self.tokenizer.padding_side = "right"  # every row starts at position 0
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
        if max_length is None:  # verbose=False: over-long inputs are the caller's to report
            return self.tokenizer(list(texts), add_special_tokens=True, verbose=False)["input_ids"]
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
                {"input_ids": [list(ids[k]) for k in rows]},
                padding=True,
                return_attention_mask=True,
                return_tensors="pt",
            )
            batch = {k: v.to(self.device) for k, v in batch.items()}
            logits = sequence_logits(self.model, batch).float()
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
        # The template's budget shapes the text (words or tokens per response); the ids are
        # cut only past the model's limit, where a server would reject them. Cutting at the
        # budget instead would drop the tail of b and the final SEP that the server sees.
        self.max_length = self.classifier.max_length
        self.cut_inputs = 0  # inputs cut at the model's limit (warned about once)

    @property
    def prefix_words(self) -> int | None:  # judge_stream.prefix_words
        return self.formatter.prefix_words

    def __call__(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if not pairs:
            return []
        texts = [self.formatter.text(a, b) for a, b in pairs]
        ids = self.classifier.encode(texts)
        over = [k for k, seq in enumerate(ids) if len(seq) > self.max_length]
        if over:
            if not self.cut_inputs:
                log.warning(
                    "cross_encoder: %d input(s) longer than the model's %d tokens are cut at that "
                    "length (losing the end of the second response; a vLLM server rejects them). "
                    "Set truncation=tokens or a smaller max_length.",
                    len(over),
                    self.max_length,
                )
            self.cut_inputs += len(over)
            cut = self.classifier.encode([texts[k] for k in over], self.max_length)
            for k, seq in zip(over, cut, strict=True):
                ids[k] = seq
        probs = self.classifier.probs_from_ids(ids, self.cfg.batch_size)
        return probs[:, -1].tolist()
