"""The classifier input of a pair, as the reference builds it: `CLS a SEP b SEP` text.

The reference client sends `f"{cls} {a} {sep} {b} {sep}"` to `vllm serve --task classify`
with each response cut to its first K = (MAX_LEN - 3) // 2 whitespace words; vLLM then
tokenizes that text with the tokenizer's own special tokens (add_special_tokens=True). Every
judge here builds the same text and the in-process judges tokenize it the same way, so a
checkpoint gives the same P(similar) in-process, behind vLLM, and behind
`darling_nemo.classify_server`, and `recipes/train_classifier.py` trains on that input.

Truncation "tokens" instead keeps the first K' tokens of each response, with K' chosen so
the whole input fits `max_length` (the word rule can overflow a 512-token model such as
MiniLM, whose tail is then cut by the tokenizer).
"""

from __future__ import annotations

from typing import Any

from darling_nemo.schema import PAIR_TEMPLATES, TemplateName, Truncation

UNBOUNDED_MODEL_LENGTH = 1_000_000  # tokenizers report ~1e30 when they know no limit


class PairFormatter:
    """(a, b) -> the classifier's input text.

    tokenizer: a Hugging Face tokenizer or None (then the template's literal CLS/SEP are used
    and only word truncation is possible).
    """

    def __init__(
        self,
        template: TemplateName,
        max_length: int | None = None,
        truncation: Truncation = "words",
        tokenizer: Any | None = None,
    ) -> None:
        spec = PAIR_TEMPLATES[template]
        self.tokenizer = tokenizer
        self.truncation = truncation
        self.max_length = spec.max_length if max_length is None else max_length
        if tokenizer is not None:
            model_limit = getattr(tokenizer, "model_max_length", None) or UNBOUNDED_MODEL_LENGTH
            if model_limit < UNBOUNDED_MODEL_LENGTH:
                self.max_length = min(self.max_length, int(model_limit))
        self.cls_token = getattr(tokenizer, "cls_token", None) or spec.cls_token
        self.sep_token = getattr(tokenizer, "sep_token", None) or spec.sep_token
        if tokenizer is not None:
            vocab = tokenizer.get_vocab()
            missing = [t for t in (self.cls_token, self.sep_token) if t not in vocab]
            if missing:
                raise ValueError(
                    f"template {template!r}: the tokenizer has no token {missing[0]!r} and no "
                    "cls_token/sep_token of its own; use a template that matches the model"
                )
        # The reference word budget per response.
        self.words_per_response = (self.max_length - 3) // 2
        if truncation == "tokens":
            if tokenizer is None:
                raise ValueError("truncation 'tokens' needs a tokenizer")
            added = tokenizer.num_special_tokens_to_add(pair=False)
            self.tokens_per_response = (self.max_length - 3 - added) // 2
            if self.tokens_per_response < 1:
                raise ValueError(f"max_length {self.max_length} leaves no room for the responses")

    def cut(self, text: str) -> str:
        """One response, truncated by the configured rule."""
        if self.truncation == "words":
            return " ".join(text.split()[: self.words_per_response])
        ids = self.tokenizer.encode(text, add_special_tokens=False, verbose=False)
        if len(ids) <= self.tokens_per_response:
            return " ".join(text.split())
        return self.tokenizer.decode(ids[: self.tokens_per_response])

    def text(self, a: str, b: str) -> str:
        """`CLS a SEP b SEP`, single-spaced, as the reference sends it."""
        return f"{self.cls_token} {self.cut(a)} {self.sep_token} {self.cut(b)} {self.sep_token}"
