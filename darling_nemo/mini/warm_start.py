"""Warm start: a short supervised phase so the tiny policy begins unsure but capable.

The policy is trained on correct answers of every target (training and held-out targets
alike: this plays the role of pretraining) and stopped early, so it has learned the format
and roughly how sums work but is right only part of the time. The answers can be drawn
with Zipf weights over each target's multisets (`DigitSum.sample_answer`), giving the
policy favourite answers and a tail, like a pretrained model's habits.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerFast

from darling_nemo.mini.optim import optimizer_class
from darling_nemo.mini.task import DigitSum, prompt_text


def warm_start(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerFast,
    task: DigitSum,
    targets: Sequence[int],
    steps: int,
    batch_size: int,
    learning_rate: float,
    zipf_exponent: float,
    seed: int,
    optimizer: str,
    progress: bool = True,
) -> list[float]:
    """Supervised next-token training on (prompt, correct answer, EOS); returns the losses.

    The loss is on the answer digits and the EOS only (the prompt is given). `optimizer` is a
    `trainer.optimizer` name (darling_nemo.mini.optim.py), AdamW with torch's defaults.
    """
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    prompt_ids = {t: tokenizer(prompt_text(t))["input_ids"] for t in targets}
    for target, ids in prompt_ids.items():
        if tokenizer.unk_token_id in ids:
            raise ValueError(
                f"warm_start: the tokenizer does not know the prompt {prompt_text(target)!r}"
            )
    digit_id = {int(d): tokenizer.convert_tokens_to_ids(d) for d in task.digits}
    prompt_length = len(prompt_ids[targets[0]])  # "T<tens> U<units>": the same for all
    optimizer = optimizer_class(optimizer)(model.parameters(), lr=learning_rate)
    model.train()
    losses = []
    for _ in tqdm(range(steps), desc="warm start", disable=not progress):
        rows = []
        for t in rng.choice(np.asarray(targets), size=batch_size):
            answer = task.sample_answer(int(t), zipf_exponent, seed, rng)
            digits = [digit_id[d] for d in answer]
            rows.append([*prompt_ids[int(t)], *digits, tokenizer.eos_token_id])
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
