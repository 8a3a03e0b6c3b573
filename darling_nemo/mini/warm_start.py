"""Warm start: a short supervised phase so the tiny policy begins unsure but capable.

The policy is trained on correct answers of the task's warm-start prompts (the dice task:
training and held-out targets alike; the routes task: every grid but the held-out ones;
this plays the role of pretraining) and stopped early, so it has learned the format and
roughly how the task works but is right only part of the time. The answers are drawn with
a habit (the dice task: Zipf weights over each target's multisets; the routes task: few
turns, right first), giving the policy favourite answers and a tail, like a pretrained
model's habits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from darling_nemo.interrupt import stop_if_interrupted

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast


@dataclass(frozen=True)
class WarmStartData:
    """What a task's warm start trains on: `keys` (ints: the prompts a batch draws from,
    uniformly), each key's prompt text, and a correct answer's words for a key (drawn with
    the generator handed in, so the stream of answers is fixed by the seed)."""

    keys: Sequence[int]
    prompt: Callable[[int], str]
    answer: Callable[[int, np.random.Generator], list[str]]


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    data: WarmStartData,
    steps: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    optimizer: str,
    progress: bool = True,
) -> list[float]:
    """Supervised next-token training on (prompt, correct answer, EOS); returns the losses.

    The loss is on the answer digits and the EOS only (the prompt is given). `optimizer` is a
    `trainer.optimizer` name (darling_nemo.mini.optim.py), AdamW with torch's defaults.
    """
    # torch, TRL's stack and the optimizer only here: the task registry imports this module
    # for its dataclasses, and a config check must not load torch (optional dependency).
    import torch

    from darling_nemo.mini.optim import optimizer_class

    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    prompt_ids = {key: tokenizer(data.prompt(key))["input_ids"] for key in data.keys}
    for key, ids in prompt_ids.items():
        if tokenizer.unk_token_id in ids:
            raise ValueError(
                f"warm_start: the tokenizer does not know the prompt {data.prompt(key)!r}"
            )
    prompt_length = len(prompt_ids[data.keys[0]])
    if any(len(ids) != prompt_length for ids in prompt_ids.values()):
        raise ValueError("warm_start: the prompts must all have the same number of tokens")
    optimizer = optimizer_class(optimizer)(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="warm start", disable=not progress):
        stop_if_interrupted()
        rows = []
        for key in rng.choice(np.asarray(data.keys), size=batch_size):
            answer = tokenizer.convert_tokens_to_ids(data.answer(int(key), rng))
            rows.append([*prompt_ids[int(key)], *answer, tokenizer.eos_token_id])
        input_ids = torch.tensor(rows)
        labels = input_ids.clone()
        labels[:, :prompt_length] = -100  # the prompt is given, not predicted
        loss = model(input_ids=input_ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@dataclass(frozen=True)
class MiniatureTask:
    """What the miniature's recipe needs of a task beyond its prompts and quality (the task
    registry's `miniature`): each seed's warm-start data, and how its report and figures
    name the held-out prompts."""

    warm_start: Callable[[int], WarmStartData]  # seed -> what that seed's warm start trains on
    heldout_note: str  # the report's words for the held-out prompts ("Held-out targets [13]")
    title: str  # the figures' first line: the task and what RL never trains on
