"""AdamW whose bits do not depend on the CPU: torch's update with a correctly rounded sqrt.

torch.optim.AdamW on CPU takes `exp_avg_sq.sqrt()`, and ATen hands a contiguous float sqrt to
MKL's vector maths (vsSqrt). Under `MKL_CBWR=COMPATIBLE`, the branch the miniature pins for
its matrix products, that sqrt is not correctly rounded (about 15% of random inputs land one
unit in the last place off on an Intel Xeon), and an AMD EPYC under the same settings rounds
some of them differently: AdamW is the one primitive whose bits differed between the two CPUs
in the cpu fingerprint (docs/miniature.md). A correctly rounded square root has one answer on
every IEEE-754 machine, so `PortableAdamW` computes it with numpy (the CPU's sqrt instruction)
and otherwise performs torch's own single-tensor update, op for op, so that wherever torch's
sqrt happens to be correctly rounded the two optimizers agree bit for bit (a test checks
this). Its state dict is AdamW's: checkpoints load in either.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import numpy as np
import torch

from darling_nemo.schema.trl import TrlTrainerConfig

# the names `trainer.optimizer` accepts, read from the schema (their one home)
OPTIMIZERS = get_args(TrlTrainerConfig.model_fields["optimizer"].annotation)


def correctly_rounded_sqrt(values: torch.Tensor) -> torch.Tensor:
    """sqrt of a float32 or float64 CPU tensor, rounded to nearest as IEEE-754 requires."""
    array = values.detach().contiguous().numpy()
    return torch.from_numpy(np.sqrt(array))


class PortableAdamW(torch.optim.AdamW):
    """torch.optim.AdamW (decoupled weight decay, no amsgrad) with a correctly rounded sqrt."""

    def __init__(self, params, **kwargs) -> None:
        for option in ("amsgrad", "maximize", "capturable", "differentiable", "fused"):
            if kwargs.get(option):
                raise ValueError(f"PortableAdamW: {option}=True is not supported")
        if kwargs.get("foreach"):
            raise ValueError("PortableAdamW: foreach=True is not supported (one tensor at a time)")
        super().__init__(params, **kwargs)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is not None:
                    self._update(param, group)
        return loss

    def _update(self, param: torch.Tensor, group: dict) -> None:
        if param.device.type != "cpu" or param.grad.is_sparse:
            raise ValueError("PortableAdamW updates dense CPU tensors only")
        lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
        beta1, beta2 = group["betas"]
        state = self.state[param]
        if not state:  # as torch.optim.AdamW starts a parameter's state
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        grad, exp_avg, exp_avg_sq = param.grad, state["exp_avg"], state["exp_avg_sq"]
        state["step"] += 1
        if weight_decay != 0:
            param.mul_(1 - lr * weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        step = state["step"].item()
        step_size = lr / (1 - beta1**step)
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        denom = (correctly_rounded_sqrt(exp_avg_sq) / bias_correction2_sqrt).add_(eps)
        param.addcdiv_(exp_avg, denom, value=-step_size)


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The optimizer class a config's `trainer.optimizer` names."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}: one of {', '.join(OPTIMIZERS)}")
    return PortableAdamW if name == "adamw_portable" else torch.optim.AdamW


def use_optimizer(trainer, name: str) -> None:
    """Makes a transformers Trainer build `name` (`trainer.optimizer`) with the arguments its
    TrainingArguments give torch's AdamW (lr, betas, eps; weight decay per parameter group)."""
    cls = optimizer_class(name)
    if cls is torch.optim.AdamW:
        return
    chosen, kwargs = trainer.get_optimizer_cls_and_kwargs(trainer.args, trainer.model)
    if chosen is not torch.optim.AdamW:
        raise ValueError(f"trainer.optimizer={name} replaces torch's AdamW, not {chosen.__name__}")
    trainer.optimizer_cls_and_kwargs = (cls, kwargs)
