"""Model shapes: the known checkpoints, and reading a Hugging Face `config.json`."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from darling_nemo.schema import ConfigError


@dataclass(frozen=True)
class Architecture:
    """The shape numbers the estimate needs. Gated MLP (SwiGLU/GeGLU), no biases."""

    name: str
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    tied_embeddings: bool
    num_labels: int = 0  # > 0: a sequence-classification head instead of the LM head
    qk_norm: bool = False  # Qwen3: RMSNorm on q and k (head_dim weights each)
    encoder: bool = False  # bidirectional encoder: no KV cache when served
    max_positions: int = 0  # max_position_embeddings: vLLM's default max_model_len (0: unknown)

    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        h = self.hidden_size
        attention = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        norms = 2 * h + (2 * self.head_dim if self.qk_norm else 0)
        return attention + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def head_params(self) -> int:
        """Output head + final norm (the LM head is the embedding when tied)."""
        if self.num_labels:
            return self.num_labels * self.hidden_size + self.hidden_size
        lm_head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return lm_head + self.hidden_size

    @property
    def total_params(self) -> int:
        return self.num_layers * self.layer_params + self.embedding_params + self.head_params

    def describe(self) -> str:
        return (
            f"{self.name}: {self.num_layers} layers, hidden {self.hidden_size}, "
            f"MLP {self.intermediate_size}, {self.num_heads} heads / {self.num_kv_heads} KV heads "
            f"x {self.head_dim}, vocab {self.vocab_size:,} -> {self.total_params / 1e9:.2f} B params"
        )


# Numbers from each checkpoint's config.json. Parameter counts reproduce the published ones
# (tests/cluster/test_plan.py: 4,022,468,096 for Qwen3-4B, 8,030,261,248 for Llama-3.1-8B, ...).
# fmt: off
KNOWN_MODELS: dict[str, Architecture] = {a.name: a for a in [
    #            name                                  hidden layers heads kv head_dim  MLP   vocab   tied
    Architecture("Qwen/Qwen3-1.7B-Base",               2048,  28,  16,  8, 128,  6144, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-1.7B",                    2048,  28,  16,  8, 128,  6144, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-4B-Base",                 2560,  36,  32,  8, 128,  9728, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-4B",                      2560,  36,  32,  8, 128,  9728, 151936, True, qk_norm=True),
    Architecture("Qwen/Qwen3-14B-Base",                5120,  40,  40,  8, 128, 17408, 151936, False, qk_norm=True),
    Architecture("Qwen/Qwen3-14B",                     5120,  40,  40,  8, 128, 17408, 151936, False, qk_norm=True),
    Architecture("meta-llama/Llama-3.1-8B-Instruct",   4096,  32,  32,  8, 128, 14336, 128256, False),
    Architecture("meta-llama/Llama-3.1-8B",            4096,  32,  32,  8, 128, 14336, 128256, False),
    Architecture("meta-llama/Llama-3.3-70B-Instruct",  8192,  80,  64,  8, 128, 28672, 128256, False),
    Architecture("meta-llama/Llama-3.1-70B-Instruct",  8192,  80,  64,  8, 128, 28672, 128256, False),
    Architecture("Skywork/Skywork-Reward-V2-Qwen3-1.7B", 2048, 28, 16,  8, 128,  6144, 151936, False, num_labels=1, qk_norm=True),
    Architecture("Skywork/Skywork-Reward-V2-Llama-3.1-8B", 4096, 32, 32,  8, 128, 14336, 128256, False, num_labels=1),
    # Classifiers with 2-label heads: ModernBERT-base (WildChat), Qwen3-Embedding-4B (math).
    Architecture("dogtooth/similarity-classifier-f168-hf",      768, 22, 12, 12, 64, 1152, 50368, True, num_labels=2, encoder=True, max_positions=8192),
    Architecture("dogtooth/qwen3-4b-emb-finetuned-step-70-hf", 2560, 36, 32,  8, 128, 9728, 151665, True, num_labels=2, qk_norm=True, max_positions=40960),
]}
# fmt: on

_REQUIRED_HF_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "vocab_size",
    "intermediate_size",
)
_ENCODER_MODEL_TYPES = ("modernbert", "bert", "roberta", "deberta-v2")


def architecture_from_hf_config(path: Path, name: str | None = None) -> Architecture:
    """Read a Hugging Face `config.json` (file, or a model directory holding one)."""
    file = path / "config.json" if path.is_dir() else path
    try:
        raw = json.loads(file.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such file (expected a Hugging Face config.json)") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{file}:{err.lineno}: invalid JSON: {err.msg}") from None
    missing = [k for k in _REQUIRED_HF_KEYS if k not in raw]
    if missing:
        raise ConfigError(f"{file}: missing {', '.join(missing)}")
    heads = raw["num_attention_heads"]
    architectures = raw.get("architectures") or [""]
    is_classifier = architectures[0].endswith("ForSequenceClassification")
    model_type = raw.get("model_type", "")
    return Architecture(
        name=name or str(path),
        hidden_size=raw["hidden_size"],
        num_layers=raw["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=raw.get("num_key_value_heads") or heads,
        head_dim=raw.get("head_dim") or raw["hidden_size"] // heads,
        intermediate_size=raw["intermediate_size"],
        vocab_size=raw["vocab_size"],
        # transformers' own default is True; Llama configs say false explicitly.
        tied_embeddings=bool(raw.get("tie_word_embeddings", True)),
        num_labels=len(raw.get("id2label", {0: 0, 1: 1})) if is_classifier else 0,
        qk_norm=model_type == "qwen3",
        encoder=model_type in _ENCODER_MODEL_TYPES,
        max_positions=int(raw.get("max_position_embeddings") or 0),
    )


def resolve_architecture(model: str, key: str) -> Architecture:
    """A model name from the table, or a local directory / config.json path."""
    path = Path(model)
    if path.exists():
        return architecture_from_hf_config(path, name=model)
    if model in KNOWN_MODELS:
        return KNOWN_MODELS[model]
    by_basename = {name.split("/")[-1]: arch for name, arch in KNOWN_MODELS.items()}
    if path.name in by_basename:  # e.g. /models/Llama-3.3-70B-Instruct not mounted here
        return replace(by_basename[path.name], name=model)
    known = ", ".join(sorted(KNOWN_MODELS))
    raise ConfigError(
        f"{key}: unknown model {model!r}: not a local path with a config.json and not one of "
        f"{known}; pass --model-config PATH/config.json"
    )
