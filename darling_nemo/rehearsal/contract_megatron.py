"""Megatron contract, first part: the checks NeMo-RL v0.4.0's Megatron policy worker leaves to
the GPU (docs/contracts.md).

`ConfigContainer.validate()` lets three things through that fail (or silently do nothing) only
once a multi-node job has started: a `megatron_cfg` key the worker never reads (a typo),
a pipeline split the model's layers do not divide, and `policy.precision` disagreeing with the
optimizer's dtype flags. The keys the worker reads are taken from NeMo-RL's own source (an AST
scan of `nemo_rl/`), not from a list kept here, so the check follows the installed version.

Rehearsal-only: nothing here runs in a real training run.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

from darling_nemo.plan.architectures import resolve_architecture
from darling_nemo.rehearsal.contract_child import ContractError

KEY = "policy.megatron_cfg"
# precision -> (optimizer.bf16, optimizer.fp16) that Megatron's mixed precision expects
# Keys the worker does not read but NeMo-RL v0.4.0's own example configs carry (so users copy
# them): converter_type is auto-detected by Megatron-Bridge. Tolerated, not a typo.
TOLERATED = frozenset({"converter_type"})
PRECISION_FLAGS = {"bfloat16": (True, False), "float16": (False, True), "float32": (False, False)}


def _is_megatron_cfg(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Constant)
        and node.slice.value == "megatron_cfg"
    )


def keys_read(source: str) -> set[str]:
    """The keys one module reads from `...["megatron_cfg"]`: `[k]`, `.get(k)`, `k in ...`,
    and those read from a parameter named `megatron_config` (community_import.py)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            base = node.value
            if _is_megatron_cfg(base) or (
                isinstance(base, ast.Name) and base.id == "megatron_config"
            ):
                found.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and _is_megatron_cfg(node.func.value)
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
        elif (
            isinstance(node, ast.Compare)
            and isinstance(node.left, ast.Constant)
            and any(_is_megatron_cfg(c) for c in node.comparators)
        ):
            found.add(node.left.value)
    return {k for k in found if isinstance(k, str)}


@lru_cache(maxsize=1)
def worker_keys() -> frozenset[str]:
    """Every `megatron_cfg` key the installed NeMo-RL reads anywhere (`enabled` included)."""
    import nemo_rl

    root = Path(nemo_rl.__file__).parent
    keys: set[str] = set()
    for path in root.rglob("*.py"):
        keys |= keys_read(path.read_text())
    return frozenset(keys)


def check_keys(megatron_cfg: dict[str, Any], known: Iterable[str]) -> None:
    known = set(known) | TOLERATED
    unknown = sorted(set(megatron_cfg) - known)
    if unknown:
        raise ContractError(
            f"{KEY}.{unknown[0]}: NeMo-RL v0.4.0's Megatron worker never reads this key, so "
            f"it would silently do nothing (a typo?); known keys: {', '.join(sorted(known))}"
        )


def check_pipeline(megatron_cfg: dict[str, Any], num_layers: int, model: str) -> None:
    """Megatron puts `first` and `last` layers on the outer stages (when set) and splits
    the rest evenly over the remaining stages (megatron/core/transformer/transformer_config.py
    at af73aa2 checks the middle stages only when first or last is set; an even split with
    neither set is refused only when the model is built)."""
    pp = megatron_cfg["pipeline_model_parallel_size"]
    first = megatron_cfg.get("num_layers_in_first_pipeline_stage")
    last = megatron_cfg.get("num_layers_in_last_pipeline_stage")
    if pp == 1:
        return
    rest = num_layers - (first or 0) - (last or 0)
    middle = pp - (first is not None) - (last is not None)
    if rest < 0 or (middle == 0 and rest != 0) or (middle > 0 and rest % middle):
        raise ContractError(
            f"{KEY}.pipeline_model_parallel_size={pp}: {model}'s {num_layers} layers do not "
            f"split over {pp} stages (first stage {first}, last stage {last}); choose a "
            f"size that divides {num_layers} or set num_layers_in_first/last_pipeline_stage"
        )


def check_precision(precision: str, optimizer: dict[str, Any]) -> None:
    if precision not in PRECISION_FLAGS:
        raise ContractError(f"policy.precision={precision!r}: one of {sorted(PRECISION_FLAGS)}")
    bf16, fp16 = PRECISION_FLAGS[precision]
    for flag, want in (("bf16", bf16), ("fp16", fp16)):
        if optimizer.get(flag, False) != want:
            raise ContractError(
                f"{KEY}.optimizer.{flag}={optimizer.get(flag)!r} disagrees with "
                f"policy.precision={precision!r} (expects bf16={bf16}, fp16={fp16})"
            )


def check(cfg: dict[str, Any], known: Iterable[str] | None = None) -> str:
    """All checks on a resolved NeMo-RL config; returns what it validated (one line).
    Raises ContractError naming the key. `known` defaults to the installed NeMo-RL's keys."""
    policy = cfg["policy"]
    mcfg = policy["megatron_cfg"]
    if not mcfg.get("enabled", False):
        return "megatron_cfg disabled (DTensor policy): nothing to check"
    check_keys(mcfg, worker_keys() if known is None else known)
    arch = resolve_architecture(policy["model_name"], "policy.model_name")
    check_pipeline(mcfg, arch.num_layers, policy["model_name"])
    check_precision(policy["precision"], mcfg["optimizer"])
    return (
        f"{policy['model_name']}: {arch.num_layers} layers, "
        f"TP {mcfg['tensor_model_parallel_size']} PP {mcfg['pipeline_model_parallel_size']} "
        f"CP {mcfg['context_parallel_size']} SP {mcfg['sequence_parallel']}, "
        f"optimizer {mcfg['optimizer']['optimizer']}, precision {policy['precision']}"
    )


def run(cfg: dict[str, Any]) -> str:
    """The phase as the rehearsal prints it: 'PASS (...)', 'SKIPPED (why)'; raises
    ContractError on a failure."""
    try:
        import nemo_rl  # noqa: F401
    except ImportError as err:
        return f"SKIPPED (NeMo-RL not importable here: {err})"
    return f"PASS ({check(cfg)})"
