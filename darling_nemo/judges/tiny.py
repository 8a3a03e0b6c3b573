"""Tiny randomly initialised pair classifiers, saved as real Hugging Face checkpoints.

For tests, benchmarks of the plumbing, and trying the served path on a laptop: nothing is
downloaded. The tokenizer is a word-level `tokenizers` vocabulary (lower-cased words,
unknown words -> [UNK]); the model is built from a config and saved with save_pretrained,
so everything downstream goes through the ordinary `from_pretrained` loading code.

    python -m darling_nemo.judges.tiny /tmp/tiny-clf [--flavour bert|qwen3] [--append-pad]
"""

from __future__ import annotations

import argparse
import string
from pathlib import Path

WORDS = [
    "the",
    "a",
    "an",
    "of",
    "to",
    "and",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "be",
    "by",
    "this",
    "are",
    "or",
    "at",
    "from",
    "you",
    "your",
    "we",
    "our",
    "they",
    "he",
    "she",
    "his",
    "her",
    "its",
    "their",
    "not",
    "but",
    "all",
    "any",
    "can",
    "will",
    "would",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "answer",
    "question",
    "problem",
    "solution",
    "result",
    "number",
    "equal",
    "equals",
    "sum",
    "total",
    "value",
    "yes",
    "no",
    "true",
    "false",
    "first",
    "second",
    "final",
    "step",
    "therefore",
    "so",
    "because",
    "if",
    "then",
    "else",
    "when",
    "which",
    "what",
    "who",
    "how",
    "why",
    "where",
    "poem",
    "story",
    "cat",
    "dog",
    "sun",
    "moon",
    "sea",
    "river",
    "tree",
    "city",
    "night",
    "day",
    "love",
    "time",
    "life",
    "world",
    "light",
    "dark",
    "red",
    "blue",
    "green",
    "happy",
    "sad",
    "old",
    "new",
    "big",
    "small",
    "write",
    "tell",
    "give",
    "make",
    "think",
    "know",
    "see",
    "say",
    "go",
    "come",
]


def _vocab(specials: list[str]) -> dict[str, int]:
    tokens = [*specials, *WORDS, *string.ascii_lowercase, *string.digits, *string.punctuation]
    return {t: i for i, t in enumerate(dict.fromkeys(tokens))}


def save_tiny_tokenizer(
    path: str | Path, flavour: str = "bert", model_max_length: int = 128, append_pad: bool = False
):
    """A word-level fast tokenizer. bert: [CLS] x [SEP] added like BERT; qwen3: no CLS/SEP
    (the qwen3_math template then uses <|im_start|>/<|im_end|>), pad = <|endoftext|>.

    append_pad (qwen3): every input ends with <|endoftext|>, the pad id, as the current Qwen3
    tokenizers append it (QwenLM/Qwen3-Embedding issue #122)."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    if flavour == "bert":
        specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        roles = {
            "pad_token": "[PAD]",
            "unk_token": "[UNK]",
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "mask_token": "[MASK]",
        }
    elif flavour == "qwen3":
        specials = ["<|endoftext|>", "[UNK]", "<|im_start|>", "<|im_end|>"]
        roles = {"pad_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "[UNK]"}
    else:
        raise ValueError(f"unknown flavour {flavour!r}: use 'bert' or 'qwen3'")
    vocab = _vocab(specials)
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if flavour == "bert":
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
    elif append_pad:
        tok.post_processor = processors.TemplateProcessing(
            single="$A <|endoftext|>",
            pair="$A <|endoftext|> $B <|endoftext|>",
            special_tokens=[("<|endoftext|>", vocab["<|endoftext|>"])],
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=model_max_length, **roles)
    fast.add_special_tokens(
        {"additional_special_tokens": [s for s in specials if s not in roles.values()]}
    )
    fast.save_pretrained(str(path))
    return fast


def save_tiny_classifier(
    path: str | Path,
    flavour: str = "bert",
    seed: int = 0,
    max_positions: int = 128,
    append_pad: bool = False,
    num_labels: int = 2,
) -> Path:
    """A 2-layer, width-32 sequence classifier with 2 labels (different, similar), saved with
    its tokenizer; another `num_labels` makes the head a judge must refuse."""
    import torch
    from transformers import (
        BertConfig,
        BertForSequenceClassification,
        Qwen3Config,
        Qwen3ForSequenceClassification,
    )

    path = Path(path)
    tok = save_tiny_tokenizer(path, flavour, max_positions, append_pad)
    torch.manual_seed(seed)
    shape: dict[str, object] = {  # both flavours: width 32, 2 layers, 2 heads
        "vocab_size": len(tok),
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 2,
        "intermediate_size": 64,
        "max_position_embeddings": max_positions,
        "initializer_range": 0.5,  # random outputs that vary with the input
        "pad_token_id": tok.pad_token_id,
        "num_labels": num_labels,
    }
    if num_labels == 2:
        shape |= {
            "id2label": {0: "different", 1: "similar"},
            "label2id": {"different": 0, "similar": 1},
        }
    if flavour == "bert":
        model = BertForSequenceClassification(BertConfig(**shape))
    else:
        config = Qwen3Config(**shape, num_key_value_heads=1, head_dim=16)
        model = Qwen3ForSequenceClassification(config)
    model.save_pretrained(str(path))
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Save a tiny random pair classifier.")
    parser.add_argument("path")
    parser.add_argument("--flavour", default="bert", choices=["bert", "qwen3"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--append-pad", action="store_true", help="qwen3: end every input with the pad token"
    )
    args = parser.parse_args(argv)
    print(save_tiny_classifier(args.path, args.flavour, args.seed, append_pad=args.append_pad))


if __name__ == "__main__":
    main()
