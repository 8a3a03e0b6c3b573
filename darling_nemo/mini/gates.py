"""Pre-registration 1's gates (docs/preregistration.md), read from a miniature's comparison.json.

    uv run python -m darling_nemo.mini.gates runs/mini_routes [--seeds 1 2 3]

Measured on the warm start and the first arm (GRPO) alone, over the seeds given (the plan's:
1-3). Prints each gate's value, its bound and PASS/FAIL; exits 0 only when all four hold.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from darling_nemo.config import load_config
from darling_nemo.schema import MiniConfig, validate_section

# The plan's bounds.
MIN_PASS64_DROP = 0.05
MAX_TRAIN_DIVERSITY = 0.9
MIN_HELDOUT_PROMPTS = 64
HARD_SUCCESS = (0.01, 0.05)


@dataclass(frozen=True)
class Gate:
    name: str
    value: float
    bound: str
    holds: bool

    def line(self) -> str:
        return f"{'PASS' if self.holds else 'FAIL'}  {self.name}: {self.value:.3f} ({self.bound})"


def gates(
    summary: Mapping, seeds: Sequence[int], heldout_prompts: int, baseline: str = "grpo"
) -> list[Gate]:
    """The four gates from comparison.json's per-seed records of the warm start and `baseline`."""
    keys = [str(s) for s in seeds]
    warm = [summary["warm_start"][k] for k in keys]
    grpo = [summary["arms"][baseline][k] for k in keys]
    drop = float(np.mean([w["pass@64"] for w in warm]) - np.mean([g["pass@64"] for g in grpo]))
    diversity = float(np.mean([g["train_diversity_mean"] for g in grpo]))
    hard = float(np.mean([w["hard/pass@1"] for w in warm]))
    low, high = HARD_SUCCESS
    return [
        Gate(
            "warm start pass@64 minus GRPO's",
            drop,
            f">= {MIN_PASS64_DROP}",
            drop >= MIN_PASS64_DROP,
        ),
        Gate(
            "GRPO training diversity",
            diversity,
            f"<= {MAX_TRAIN_DIVERSITY}",
            diversity <= MAX_TRAIN_DIVERSITY,
        ),
        Gate(
            "held-out prompts",
            heldout_prompts,
            f">= {MIN_HELDOUT_PROMPTS}",
            heldout_prompts >= MIN_HELDOUT_PROMPTS,
        ),
        Gate(
            "warm start per-sample success on hard held-out prompts",
            hard,
            f"in [{low}, {high}]",
            low <= hard <= high,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "run_dir", help="a miniature's output_dir (holds comparison.json, config.yaml)"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args(argv)
    run = Path(args.run_dir)
    summary = json.loads((run / "comparison.json").read_text())
    cfg = validate_section(MiniConfig, load_config(str(run / "config.yaml"), []))
    measured = gates(summary, args.seeds, cfg.task.heldout_grids, next(iter(cfg.arms)))
    print("\n".join(gate.line() for gate in measured))
    return 0 if all(gate.holds for gate in measured) else 1


if __name__ == "__main__":
    sys.exit(main())
