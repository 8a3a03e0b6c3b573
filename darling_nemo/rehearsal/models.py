"""Tiny models of the config's architecture family, built locally for the rehearsal.

The policy (and the reward model) keep the family of the model they stand for (Qwen3 or
Llama, read from the model name), with a word-level tokenizer and a chat template, so
NeMo-RL's tokenizer loading, chat templating, data processors and the stand-ins' HF loading
run as they would on the real checkpoint. The pair classifier is the judges' tiny one.
"""

from __future__ import annotations

import string
from pathlib import Path

from darling_nemo.judges.tiny import WORDS, save_tiny_classifier
from darling_nemo.trl.policy import word_tokenizer

# Role markers are plain text: enough for NeMo-RL's processors, which render the template,
# tokenize it and split it per message.
CHAT_TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}</{{ m['role'] }}>\n{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)
TINY = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "intermediate_size": 64,
}


def family(model_name: str) -> str:
    """'qwen3' or 'llama': the architecture family of a hub name or local path."""
    return "qwen3" if "qwen3" in model_name.lower() else "llama"


def _tokenizer(path: Path, max_positions: int):
    """Word-level (one token per whitespace-separated word; others are <unk>), so a sampled
    response of 16 tokens is 16 words: past the short-answer rule, the judge decides."""
    tok = word_tokenizer(
        [*dict.fromkeys([*WORDS, *string.ascii_lowercase, *string.digits, *string.punctuation])]
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.model_max_length = max_positions
    tok.save_pretrained(str(path))
    return tok


def _config(kind: str, tok, max_positions: int, **extra):
    from transformers import LlamaConfig, Qwen3Config

    config_class = Qwen3Config if kind == "qwen3" else LlamaConfig
    return config_class(
        vocab_size=len(tok),
        max_position_embeddings=max_positions,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
        **TINY,
        **extra,
    )


def save_tiny_policy(path: Path, model_name: str, max_positions: int, seed: int = 0) -> Path:
    """A 2-layer, width-32 causal LM of `model_name`'s family, saved with its tokenizer."""
    import torch
    from transformers import AutoModelForCausalLM

    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(path, max_positions)
    torch.manual_seed(seed)
    AutoModelForCausalLM.from_config(
        _config(family(model_name), tok, max_positions)
    ).save_pretrained(str(path))
    return path


def save_tiny_reward_model(path: Path, model_name: str, max_positions: int, seed: int = 1) -> Path:
    """A 1-label sequence classifier (Bradley-Terry score) of `model_name`'s family."""
    import torch
    from transformers import AutoModelForSequenceClassification

    path.mkdir(parents=True, exist_ok=True)
    tok = _tokenizer(path, max_positions)
    torch.manual_seed(seed)
    config = _config(family(model_name), tok, max_positions, num_labels=1)
    AutoModelForSequenceClassification.from_config(config).save_pretrained(str(path))
    return path


def save_tiny_pair_classifier(path: Path, template: str) -> Path:
    """The judges' tiny classifier in the template's flavour (qwen3_math: a Qwen3 head)."""
    return save_tiny_classifier(
        path, "qwen3" if template == "qwen3_math" else "bert", max_positions=512
    )
