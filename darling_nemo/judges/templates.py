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

import math
from collections.abc import Sequence
from typing import Any

from darling_nemo.schema import PAIR_TEMPLATES, TemplateName, Truncation

UNBOUNDED_MODEL_LENGTH = 1_000_000  # tokenizers report ~1e30 when they know no limit
# Without a tokenizer, request sizes use an estimate. BPE tokenizers (Qwen3, Llama, ModernBERT)
# average about 4 characters per token on English prose and nearer 3 on LaTeX-heavy math;
# 3 overestimates prose by a third, which errs towards smaller requests (never a wrong answer:
# the count only decides where requests are cut).
CHARS_PER_TOKEN = 3.0
TEMPLATE_TOKENS = 3  # CLS, SEP, SEP of the template text
ESTIMATED_SPECIAL_TOKENS = 2  # what a tokenizer typically adds around the text (BOS/CLS, EOS/SEP)


class PairFormatter:
    """(a, b) -> the classifier's input text.

    max_length, truncation: the judge config's (None: the template's budget).
    tokenizer: a Hugging Face tokenizer or None (then the template's literal CLS/SEP are used
    and only word truncation is possible).
    """

    def __init__(
        self,
        template: TemplateName,
        max_length: int | None,
        truncation: Truncation,
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

    @property
    def prefix_words(self) -> int | None:
        """K when a pair's input depends only on the first K whitespace words of each
        response (word truncation); None with token truncation (judge_stream.prefix_words)."""
        return self.words_per_response if self.truncation == "words" else None

    def cut(self, text: str) -> str:
        """One response, truncated by the configured rule."""
        return self.cut_counted(text)[0]

    def cut_counted(self, text: str) -> tuple[str, int]:
        """One response, truncated by the configured rule, and its length in tokens."""
        return self.cut_many([text])[0]

    def cut_many(self, texts: Sequence[str]) -> list[tuple[str, int]]:
        """Responses truncated by the configured rule, each with its length in tokens:
        counted with the tokenizer when there is one (one batched call, which a fast
        tokenizer spreads over the cores), else estimated (`estimate_tokens`)."""
        if self.truncation == "words":
            kept = [" ".join(text.split()[: self.words_per_response]) for text in texts]
            if self.tokenizer is None:
                return [(k, estimate_tokens(k)) for k in kept]
            return list(zip(kept, map(len, self._ids(kept)), strict=True))
        out = []
        for text, ids in zip(texts, self._ids(texts), strict=True):
            if len(ids) <= self.tokens_per_response:
                out.append((" ".join(text.split()), len(ids)))
            else:
                keep = self.tokenizer.decode(ids[: self.tokens_per_response])
                out.append((keep, self.tokens_per_response))
        return out

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        if not texts:
            return []
        encoded = self.tokenizer(list(texts), add_special_tokens=False, verbose=False)
        return encoded["input_ids"]

    def text(self, a: str, b: str) -> str:
        """`CLS a SEP b SEP`, single-spaced, as the reference sends it."""
        return self._join(self.cut(a), self.cut(b))

    def texts_and_tokens(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[str], list[int]]:
        """The input text of every pair and its token count as the server will see it (the
        template's CLS/SEP and the tokenizer's own special tokens included; within a few
        tokens, since the halves are counted apart). Each distinct response is cut and
        tokenized once, however many pairs it is in (up to n - 1 in a group of n)."""
        responses = list(dict.fromkeys(r for pair in pairs for r in pair))
        cut = dict(zip(responses, self.cut_many(responses), strict=True))
        if self.tokenizer is None:
            overhead = TEMPLATE_TOKENS + ESTIMATED_SPECIAL_TOKENS
        else:
            overhead = TEMPLATE_TOKENS + self.tokenizer.num_special_tokens_to_add(pair=False)
        texts, tokens = [], []
        for a, b in pairs:
            (text_a, tokens_a), (text_b, tokens_b) = cut[a], cut[b]
            texts.append(self._join(text_a, text_b))
            tokens.append(tokens_a + tokens_b + overhead)
        return texts, tokens

    def _join(self, a: str, b: str) -> str:
        return f"{self.cls_token} {a} {self.sep_token} {b} {self.sep_token}"


def estimate_tokens(text: str) -> int:
    """Tokens in `text` without a tokenizer: one per CHARS_PER_TOKEN characters, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)
