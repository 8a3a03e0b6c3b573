"""Sampling evaluation: pass@k and distinct correct answers on held-out prompts.

For each prompt, n responses are sampled; a response is correct when its quality is > 0
(the same convention as the core's `partition_scope: correct`). Reported, as means over
prompts:

- pass@k for each k: unbiased, from n samples with c correct (`metrics.pass_at_k`);
- distinct_correct: equivalence classes among the correct responses, by the same
  partition the training reward uses (core.partition_groups with the run's judge);
- distinct_all: classes among all n responses.

The sampling RNG is forked and seeded per call, so evaluating never changes the training
run's random stream and the same checkpoint always gives the same numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from darling_nemo.core import PairJudge, partition_groups
from darling_nemo.metrics import pass_at_k

QualityFn = Callable[..., Sequence[float | None]]
"""A TRL-style reward function: (prompts=..., completions=..., **dataset columns) -> floats."""


@torch.no_grad()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompt: str | Sequence[Mapping[str, Any]],
    num_samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float = 1.0,
) -> list[str]:
    """`num_samples` sampled continuations of one prompt, decoded without special tokens.

    A conversational prompt (a list of messages) is rendered in the tokenizer's chat
    template with the generation prompt, as TRL renders it for training.
    """
    if isinstance(prompt, str):
        encoded = tokenizer(prompt, return_tensors="pt")
    else:
        text = tokenizer.apply_chat_template(
            list(prompt), add_generation_prompt=True, tokenize=False
        )
        encoded = tokenizer(text, return_tensors="pt", add_special_tokens=False)
    encoded = encoded.to(model.device)
    was_training = model.training
    model.eval()
    output = model.generate(
        **encoded,
        do_sample=True,
        temperature=temperature,
        top_p=top_p,
        top_k=0,
        max_new_tokens=max_new_tokens,
        num_return_sequences=num_samples,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if was_training:
        model.train()
    completions = output[:, encoded["input_ids"].shape[1] :]
    return tokenizer.batch_decode(completions, skip_special_tokens=True)


def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    rows: Sequence[Mapping[str, Any]],
    quality: QualityFn,
    judge: PairJudge | None,
    threshold: float,
    num_samples: int,
    ks: Sequence[int],
    max_new_tokens: int,
    temperature: float,
    seed: int,
) -> dict[str, float]:
    """Mean pass@k, distinct correct and distinct overall answers over `rows` (dicts with "prompt")."""
    bad_k = [k for k in ks if not 1 <= k <= num_samples]
    if bad_k:
        raise ValueError(f"pass@k needs 1 <= k <= num_samples={num_samples}, got k={bad_k}")
    with torch.random.fork_rng(devices=[model.device] if model.device.type == "cuda" else []):
        torch.manual_seed(seed)
        samples = [
            sample_completions(
                model, tokenizer, row["prompt"], num_samples, max_new_tokens, temperature
            )
            for row in rows
        ]
    correct_groups, all_groups, num_correct = [], [], []
    for row, completions in zip(rows, samples, strict=True):
        columns = {key: [value] * num_samples for key, value in row.items() if key != "prompt"}
        scores = quality(prompts=[row["prompt"]] * num_samples, completions=completions, **columns)
        correct = [c for c, s in zip(completions, scores, strict=True) if s is not None and s > 0]
        num_correct.append(len(correct))
        correct_groups.append(correct)
        all_groups.append(completions)
    distinct_correct = [p.num_classes for p in partition_groups(correct_groups, judge, threshold)]
    distinct_all = [p.num_classes for p in partition_groups(all_groups, judge, threshold)]
    result = {
        f"pass@{k}": float(np.mean([pass_at_k(num_samples, c, k) for c in num_correct])) for k in ks
    }
    result["distinct_correct"] = float(np.mean(distinct_correct))
    result["distinct_all"] = float(np.mean(distinct_all))
    return result
