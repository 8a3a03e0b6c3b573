"""The policy a TRL run trains: a pretrained causal LM, or a tiny one built from the config.

A tiny policy downloads nothing: its tokenizer (word- or character-level) is made from a
vocabulary list and the model from `LlamaConfig`, and both are saved with
`save_pretrained` so every later stage (TRL, evaluation, resume) loads them through the
ordinary `from_pretrained` path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from darling_nemo.schema import TinyPolicyConfig, TrlRunConfig

if TYPE_CHECKING:
    from darling_nemo.trl.tasks import TrainingTask

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
SPECIAL_TOKENS = (PAD, EOS, UNK)
PRINTABLE_CHARS = (*(chr(c) for c in range(32, 127)), "\n")


def word_tokenizer(words: Sequence[str]) -> PreTrainedTokenizerFast:
    """One token per whitespace-separated word of `words`; decoding joins tokens with spaces.

    Used by the digit task: completions decode to "3 4 0 5 1 2", so each digit is a word,
    and answers of more than 5 digits are past the core's short-answer rule (the judge
    decides them).
    """
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *words))}
    if len(vocab) != len(SPECIAL_TOKENS) + len(words):
        raise ValueError("word_tokenizer: duplicate words in the vocabulary")
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK
    )


def char_tokenizer(chars: Sequence[str] = PRINTABLE_CHARS) -> PreTrainedTokenizerFast:
    """One token per character (printable ASCII and newline by default); decoding fuses them.

    For smoke runs of text tasks with a tiny random policy: other characters become <unk>.
    """
    vocab = {token: i for i, token in enumerate((*SPECIAL_TOKENS, *chars))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK
    )


def tiny_llama(
    tokenizer: PreTrainedTokenizerFast,
    hidden_size: int,
    num_layers: int,
    num_heads: int,
    intermediate_size: int,
    max_positions: int,
) -> LlamaForCausalLM:
    """A randomly initialised Llama sized by the arguments, over `tokenizer`'s vocabulary."""
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def tiny_policy(
    tokenizer: PreTrainedTokenizerFast, policy: TinyPolicyConfig, max_positions: int
) -> LlamaForCausalLM:
    """The randomly initialised Llama a config's `policy: {kind: tiny, ...}` describes."""
    return tiny_llama(
        tokenizer,
        hidden_size=policy.hidden_size,
        num_layers=policy.num_layers,
        num_heads=policy.num_heads,
        intermediate_size=policy.intermediate_size,
        max_positions=max_positions,
    )


def build_policy(cfg: TrlRunConfig, task: TrainingTask, output_dir: Path) -> tuple[Any, Any]:
    """(model, tokenizer), always loaded with `from_pretrained`.

    A tiny policy is built once (task tokenizer, small Llama, seeded) and saved to
    `output_dir/initial_policy`, so a resumed run, TRL's reference model (kl_coef > 0) and
    anyone reading the run load the same weights through the ordinary path.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy = cfg.policy
    if policy.kind == "tiny":
        path = output_dir / "initial_policy"
        if not (path / "config.json").is_file():
            tokenizer = (
                word_tokenizer(task.word_vocabulary) if task.word_vocabulary else char_tokenizer()
            )
            prompt_tokens = max(
                len(tokenizer(row["prompt"])["input_ids"]) for row in task.train_rows
            )
            max_positions = prompt_tokens + cfg.trainer.max_completion_length + 1
            model = tiny_policy(tokenizer, policy, max_positions)
            tokenizer.save_pretrained(path)
            model.save_pretrained(path)
        name_or_path, dtype = str(path), torch.float32
    else:
        name_or_path = policy.name_or_path
        dtype = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16}[policy.dtype]
        if dtype is None:
            dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=dtype)
    return model, tokenizer
