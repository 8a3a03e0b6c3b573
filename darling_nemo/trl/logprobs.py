"""Each completion's log-probability under the policy that sampled it, for a method that
declares the input (`methods.base.LOGPROBS`: the unlikeliness reward).

TRL 1.16 gives reward functions the prompts, completions and completion ids, not log-
probabilities. `with_sequence_logprobs(GRPOTrainer)` adds them through the channel TRL has
for per-completion extras: the `extra_fields` its `_generate` returns are merged into each
row's inputs, which TRL passes to the reward functions as keyword arguments. So
`DarlingReward` receives `darling_logprobs`, one mean token log-probability per
completion: vLLM's sampling log-probabilities where TRL has them, otherwise one no-grad
forward pass of the policy (the weights that just sampled) over prompt + completion at
the sampling temperature, as TRL computes its own log-probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from darling_nemo import methods
from darling_nemo.methods.base import LOGPROBS
from darling_nemo.schema import DarlingConfig

LOGPROBS_FIELD = "darling_logprobs"


def mean_completion_logprobs(
    model: Any,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    temperature: float,
    pad_id: int,
) -> list[float]:
    """Mean over each completion's tokens of log p(token | prompt, earlier tokens) under
    `model` with logits divided by `temperature`; 0.0 for an empty completion. One padded
    forward pass (right padding: every row's real tokens keep positions 0, 1, ...)."""
    import torch

    rows = [list(p) + list(c) for p, c in zip(prompt_ids, completion_ids, strict=True)]
    width = max(len(r) for r in rows)
    device = next(model.parameters()).device
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        mask[i, : len(row)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.float() / temperature
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    means = []
    for i, (p, c) in enumerate(zip(prompt_ids, completion_ids, strict=True)):
        # token t of the row is predicted at position t - 1
        tokens = logp[i, len(p) - 1 : len(p) - 1 + len(c)]
        means.append(float(tokens.mean()) if len(c) else 0.0)
    return means


def trainer_class_for(darling: DarlingConfig, trainer_class: type) -> type:
    """`trainer_class`, made to pass log-probabilities where `darling.method` needs them."""
    if LOGPROBS in methods.method(darling.method).inputs:
        return with_sequence_logprobs(trainer_class)
    return trainer_class


def with_sequence_logprobs(trainer_class: type) -> type:
    """`trainer_class` (TRL's GRPOTrainer or a subclass) whose reward functions also get
    `darling_logprobs`: each completion's mean token log-probability (module docstring)."""

    class SequenceLogprobTrainer(trainer_class):  # type: ignore[misc, valid-type]
        def _generate(self, prompts: list) -> tuple:
            out = list(super()._generate(prompts))
            prompt_ids, completion_ids, sampling_logprobs, extra = out[0], out[1], out[4], out[5]
            if sampling_logprobs is not None:  # vLLM's, per token, as NeMo-RL uses
                means = [sum(lp) / len(lp) if len(lp) else 0.0 for lp in sampling_logprobs]
            else:
                means = mean_completion_logprobs(
                    self.model,
                    prompt_ids,
                    completion_ids,
                    self.temperature,
                    self.processing_class.pad_token_id or 0,
                )
            out[5] = {**(extra or {}), LOGPROBS_FIELD: means}
            return tuple(out)

    return SequenceLogprobTrainer
