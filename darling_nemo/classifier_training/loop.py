"""Optimiser, learning-rate schedule and the training steps of a classifier run."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from darling_nemo.classifier_training.checkpoint import training_state
from darling_nemo.classifier_training.modes import PairTraining
from darling_nemo.schema import ClassifierTrainConfig


@dataclass(frozen=True)
class StepPlan:
    """How many steps an epoch and the run take (`max_steps` cuts or extends the run)."""

    steps_per_epoch: int
    total_steps: int

    @classmethod
    def of(cls, examples: int, cfg: ClassifierTrainConfig) -> StepPlan:
        steps_per_epoch = math.ceil(examples / cfg.batch_size)
        return cls(steps_per_epoch, cfg.max_steps or math.ceil(cfg.epochs * steps_per_epoch))


def make_optimizer(
    model: torch.nn.Module, cfg: ClassifierTrainConfig, total_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW with weight decay on matrices only; linear warm-up, then linear decay to 0."""
    warmup = int(cfg.warmup_fraction * total_steps)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    optimizer = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0},
        ],
        lr=cfg.lr,
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            (s + 1) / max(warmup, 1)
            if s < warmup
            else max(0.0, (total_steps - s) / max(total_steps - warmup, 1))
        ),
    )
    return optimizer, schedule


def train(
    mode: PairTraining,
    cfg: ClassifierTrainConfig,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    plan: StepPlan,
    step: int,
    checkpoint: Callable[[dict[str, Any]], None],
) -> tuple[int, float]:
    """Train from `step` to `plan.total_steps`, calling `checkpoint(state)` every
    `checkpoint_every_steps` and at the end; returns (steps reached, minutes this run).
    Epoch e's order is a permutation seeded by (seed, e), so a resumed run takes the
    batches an uninterrupted one takes."""
    model = mode.model
    model.train()
    started = time.monotonic()
    bar = tqdm(total=plan.total_steps, initial=step, desc="train", unit="step")
    running = []
    while step < plan.total_steps:
        epoch, offset = divmod(step, plan.steps_per_epoch)
        order = torch.randperm(
            mode.examples, generator=torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
        ).tolist()
        loss = mode.batch_loss(order[offset * cfg.batch_size : (offset + 1) * cfg.batch_size])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        running = [*running[-19:], loss.item()]
        bar.update(1)
        bar.set_postfix(loss=f"{np.mean(running):.3f}", epoch=f"{step / plan.steps_per_epoch:.2f}")
        if step % cfg.checkpoint_every_steps == 0 or step == plan.total_steps:
            checkpoint(training_state(optimizer, schedule, step, cfg))
            model.train()  # sentence-transformers' save leaves the model in eval mode
    bar.close()
    return step, (time.monotonic() - started) / 60
